#include "binding_registry.h"

#include <c10/cuda/CUDAStream.h>

#include <cstdint>

extern "C" int launch_conv1x1_bn_relu(const float* x, const float* w, const float* bn_mean, const float* bn_var,
                                      const float* bn_weight, const float* bn_bias, float eps, float* y, int images,
                                      int Cin, int Cout, int HW, cudaStream_t stream);

namespace {

void check_float_cuda(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), "conv1x1_bn_relu_forward: expected ", name, " on CUDA, got ", t.device());
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, "conv1x1_bn_relu_forward: expected ", name, " float32, got ",
              t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), "conv1x1_bn_relu_forward: expected ", name, " contiguous");
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0, "conv1x1_bn_relu_forward: expected ", name,
              " 16-byte aligned");
}

torch::Tensor conv1x1_bn_relu_forward(const torch::Tensor& x, const torch::Tensor& weight,
                                      const torch::Tensor& running_mean, const torch::Tensor& running_var,
                                      const torch::Tensor& bn_weight, const torch::Tensor& bn_bias, double eps) {
  check_float_cuda(x, "x");
  check_float_cuda(weight, "weight");
  check_float_cuda(running_mean, "running_mean");
  check_float_cuda(running_var, "running_var");
  check_float_cuda(bn_weight, "bn_weight");
  check_float_cuda(bn_bias, "bn_bias");
  TORCH_CHECK(x.dim() == 4, "conv1x1_bn_relu_forward: expected x of shape (N, Cin, H, W), got ", x.sizes());
  const int64_t images = x.size(0), Cin = x.size(1), H = x.size(2), W = x.size(3);
  TORCH_CHECK(weight.dim() == 4 && weight.size(1) == Cin && weight.size(2) == 1 && weight.size(3) == 1,
              "conv1x1_bn_relu_forward: expected weight of shape (Cout, Cin, 1, 1), got ", weight.sizes());
  const int64_t Cout = weight.size(0);
  TORCH_CHECK(running_mean.numel() == Cout && running_var.numel() == Cout && bn_weight.numel() == Cout &&
                  bn_bias.numel() == Cout,
              "conv1x1_bn_relu_forward: expected batch-norm tensors of ", Cout, " elements");
  TORCH_CHECK(Cout % 128 == 0 && (H * W) % 128 == 0 && Cin % 8 == 0 && images <= 65535 && H * W < (1LL << 31),
              "conv1x1_bn_relu_forward: expected Cout and H*W multiples of 128 and Cin a multiple of 8, got Cout=",
              Cout, " H*W=", H * W, " Cin=", Cin);
  auto y = torch::empty({images, Cout, H, W}, x.options());
  const int err = launch_conv1x1_bn_relu(x.data_ptr<float>(), weight.data_ptr<float>(), running_mean.data_ptr<float>(),
                                         running_var.data_ptr<float>(), bn_weight.data_ptr<float>(),
                                         bn_bias.data_ptr<float>(), (float)eps, y.data_ptr<float>(), (int)images,
                                         (int)Cin, (int)Cout, (int)(H * W), at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "conv1x1_bn_relu_forward: kernel launch failed: ",
              cudaGetErrorString(static_cast<cudaError_t>(err)));
  return y;
}

}  // namespace

REGISTER_BINDING(conv1x1_bn_relu_forward, conv1x1_bn_relu_forward);
