#include "binding_registry.h"

#include <c10/cuda/CUDAStream.h>

#include <cstdint>

extern "C" int launch_swish(const float* x, float* y, long long n, cudaStream_t stream);

namespace {

torch::Tensor swish_forward(const torch::Tensor& x) {
  TORCH_CHECK(x.is_cuda(), "swish_forward: expected a CUDA tensor, got one on ", x.device());
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "swish_forward: expected float32, got ", x.scalar_type());
  TORCH_CHECK(x.is_contiguous(), "swish_forward: expected a contiguous tensor");
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(x.data_ptr()) % 16 == 0, "swish_forward: expected 16-byte alignment");
  auto y = torch::empty_like(x);
  const int err = launch_swish(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(),
                               at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "swish_forward: kernel launch failed: ", cudaGetErrorString(static_cast<cudaError_t>(err)));
  return y;
}

}  // namespace

REGISTER_BINDING(swish_forward, swish_forward);
