#include "binding_registry.h"

#include <c10/cuda/CUDAStream.h>

#include <cstdint>

extern "C" int launch_tiny_mlp(const float* x, float* y, const float* w0, const float* b0, const float* w1,
                               const float* b1, const float* w2, const float* b2, const float* w3, const float* b3,
                               long long rows, cudaStream_t stream);

namespace {

void check_float_cuda(const torch::Tensor& t, const char* name, int64_t rows, int64_t cols) {
  TORCH_CHECK(t.is_cuda(), "tiny_mlp_forward: expected ", name, " on CUDA, got ", t.device());
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, "tiny_mlp_forward: expected ", name, " float32, got ",
              t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), "tiny_mlp_forward: expected ", name, " contiguous");
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0, "tiny_mlp_forward: expected ", name,
              " 16-byte aligned");
  if (cols > 0) {
    TORCH_CHECK(t.dim() == 2 && t.size(0) == rows && t.size(1) == cols, "tiny_mlp_forward: expected ", name,
                " of shape (", rows, ", ", cols, "), got ", t.sizes());
  } else {
    TORCH_CHECK(t.dim() == 1 && t.size(0) == rows, "tiny_mlp_forward: expected ", name, " of shape (", rows,
                "), got ", t.sizes());
  }
}

torch::Tensor tiny_mlp_forward(const torch::Tensor& x, const torch::Tensor& w0, const torch::Tensor& b0,
                               const torch::Tensor& w1, const torch::Tensor& b1, const torch::Tensor& w2,
                               const torch::Tensor& b2, const torch::Tensor& w3, const torch::Tensor& b3) {
  TORCH_CHECK(x.dim() == 2, "tiny_mlp_forward: expected x of shape (rows, 32), got ", x.sizes());
  check_float_cuda(x, "x", x.size(0), 32);
  check_float_cuda(w0, "w0", 32, 32);
  check_float_cuda(b0, "b0", 32, 0);
  check_float_cuda(w1, "w1", 32, 32);
  check_float_cuda(b1, "b1", 32, 0);
  check_float_cuda(w2, "w2", 32, 32);
  check_float_cuda(b2, "b2", 32, 0);
  check_float_cuda(w3, "w3", 16, 32);
  check_float_cuda(b3, "b3", 16, 0);
  auto y = torch::empty({x.size(0), 16}, x.options());
  const int err = launch_tiny_mlp(x.data_ptr<float>(), y.data_ptr<float>(), w0.data_ptr<float>(), b0.data_ptr<float>(),
                                  w1.data_ptr<float>(), b1.data_ptr<float>(), w2.data_ptr<float>(),
                                  b2.data_ptr<float>(), w3.data_ptr<float>(), b3.data_ptr<float>(), x.size(0),
                                  at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "tiny_mlp_forward: kernel launch failed: ", cudaGetErrorString(static_cast<cudaError_t>(err)));
  return y;
}

}  // namespace

REGISTER_BINDING(tiny_mlp_forward, tiny_mlp_forward);
