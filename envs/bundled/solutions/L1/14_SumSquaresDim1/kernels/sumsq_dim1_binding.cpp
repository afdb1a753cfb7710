#include "binding_registry.h"

#include <c10/cuda/CUDAStream.h>

#include <cstdint>

extern "C" int launch_sumsq_dim1(const float* x, float* y, int B, int R, int D, cudaStream_t stream);

namespace {

torch::Tensor sumsq_dim1_forward(const torch::Tensor& x) {
  TORCH_CHECK(x.is_cuda(), "sumsq_dim1_forward: expected a CUDA tensor, got one on ", x.device());
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "sumsq_dim1_forward: expected float32, got ", x.scalar_type());
  TORCH_CHECK(x.is_contiguous() && x.dim() == 3, "sumsq_dim1_forward: expected a contiguous (B, R, D) tensor, got ",
              x.sizes());
  const int64_t B = x.size(0), R = x.size(1), D = x.size(2);
  TORCH_CHECK(D % 4 == 0 && B <= 65535 && R < (1LL << 31) && D < (1LL << 31), "sumsq_dim1_forward: expected "
              "D % 4 == 0 and B <= 65535, got ", x.sizes());
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(x.data_ptr()) % 16 == 0, "sumsq_dim1_forward: expected 16-byte "
              "alignment");
  auto y = torch::empty({B, D}, x.options());
  const int err = launch_sumsq_dim1(x.data_ptr<float>(), y.data_ptr<float>(), (int)B, (int)R, (int)D,
                                    at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "sumsq_dim1_forward: kernel launch failed: ",
              cudaGetErrorString(static_cast<cudaError_t>(err)));
  return y;
}

}  // namespace

REGISTER_BINDING(sumsq_dim1_forward, sumsq_dim1_forward);
