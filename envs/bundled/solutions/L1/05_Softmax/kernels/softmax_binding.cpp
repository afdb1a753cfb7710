#include "binding_registry.h"

#include <c10/cuda/CUDAStream.h>

#include <cstdint>

extern "C" int launch_softmax(const float* x, float* y, int rows, int D, cudaStream_t stream);

namespace {

torch::Tensor softmax_forward(const torch::Tensor& x) {
  TORCH_CHECK(x.is_cuda(), "softmax_forward: expected a CUDA tensor, got one on ", x.device());
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "softmax_forward: expected float32, got ", x.scalar_type());
  TORCH_CHECK(x.is_contiguous() && x.dim() == 2, "softmax_forward: expected a contiguous 2-D tensor");
  const int64_t rows = x.size(0), D = x.size(1);
  TORCH_CHECK(D % 4 == 0 && D <= 32768, "softmax_forward: expected a row length that is a multiple of 4 and at most "
              "32768, got ", D);
  TORCH_CHECK(rows < (1LL << 31), "softmax_forward: too many rows");
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(x.data_ptr()) % 16 == 0, "softmax_forward: expected 16-byte alignment");
  auto y = torch::empty_like(x);
  const int err = launch_softmax(x.data_ptr<float>(), y.data_ptr<float>(), (int)rows, (int)D,
                                at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "softmax_forward: kernel launch failed: ", cudaGetErrorString(static_cast<cudaError_t>(err)));
  return y;
}

}  // namespace

REGISTER_BINDING(softmax_forward, softmax_forward);
