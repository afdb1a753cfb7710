#include "binding_registry.h"

#include <c10/cuda/CUDAStream.h>

#include <cstdint>

extern "C" int launch_dwconv_bn_relu(const float* x, const float* w, const float* bn_mean, const float* bn_var,
                                     const float* bn_weight, const float* bn_bias, float eps, float* y, int N,
                                     int C, int H, int W, cudaStream_t stream);

namespace {

void check_float_cuda(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), "dwconv_bn_relu_forward: expected ", name, " on CUDA, got ", t.device());
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, "dwconv_bn_relu_forward: expected ", name, " float32, got ",
              t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), "dwconv_bn_relu_forward: expected ", name, " contiguous");
}

torch::Tensor dwconv_bn_relu_forward(const torch::Tensor& x, const torch::Tensor& weight,
                                     const torch::Tensor& running_mean, const torch::Tensor& running_var,
                                     const torch::Tensor& bn_weight, const torch::Tensor& bn_bias, double eps) {
  check_float_cuda(x, "x");
  check_float_cuda(weight, "weight");
  check_float_cuda(running_mean, "running_mean");
  check_float_cuda(running_var, "running_var");
  check_float_cuda(bn_weight, "bn_weight");
  check_float_cuda(bn_bias, "bn_bias");
  TORCH_CHECK(x.dim() == 4, "dwconv_bn_relu_forward: expected x of shape (N, C, H, W), got ", x.sizes());
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  TORCH_CHECK(weight.dim() == 4 && weight.size(0) == C && weight.size(1) == 1 && weight.size(2) == 3 &&
                  weight.size(3) == 3,
              "dwconv_bn_relu_forward: expected weight of shape (C, 1, 3, 3), got ", weight.sizes());
  TORCH_CHECK(running_mean.numel() == C && running_var.numel() == C && bn_weight.numel() == C &&
                  bn_bias.numel() == C,
              "dwconv_bn_relu_forward: expected batch-norm tensors of ", C, " elements");
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(x.data_ptr()) % 16 == 0, "dwconv_bn_relu_forward: expected x "
              "16-byte aligned");
  TORCH_CHECK(N * C * H * W < (1LL << 40) && H < (1 << 30) && W < (1 << 30), "dwconv_bn_relu_forward: sizes too "
              "large");
  auto y = torch::empty_like(x);
  const int err = launch_dwconv_bn_relu(x.data_ptr<float>(), weight.data_ptr<float>(), running_mean.data_ptr<float>(),
                                        running_var.data_ptr<float>(), bn_weight.data_ptr<float>(),
                                        bn_bias.data_ptr<float>(), (float)eps, y.data_ptr<float>(), (int)N, (int)C,
                                        (int)H, (int)W, at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "dwconv_bn_relu_forward: kernel launch failed: ",
              cudaGetErrorString(static_cast<cudaError_t>(err)));
  return y;
}

}  // namespace

REGISTER_BINDING(dwconv_bn_relu_forward, dwconv_bn_relu_forward);
