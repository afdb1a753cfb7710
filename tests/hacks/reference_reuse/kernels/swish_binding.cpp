#include "binding_registry.h"

#include <c10/cuda/CUDAStream.h>

extern "C" int launch_swish(const float* x, float* y, long long n, cudaStream_t stream);

namespace {

torch::Tensor swish_forward(const torch::Tensor& x) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "swish_forward: expected a contiguous CUDA float32 tensor");
  auto y = torch::empty_like(x);
  const int err = launch_swish(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(),
                               at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "swish_forward: launch failed: ", cudaGetErrorString(static_cast<cudaError_t>(err)));
  return y;
}

}  // namespace

REGISTER_BINDING(swish_forward, swish_forward);
