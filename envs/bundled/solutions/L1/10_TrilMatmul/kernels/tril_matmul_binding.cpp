#include "binding_registry.h"

#include <c10/cuda/CUDAStream.h>

#include <cstdint>

extern "C" int launch_tril_matmul(const float* A, const float* B, float* C, int N, cudaStream_t stream);

namespace {

void check_float_cuda(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), "tril_matmul_forward: expected ", name, " on CUDA, got ", t.device());
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, "tril_matmul_forward: expected ", name, " float32, got ",
              t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), "tril_matmul_forward: expected ", name, " contiguous");
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0, "tril_matmul_forward: expected ", name,
              " 16-byte aligned");
}

torch::Tensor tril_matmul_forward(const torch::Tensor& A, const torch::Tensor& B) {
  check_float_cuda(A, "A");
  check_float_cuda(B, "B");
  TORCH_CHECK(A.dim() == 2 && A.sizes() == B.sizes() && A.size(0) == A.size(1), "tril_matmul_forward: expected two "
              "square matrices of one size, got ", A.sizes(), " and ", B.sizes());
  const int64_t N = A.size(0);
  TORCH_CHECK(N % 128 == 0 && N <= 32768, "tril_matmul_forward: expected N a multiple of 128 (at most 32768), got ",
              N);
  auto C = torch::empty_like(A);
  const int err = launch_tril_matmul(A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), (int)N,
                                     at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "tril_matmul_forward: kernel launch failed: ",
              cudaGetErrorString(static_cast<cudaError_t>(err)));
  return C;
}

}  // namespace

REGISTER_BINDING(tril_matmul_forward, tril_matmul_forward);
