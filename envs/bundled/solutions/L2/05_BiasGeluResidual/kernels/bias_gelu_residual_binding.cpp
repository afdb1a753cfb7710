#include "binding_registry.h"

#include <c10/cuda/CUDAStream.h>

#include <cstdint>

extern "C" int launch_bias_gelu_residual(const float* x, const float* h, const float* bias, float* out, int rows,
                                         int D, cudaStream_t stream);

namespace {

void check_float_cuda(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), "bias_gelu_residual_forward: expected ", name, " on CUDA, got ", t.device());
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, "bias_gelu_residual_forward: expected ", name, " float32, got ",
              t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), "bias_gelu_residual_forward: expected ", name, " contiguous");
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0, "bias_gelu_residual_forward: expected ",
              name, " 16-byte aligned");
}

torch::Tensor bias_gelu_residual_forward(const torch::Tensor& x, const torch::Tensor& h, const torch::Tensor& bias) {
  check_float_cuda(x, "x");
  check_float_cuda(h, "h");
  check_float_cuda(bias, "bias");
  TORCH_CHECK(x.sizes() == h.sizes() && x.dim() >= 1, "bias_gelu_residual_forward: expected x and h of one shape, "
              "got ", x.sizes(), " and ", h.sizes());
  const int64_t D = x.size(-1);
  const int64_t rows = D == 0 ? 0 : x.numel() / D;
  TORCH_CHECK(bias.numel() == D && D % 4 == 0 && rows <= 65535 && D < (1LL << 31), "bias_gelu_residual_forward: "
              "expected bias of ", D, " elements, D % 4 == 0 and at most 65535 rows, got ", x.sizes());
  auto out = torch::empty_like(x);
  const int err = launch_bias_gelu_residual(x.data_ptr<float>(), h.data_ptr<float>(), bias.data_ptr<float>(),
                                            out.data_ptr<float>(), (int)rows, (int)D,
                                            at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "bias_gelu_residual_forward: kernel launch failed: ",
              cudaGetErrorString(static_cast<cudaError_t>(err)));
  return out;
}

}  // namespace

REGISTER_BINDING(bias_gelu_residual_forward, bias_gelu_residual_forward);
