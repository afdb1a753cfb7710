#include "binding_registry.h"

#include <c10/cuda/CUDAStream.h>

#include <cstdint>

extern "C" int launch_diag_matmul(const float* a, const float* b, float* c, int N, int M, cudaStream_t stream);

namespace {

void check_float_cuda(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), "diag_matmul_forward: expected ", name, " on CUDA, got ", t.device());
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, "diag_matmul_forward: expected ", name, " float32, got ",
              t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), "diag_matmul_forward: expected ", name, " contiguous");
}

torch::Tensor diag_matmul_forward(const torch::Tensor& A, const torch::Tensor& B) {
  check_float_cuda(A, "A");
  check_float_cuda(B, "B");
  TORCH_CHECK(A.dim() == 1 && B.dim() == 2 && B.size(0) == A.size(0), "diag_matmul_forward: expected A (N,) and "
              "B (N, M), got ", A.sizes(), " and ", B.sizes());
  const int64_t N = B.size(0), M = B.size(1);
  TORCH_CHECK(M % 4 == 0 && N <= 65535 && M < (1LL << 31), "diag_matmul_forward: expected M % 4 == 0 and "
              "N <= 65535, got ", B.sizes());
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(B.data_ptr()) % 16 == 0, "diag_matmul_forward: expected B 16-byte "
              "aligned");
  auto C = torch::empty_like(B);
  const int err = launch_diag_matmul(A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), (int)N, (int)M,
                                     at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "diag_matmul_forward: kernel launch failed: ",
              cudaGetErrorString(static_cast<cudaError_t>(err)));
  return C;
}

}  // namespace

REGISTER_BINDING(diag_matmul_forward, diag_matmul_forward);
