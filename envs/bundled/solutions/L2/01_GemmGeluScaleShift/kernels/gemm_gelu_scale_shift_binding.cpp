#include "binding_registry.h"

#include <c10/cuda/CUDAStream.h>

#include <cstdint>

extern "C" int launch_gemm_gelu_scale_shift(const float* X, const float* W, const float* bias, const float* scale,
                                            const float* shift, float* Y, int M, int N, int K, cudaStream_t stream);

namespace {

void check_float_cuda(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), "gemm_gelu_scale_shift_forward: expected ", name, " on CUDA, got ", t.device());
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, "gemm_gelu_scale_shift_forward: expected ", name,
              " float32, got ", t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), "gemm_gelu_scale_shift_forward: expected ", name, " contiguous");
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0, "gemm_gelu_scale_shift_forward: expected ",
              name, " 16-byte aligned");
}

torch::Tensor gemm_gelu_scale_shift_forward(const torch::Tensor& x, const torch::Tensor& weight,
                                            const torch::Tensor& bias, const torch::Tensor& scale,
                                            const torch::Tensor& shift) {
  check_float_cuda(x, "x");
  check_float_cuda(weight, "weight");
  check_float_cuda(bias, "bias");
  check_float_cuda(scale, "scale");
  check_float_cuda(shift, "shift");
  TORCH_CHECK(x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1), "gemm_gelu_scale_shift_forward: "
              "expected x (M, K) and weight (N, K), got ", x.sizes(), " and ", weight.sizes());
  const int64_t M = x.size(0), K = x.size(1), N = weight.size(0);
  TORCH_CHECK(bias.numel() == N && scale.numel() == N && shift.numel() == N, "gemm_gelu_scale_shift_forward: "
              "expected bias, scale and shift of ", N, " elements");
  TORCH_CHECK(M % 128 == 0 && N % 128 == 0 && K % 8 == 0 && K > 0 && M / 128 <= 65535 && N < (1LL << 31),
              "gemm_gelu_scale_shift_forward: expected M, N multiples of 128 and K a multiple of 8, got M=", M,
              " N=", N, " K=", K);
  auto y = torch::empty({M, N}, x.options());
  const int err = launch_gemm_gelu_scale_shift(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(),
                                               scale.data_ptr<float>(), shift.data_ptr<float>(), y.data_ptr<float>(),
                                               (int)M, (int)N, (int)K, at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "gemm_gelu_scale_shift_forward: kernel launch failed: ",
              cudaGetErrorString(static_cast<cudaError_t>(err)));
  return y;
}

}  // namespace

REGISTER_BINDING(gemm_gelu_scale_shift_forward, gemm_gelu_scale_shift_forward);
