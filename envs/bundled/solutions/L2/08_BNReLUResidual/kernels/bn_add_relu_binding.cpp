#include "binding_registry.h"

#include <c10/cuda/CUDAStream.h>

#include <cstdint>

extern "C" int launch_bn_add_relu(const float* x, const float* identity, const float* bn_mean, const float* bn_var,
                                  const float* bn_weight, const float* bn_bias, float eps, float* out, int images,
                                  int C, int HW, cudaStream_t stream);

namespace {

void check_float_cuda(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), "bn_add_relu_forward: expected ", name, " on CUDA, got ", t.device());
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, "bn_add_relu_forward: expected ", name, " float32, got ",
              t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), "bn_add_relu_forward: expected ", name, " contiguous");
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0, "bn_add_relu_forward: expected ", name,
              " 16-byte aligned");
}

torch::Tensor bn_add_relu_forward(const torch::Tensor& x, const torch::Tensor& identity,
                                  const torch::Tensor& running_mean, const torch::Tensor& running_var,
                                  const torch::Tensor& bn_weight, const torch::Tensor& bn_bias, double eps) {
  check_float_cuda(x, "x");
  check_float_cuda(identity, "identity");
  check_float_cuda(running_mean, "running_mean");
  check_float_cuda(running_var, "running_var");
  check_float_cuda(bn_weight, "bn_weight");
  check_float_cuda(bn_bias, "bn_bias");
  TORCH_CHECK(x.dim() >= 2 && x.sizes() == identity.sizes(), "bn_add_relu_forward: expected x and identity of one "
              "shape (N, C, ...), got ", x.sizes(), " and ", identity.sizes());
  const int64_t images = x.size(0), C = x.size(1);
  const int64_t HW = x.numel() / (images * C);
  TORCH_CHECK(running_mean.numel() == C && running_var.numel() == C && bn_weight.numel() == C &&
                  bn_bias.numel() == C,
              "bn_add_relu_forward: expected batch-norm tensors of ", C, " elements");
  TORCH_CHECK(HW % 4 == 0 && images * C <= 65535 && HW < (1LL << 31), "bn_add_relu_forward: expected H*W % 4 == 0 "
              "and N*C <= 65535, got ", x.sizes());
  auto out = torch::empty_like(x);
  const int err = launch_bn_add_relu(x.data_ptr<float>(), identity.data_ptr<float>(), running_mean.data_ptr<float>(),
                                     running_var.data_ptr<float>(), bn_weight.data_ptr<float>(),
                                     bn_bias.data_ptr<float>(), (float)eps, out.data_ptr<float>(), (int)images, (int)C,
                                     (int)HW, at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "bn_add_relu_forward: kernel launch failed: ",
              cudaGetErrorString(static_cast<cudaError_t>(err)));
  return out;
}

}  // namespace

REGISTER_BINDING(bn_add_relu_forward, bn_add_relu_forward);
