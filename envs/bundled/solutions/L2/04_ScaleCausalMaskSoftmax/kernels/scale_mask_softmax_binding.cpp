#include "binding_registry.h"

#include <c10/cuda/CUDAStream.h>

#include <cstdint>

extern "C" int launch_scale_mask_softmax(const float* att, const float* mask, float* y, long long rows, int T,
                                         int mask_stride, float scale, cudaStream_t stream);

namespace {

void check_float_cuda(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), "scale_mask_softmax_forward: expected ", name, " on CUDA, got ", t.device());
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, "scale_mask_softmax_forward: expected ", name, " float32, got ",
              t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), "scale_mask_softmax_forward: expected ", name, " contiguous");
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0, "scale_mask_softmax_forward: expected ",
              name, " 16-byte aligned");
}

torch::Tensor scale_mask_softmax_forward(const torch::Tensor& att, const torch::Tensor& mask, double scale) {
  check_float_cuda(att, "att");
  check_float_cuda(mask, "mask");
  TORCH_CHECK(att.dim() >= 2 && att.size(-1) == att.size(-2), "scale_mask_softmax_forward: expected att of shape "
              "(..., T, T), got ", att.sizes());
  const int64_t T = att.size(-1);
  TORCH_CHECK(mask.dim() >= 2 && mask.numel() == mask.size(-1) * mask.size(-2) && mask.size(-1) >= T &&
                  mask.size(-2) >= T,
              "scale_mask_softmax_forward: expected a (1, 1, L, L) mask with L >= T, got ", mask.sizes());
  TORCH_CHECK(T % 4 == 0 && T <= 2048 && mask.size(-1) % 4 == 0, "scale_mask_softmax_forward: expected T and the "
              "mask width to be multiples of 4 (T <= 2048), got T=", T, " and mask ", mask.sizes());
  auto y = torch::empty_like(att);
  const int err = launch_scale_mask_softmax(att.data_ptr<float>(), mask.data_ptr<float>(), y.data_ptr<float>(),
                                            att.numel() / T, (int)T, (int)mask.size(-1), (float)scale,
                                            at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "scale_mask_softmax_forward: kernel launch failed: ",
              cudaGetErrorString(static_cast<cudaError_t>(err)));
  return y;
}

}  // namespace

REGISTER_BINDING(scale_mask_softmax_forward, scale_mask_softmax_forward);
