#include "binding_registry.h"

#include <c10/cuda/CUDAStream.h>

#include <cstdint>

extern "C" int launch_group_norm_silu(const float* x, const float* gamma, const float* beta, float* y,
                                      float* mean_rstd, int images, int C, int G, int HW, float eps,
                                      cudaStream_t stream);

namespace {

void check_float_cuda(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), "group_norm_silu_forward: expected ", name, " on CUDA, got ", t.device());
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, "group_norm_silu_forward: expected ", name, " float32, got ",
              t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), "group_norm_silu_forward: expected ", name, " contiguous");
}

torch::Tensor group_norm_silu_forward(const torch::Tensor& x, const torch::Tensor& gamma, const torch::Tensor& beta,
                                      int64_t groups, double eps) {
  check_float_cuda(x, "x");
  check_float_cuda(gamma, "gamma");
  check_float_cuda(beta, "beta");
  TORCH_CHECK(x.dim() >= 3, "group_norm_silu_forward: expected x of shape (N, C, ...), got ", x.sizes());
  const int64_t images = x.size(0), C = x.size(1);
  const int64_t HW = x.numel() / (images * C);
  TORCH_CHECK(gamma.numel() == C && beta.numel() == C, "group_norm_silu_forward: expected gamma and beta of ", C,
              " elements");
  TORCH_CHECK(groups > 0 && C % groups == 0 && HW % 4 == 0 && images * C <= 65535 && HW < (1LL << 31),
              "group_norm_silu_forward: expected C divisible by groups, H*W % 4 == 0 and N*C <= 65535, got ",
              x.sizes(), " with ", groups, " groups");
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(x.data_ptr()) % 16 == 0, "group_norm_silu_forward: expected x "
              "16-byte aligned");
  auto y = torch::empty_like(x);
  auto mean_rstd = torch::empty({images * groups * 2}, x.options());
  const int err = launch_group_norm_silu(x.data_ptr<float>(), gamma.data_ptr<float>(), beta.data_ptr<float>(),
                                         y.data_ptr<float>(), mean_rstd.data_ptr<float>(), (int)images, (int)C,
                                         (int)groups, (int)HW, (float)eps, at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "group_norm_silu_forward: kernel launch failed: ",
              cudaGetErrorString(static_cast<cudaError_t>(err)));
  return y;
}

}  // namespace

REGISTER_BINDING(group_norm_silu_forward, group_norm_silu_forward);
