#include "binding_registry.h"

#include <c10/cuda/CUDAStream.h>

extern "C" int launch_swish_inplace(float* x, long long n, cudaStream_t stream);

namespace {

torch::Tensor swish_inplace(torch::Tensor x) {
  const int err = launch_swish_inplace(x.data_ptr<float>(), x.numel(), at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "launch failed: ", cudaGetErrorString(static_cast<cudaError_t>(err)));
  return x;
}

}  // namespace

REGISTER_BINDING(swish_inplace, swish_inplace);
