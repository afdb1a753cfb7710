#include "binding_registry.h"

#include <c10/cuda/CUDAStream.h>

#include <cstdint>

extern "C" int launch_new_gelu(const float* x, float* y, long long n, cudaStream_t stream);

namespace {

torch::Tensor new_gelu_forward(const torch::Tensor& x) {
  TORCH_CHECK(x.is_cuda(), "new_gelu_forward: expected a CUDA tensor, got one on ", x.device());
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "new_gelu_forward: expected float32, got ", x.scalar_type());
  TORCH_CHECK(x.is_contiguous(), "new_gelu_forward: expected a contiguous tensor");
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(x.data_ptr()) % 16 == 0, "new_gelu_forward: expected 16-byte alignment");
  auto y = torch::empty_like(x);
  const int err = launch_new_gelu(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(),
                               at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "new_gelu_forward: kernel launch failed: ", cudaGetErrorString(static_cast<cudaError_t>(err)));
  return y;
}

}  // namespace

REGISTER_BINDING(new_gelu_forward, new_gelu_forward);
