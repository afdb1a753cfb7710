#include "binding_registry.h"

#include <c10/cuda/CUDAStream.h>

#include <cstdint>

extern "C" int launch_mish(const float* x, float* y, long long n, cudaStream_t stream);

namespace {

torch::Tensor mish_forward(const torch::Tensor& x) {
  TORCH_CHECK(x.is_cuda(), "mish_forward: expected a CUDA tensor, got one on ", x.device());
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "mish_forward: expected float32, got ", x.scalar_type());
  TORCH_CHECK(x.is_contiguous(), "mish_forward: expected a contiguous tensor");
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(x.data_ptr()) % 16 == 0, "mish_forward: expected 16-byte alignment");
  auto y = torch::empty_like(x);
  const int err = launch_mish(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(),
                               at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "mish_forward: kernel launch failed: ", cudaGetErrorString(static_cast<cudaError_t>(err)));
  return y;
}

}  // namespace

REGISTER_BINDING(mish_forward, mish_forward);
