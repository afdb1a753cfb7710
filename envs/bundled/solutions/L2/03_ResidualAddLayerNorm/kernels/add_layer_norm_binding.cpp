#include "binding_registry.h"

#include <c10/cuda/CUDAStream.h>

#include <cstdint>

extern "C" int launch_add_layer_norm(const float* x, const float* res, const float* w, const float* b, float* y,
                                     long long rows, int D, float eps, cudaStream_t stream);

namespace {

void check_float_cuda(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), "add_layer_norm_forward: expected ", name, " on CUDA, got ", t.device());
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, "add_layer_norm_forward: expected ", name, " float32, got ",
              t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), "add_layer_norm_forward: expected ", name, " contiguous");
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0, "add_layer_norm_forward: expected ", name,
              " 16-byte aligned");
}

torch::Tensor add_layer_norm_forward(const torch::Tensor& x, const torch::Tensor& residual,
                                     const torch::Tensor& weight, const torch::Tensor& bias, double eps) {
  check_float_cuda(x, "x");
  check_float_cuda(residual, "residual");
  check_float_cuda(weight, "weight");
  check_float_cuda(bias, "bias");
  TORCH_CHECK(x.sizes() == residual.sizes() && x.dim() >= 1, "add_layer_norm_forward: expected x and residual of "
              "one shape, got ", x.sizes(), " and ", residual.sizes());
  const int64_t D = x.size(-1);
  TORCH_CHECK(weight.numel() == D && bias.numel() == D, "add_layer_norm_forward: expected weight and bias of ", D,
              " elements");
  TORCH_CHECK(D == 128 || D == 256 || D == 512 || D == 768 || D == 1024 || D == 1536 || D == 2048,
              "add_layer_norm_forward: supported hidden sizes are 128, 256, 512, 768, 1024, 1536, 2048; got ", D);
  auto y = torch::empty_like(x);
  const int err = launch_add_layer_norm(x.data_ptr<float>(), residual.data_ptr<float>(), weight.data_ptr<float>(),
                                        bias.data_ptr<float>(), y.data_ptr<float>(), x.numel() / D, (int)D, (float)eps,
                                        at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "add_layer_norm_forward: kernel launch failed: ",
              cudaGetErrorString(static_cast<cudaError_t>(err)));
  return y;
}

}  // namespace

REGISTER_BINDING(add_layer_norm_forward, add_layer_norm_forward);
