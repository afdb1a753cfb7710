#include "binding_registry.h"

#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

extern "C" int host_swish(const float* x, float* y, long long n, cudaStream_t caller);

namespace {

torch::Tensor swish_on_host_binding(const torch::Tensor& x) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous(), "swish_on_host: expected a contiguous CUDA tensor");
  auto y = torch::empty_like(x);
  const int err = host_swish(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(),
                             at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "swish_on_host failed: ", cudaGetErrorString(static_cast<cudaError_t>(err)));
  return y;
}

}  // namespace

REGISTER_BINDING(swish_on_host, swish_on_host_binding);
