#include "binding_registry.h"

#include <c10/cuda/CUDAStream.h>

#include <cstdint>

extern "C" int launch_dwsep_block(const float* x, const float* dw_w, const float* bn1_mean, const float* bn1_var,
                                  const float* bn1_weight, const float* bn1_bias, float eps1, const float* pw_w,
                                  const float* bn2_mean, const float* bn2_var, const float* bn2_weight,
                                  const float* bn2_bias, float eps2, float* h, float* out, int images, int C, int H,
                                  int W, cudaStream_t stream);

namespace {

void check_float_cuda(const torch::Tensor& t, const char* name, int64_t numel) {
  TORCH_CHECK(t.is_cuda(), "dwsep_block_forward: expected ", name, " on CUDA, got ", t.device());
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, "dwsep_block_forward: expected ", name, " float32, got ",
              t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), "dwsep_block_forward: expected ", name, " contiguous");
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0, "dwsep_block_forward: expected ", name,
              " 16-byte aligned");
  TORCH_CHECK(numel < 0 || t.numel() == numel, "dwsep_block_forward: expected ", name, " of ", numel,
              " elements, got ", t.numel());
}

torch::Tensor dwsep_block_forward(const torch::Tensor& x, const torch::Tensor& dw_weight,
                                  const torch::Tensor& bn1_mean, const torch::Tensor& bn1_var,
                                  const torch::Tensor& bn1_weight, const torch::Tensor& bn1_bias,
                                  const torch::Tensor& pw_weight, const torch::Tensor& bn2_mean,
                                  const torch::Tensor& bn2_var, const torch::Tensor& bn2_weight,
                                  const torch::Tensor& bn2_bias, double eps1, double eps2) {
  TORCH_CHECK(x.dim() == 4, "dwsep_block_forward: expected x of shape (N, C, H, W), got ", x.sizes());
  const int64_t images = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  check_float_cuda(x, "x", -1);
  check_float_cuda(dw_weight, "dw_weight", C * 9);
  check_float_cuda(pw_weight, "pw_weight", C * C);
  for (const auto* t : {&bn1_mean, &bn1_var, &bn1_weight, &bn1_bias, &bn2_mean, &bn2_var, &bn2_weight, &bn2_bias}) {
    check_float_cuda(*t, "a batch-norm tensor", C);
  }
  TORCH_CHECK(C % 128 == 0 && (H * W) % 128 == 0 && images <= 65535 && H * W < (1LL << 31),
              "dwsep_block_forward: expected C and H*W multiples of 128, got ", x.sizes());
  auto h = torch::empty_like(x);
  auto out = torch::empty_like(x);
  const int err = launch_dwsep_block(
      x.data_ptr<float>(), dw_weight.data_ptr<float>(), bn1_mean.data_ptr<float>(), bn1_var.data_ptr<float>(),
      bn1_weight.data_ptr<float>(), bn1_bias.data_ptr<float>(), (float)eps1, pw_weight.data_ptr<float>(),
      bn2_mean.data_ptr<float>(), bn2_var.data_ptr<float>(), bn2_weight.data_ptr<float>(), bn2_bias.data_ptr<float>(),
      (float)eps2, h.data_ptr<float>(), out.data_ptr<float>(), (int)images, (int)C, (int)H, (int)W,
      at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "dwsep_block_forward: kernel launch failed: ", cudaGetErrorString(static_cast<cudaError_t>(err)));
  return out;
}

}  // namespace

REGISTER_BINDING(dwsep_block_forward, dwsep_block_forward);
