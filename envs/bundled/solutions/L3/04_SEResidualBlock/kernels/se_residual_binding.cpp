#include "binding_registry.h"

#include <c10/cuda/CUDAStream.h>

#include <cstdint>

extern "C" int launch_se_residual(const float* x, const float* identity, const float* w1, const float* b1,
                                  const float* w2, const float* b2, float* means, float* gates, float* out,
                                  int images, int C, int R, int HW, cudaStream_t stream);

namespace {

void check_float_cuda(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), "se_residual_forward: expected ", name, " on CUDA, got ", t.device());
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, "se_residual_forward: expected ", name, " float32, got ",
              t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), "se_residual_forward: expected ", name, " contiguous");
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0, "se_residual_forward: expected ", name,
              " 16-byte aligned");
}

torch::Tensor se_residual_forward(const torch::Tensor& x, const torch::Tensor& identity, const torch::Tensor& w1,
                                  const torch::Tensor& b1, const torch::Tensor& w2, const torch::Tensor& b2) {
  check_float_cuda(x, "x");
  check_float_cuda(identity, "identity");
  check_float_cuda(w1, "fc1.weight");
  check_float_cuda(b1, "fc1.bias");
  check_float_cuda(w2, "fc2.weight");
  check_float_cuda(b2, "fc2.bias");
  TORCH_CHECK(x.dim() == 4 && x.sizes() == identity.sizes(), "se_residual_forward: expected x and identity of one "
              "shape (N, C, H, W), got ", x.sizes(), " and ", identity.sizes());
  const int64_t images = x.size(0), C = x.size(1), HW = x.size(2) * x.size(3);
  TORCH_CHECK(w1.dim() == 2 && w1.size(1) == C && w2.dim() == 2 && w2.size(0) == C && w2.size(1) == w1.size(0) &&
                  b1.numel() == w1.size(0) && b2.numel() == C,
              "se_residual_forward: expected fc1 (R, C) and fc2 (C, R) for C=", C, ", got ", w1.sizes(), " and ",
              w2.sizes());
  const int64_t R = w1.size(0);
  TORCH_CHECK(C <= 1024 && R <= 64 && HW % 4 == 0 && images * C <= 65535 && HW < (1LL << 31),
              "se_residual_forward: expected C <= 1024, C/reduction <= 64, H*W % 4 == 0, N*C <= 65535, got ",
              x.sizes(), " with R=", R);
  auto out = torch::empty_like(x);
  auto means = torch::empty({images * C}, x.options());
  auto gates = torch::empty({images * C}, x.options());
  const int err = launch_se_residual(x.data_ptr<float>(), identity.data_ptr<float>(), w1.data_ptr<float>(),
                                     b1.data_ptr<float>(), w2.data_ptr<float>(), b2.data_ptr<float>(),
                                     means.data_ptr<float>(), gates.data_ptr<float>(), out.data_ptr<float>(),
                                     (int)images, (int)C, (int)R, (int)HW, at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "se_residual_forward: kernel launch failed: ", cudaGetErrorString(static_cast<cudaError_t>(err)));
  return out;
}

}  // namespace

REGISTER_BINDING(se_residual_forward, se_residual_forward);
