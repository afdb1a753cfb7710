#include "binding_registry.h"

#include <c10/cuda/CUDAStream.h>

extern "C" int launch_zeros(float* y, long long n, cudaStream_t stream);

namespace {

torch::Tensor softmax_zeros(const torch::Tensor& x) {
  auto y = torch::empty_like(x);
  const int err = launch_zeros(y.data_ptr<float>(), y.numel(), at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "launch failed: ", cudaGetErrorString(static_cast<cudaError_t>(err)));
  return y;
}

}  // namespace

REGISTER_BINDING(softmax_zeros, softmax_zeros);
