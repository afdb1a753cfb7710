#include "binding_registry.h"

#include <c10/cuda/CUDAStream.h>

#include <cstdint>

extern "C" int launch_bmm16(const float* A, const float* B, float* C, long long batch, cudaStream_t stream);

namespace {

void check_float_cuda(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), "bmm16_forward: expected ", name, " on CUDA, got ", t.device());
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, "bmm16_forward: expected ", name, " float32, got ", t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), "bmm16_forward: expected ", name, " contiguous");
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0, "bmm16_forward: expected ", name,
              " 16-byte aligned");
}

torch::Tensor bmm16_forward(const torch::Tensor& A, const torch::Tensor& B) {
  check_float_cuda(A, "A");
  check_float_cuda(B, "B");
  TORCH_CHECK(A.dim() == 3 && A.sizes() == B.sizes() && A.size(1) == 16 && A.size(2) == 16,
              "bmm16_forward: expected A and B of shape (batch, 16, 16), got ", A.sizes(), " and ", B.sizes());
  auto C = torch::empty_like(A);
  const int err = launch_bmm16(A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), A.size(0),
                               at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "bmm16_forward: kernel launch failed: ", cudaGetErrorString(static_cast<cudaError_t>(err)));
  return C;
}

}  // namespace

REGISTER_BINDING(bmm16_forward, bmm16_forward);
