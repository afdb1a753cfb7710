// Tensor glue for kernels/reverse.cu: check, allocate, launch on torch's current stream, register.
#include "binding_registry.h"

#include <c10/cuda/CUDAStream.h>

extern "C" int launch_reverse(const float* x, float* y, long long n, cudaStream_t stream);

namespace {

torch::Tensor reverse_forward(const torch::Tensor& x) {
  TORCH_CHECK(x.is_cuda(), "reverse_forward: expected a CUDA tensor, got one on ", x.device());
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "reverse_forward: expected float32, got ", x.scalar_type());
  TORCH_CHECK(x.is_contiguous(), "reverse_forward: expected a contiguous tensor");
  auto y = torch::empty_like(x);
  const int err = launch_reverse(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(),
                              c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "reverse_forward: launch failed: ", cudaGetErrorString(static_cast<cudaError_t>(err)));
  return y;
}

}  // namespace

REGISTER_BINDING(reverse_forward, reverse_forward);
