// Tensor glue for kernels/abs.cu: check, allocate, launch on torch's current stream, register.
#include "binding_registry.h"

#include <c10/cuda/CUDAStream.h>

extern "C" int launch_abs(const float* x, float* y, long long n, cudaStream_t stream);

namespace {

torch::Tensor abs_forward(const torch::Tensor& x) {
  TORCH_CHECK(x.is_cuda(), "abs_forward: expected a CUDA tensor, got one on ", x.device());
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "abs_forward: expected float32, got ", x.scalar_type());
  TORCH_CHECK(x.is_contiguous(), "abs_forward: expected a contiguous tensor");
  auto y = torch::empty_like(x);
  const int err = launch_abs(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(),
                              c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "abs_forward: launch failed: ", cudaGetErrorString(static_cast<cudaError_t>(err)));
  return y;
}

}  // namespace

REGISTER_BINDING(abs_forward, abs_forward);
