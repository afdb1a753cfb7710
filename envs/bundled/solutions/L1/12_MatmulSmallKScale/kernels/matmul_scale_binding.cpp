#include "binding_registry.h"

#include <c10/cuda/CUDAStream.h>

#include <cstdint>

extern "C" int launch_matmul_scale(const float* A, const float* B, float* C, int M, int N, int K, float alpha,
                                   cudaStream_t stream);

namespace {

void check_float_cuda(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), "matmul_scale_forward: expected ", name, " on CUDA, got ", t.device());
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, "matmul_scale_forward: expected ", name, " float32, got ",
              t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), "matmul_scale_forward: expected ", name, " contiguous");
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0, "matmul_scale_forward: expected ", name,
              " 16-byte aligned");
}

torch::Tensor matmul_scale_forward(const torch::Tensor& A, const torch::Tensor& B, double scale) {
  check_float_cuda(A, "A");
  check_float_cuda(B, "B");
  TORCH_CHECK(A.dim() == 2 && B.dim() == 2 && A.size(1) == B.size(0), "matmul_scale_forward: expected A (M, K) "
              "and B (K, N), got ", A.sizes(), " and ", B.sizes());
  const int64_t M = A.size(0), K = A.size(1), N = B.size(1);
  TORCH_CHECK(M % 128 == 0 && N % 128 == 0 && K % 8 == 0 && K > 0 && M / 128 <= 65535 && N < (1LL << 31),
              "matmul_scale_forward: expected M, N multiples of 128 and K a multiple of 8, got M=", M, " N=", N,
              " K=", K);
  auto C = torch::empty({M, N}, A.options());
  const int err = launch_matmul_scale(A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), (int)M, (int)N,
                                      (int)K, (float)scale, at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "matmul_scale_forward: kernel launch failed: ",
              cudaGetErrorString(static_cast<cudaError_t>(err)));
  return C;
}

}  // namespace

REGISTER_BINDING(matmul_scale_forward, matmul_scale_forward);
