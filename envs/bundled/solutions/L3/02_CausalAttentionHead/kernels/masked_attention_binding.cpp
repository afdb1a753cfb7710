#include "binding_registry.h"

#include <c10/cuda/CUDAStream.h>

#include <cstdint>

extern "C" int launch_masked_attention(const float* q, const float* k, const float* v, const float* mask,
                                       int mask_stride, int* classes, float* y, int B, int T, float scale,
                                       cudaStream_t stream);

namespace {

void check_float_cuda(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), "masked_attention_forward: expected ", name, " on CUDA, got ", t.device());
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, "masked_attention_forward: expected ", name, " float32, got ",
              t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), "masked_attention_forward: expected ", name, " contiguous");
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0, "masked_attention_forward: expected ", name,
              " 16-byte aligned");
}

torch::Tensor masked_attention_forward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                       const torch::Tensor& mask, double scale) {
  check_float_cuda(q, "q");
  check_float_cuda(k, "k");
  check_float_cuda(v, "v");
  check_float_cuda(mask, "mask");
  TORCH_CHECK(q.dim() == 3 && q.sizes() == k.sizes() && q.sizes() == v.sizes() && q.size(2) == 64,
              "masked_attention_forward: expected q, k, v of one shape (B, T, 64), got ", q.sizes(), ", ", k.sizes(),
              ", ", v.sizes());
  const int64_t B = q.size(0), T = q.size(1);
  TORCH_CHECK(T % 64 == 0 && B <= 65535, "masked_attention_forward: expected T a multiple of 64, got ", T);
  TORCH_CHECK(mask.dim() >= 2 && mask.numel() == mask.size(-1) * mask.size(-2) && mask.size(-1) >= T &&
                  mask.size(-2) >= T,
              "masked_attention_forward: expected a (1, L, L) mask with L >= T, got ", mask.sizes());
  auto y = torch::empty_like(q);
  const int64_t nt = T / 64;
  auto classes = torch::empty({nt * nt}, q.options().dtype(torch::kInt32));
  const int err = launch_masked_attention(q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(),
                                          mask.data_ptr<float>(), (int)mask.size(-1), classes.data_ptr<int>(),
                                          y.data_ptr<float>(), (int)B, (int)T, (float)scale,
                                          at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "masked_attention_forward: kernel launch failed: ",
              cudaGetErrorString(static_cast<cudaError_t>(err)));
  return y;
}

}  // namespace

REGISTER_BINDING(masked_attention_forward, masked_attention_forward);
