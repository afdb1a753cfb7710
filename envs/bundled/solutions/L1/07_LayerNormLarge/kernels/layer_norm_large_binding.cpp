#include "binding_registry.h"

#include <c10/cuda/CUDAStream.h>

#include <cstdint>

extern "C" long long layer_norm_large_workspace(int rows, long long N);
extern "C" int launch_layer_norm_large(const float* x, const float* w, const float* b, float* y, float* stats,
                                       float* mean_rstd, int rows, long long N, float eps, cudaStream_t stream);

namespace {

void check_float_cuda(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), "layer_norm_large_forward: expected ", name, " on CUDA, got ", t.device());
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, "layer_norm_large_forward: expected ", name, " float32, got ",
              t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), "layer_norm_large_forward: expected ", name, " contiguous");
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0, "layer_norm_large_forward: expected ",
              name, " 16-byte aligned");
}

torch::Tensor layer_norm_large_forward(const torch::Tensor& x, const torch::Tensor& weight,
                                       const torch::Tensor& bias, double eps) {
  check_float_cuda(x, "x");
  check_float_cuda(weight, "weight");
  check_float_cuda(bias, "bias");
  const int64_t N = weight.numel();
  TORCH_CHECK(bias.numel() == N && N > 0 && x.numel() % N == 0, "layer_norm_large_forward: expected x's trailing "
              "dims to match weight (", N, " elements), got x with ", x.numel(), " elements");
  TORCH_CHECK(N % 4 == 0, "layer_norm_large_forward: expected the normalized size to be a multiple of 4, got ", N);
  const int64_t rows = x.numel() / N;
  TORCH_CHECK(rows >= 1 && rows <= 65535, "layer_norm_large_forward: expected 1..65535 rows, got ", rows);
  auto y = torch::empty_like(x);
  auto stats = torch::empty({layer_norm_large_workspace((int)rows, N)}, x.options());
  auto mean_rstd = torch::empty({rows * 2}, x.options());
  const int err = launch_layer_norm_large(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(),
                                          y.data_ptr<float>(), stats.data_ptr<float>(), mean_rstd.data_ptr<float>(),
                                          (int)rows, N, (float)eps, at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "layer_norm_large_forward: kernel launch failed: ",
              cudaGetErrorString(static_cast<cudaError_t>(err)));
  return y;
}

}  // namespace

REGISTER_BINDING(layer_norm_large_forward, layer_norm_large_forward);
