#include "binding_registry.h"

#include <c10/cuda/CUDAStream.h>

#include <cstdint>

extern "C" int launch_dwconv3x3(const float* x, const float* w, float* y, int N, int C, int H, int W,
                                cudaStream_t stream);

namespace {

void check_float_cuda(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), "dwconv3x3_forward: expected ", name, " on CUDA, got ", t.device());
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, "dwconv3x3_forward: expected ", name, " float32, got ",
              t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), "dwconv3x3_forward: expected ", name, " contiguous");
}

torch::Tensor dwconv3x3_forward(const torch::Tensor& x, const torch::Tensor& weight) {
  check_float_cuda(x, "x");
  check_float_cuda(weight, "weight");
  TORCH_CHECK(x.dim() == 4, "dwconv3x3_forward: expected x of shape (N, C, H, W), got ", x.sizes());
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  TORCH_CHECK(weight.dim() == 4 && weight.size(0) == C && weight.size(1) == 1 && weight.size(2) == 3 &&
                  weight.size(3) == 3,
              "dwconv3x3_forward: expected weight of shape (C, 1, 3, 3), got ", weight.sizes());
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(x.data_ptr()) % 16 == 0, "dwconv3x3_forward: expected x 16-byte "
              "aligned");
  TORCH_CHECK(N * C * H * W < (1LL << 40) && H < (1 << 30) && W < (1 << 30), "dwconv3x3_forward: sizes too large");
  auto y = torch::empty_like(x);
  const int err = launch_dwconv3x3(x.data_ptr<float>(), weight.data_ptr<float>(), y.data_ptr<float>(), (int)N,
                                   (int)C, (int)H, (int)W, at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "dwconv3x3_forward: kernel launch failed: ",
              cudaGetErrorString(static_cast<cudaError_t>(err)));
  return y;
}

}  // namespace

REGISTER_BINDING(dwconv3x3_forward, dwconv3x3_forward);
