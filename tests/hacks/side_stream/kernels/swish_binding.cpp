#include "binding_registry.h"

#include <cuda_runtime.h>

extern "C" int launch_swish_side_stream(const float* x, float* y, long long n);

namespace {

torch::Tensor swish_side_stream(const torch::Tensor& x) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous(), "swish_side_stream: expected a contiguous CUDA tensor");
  auto y = torch::empty_like(x);
  const int err = launch_swish_side_stream(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
  TORCH_CHECK(err == 0, "launch failed: ", cudaGetErrorString(static_cast<cudaError_t>(err)));
  return y;
}

}  // namespace

REGISTER_BINDING(swish_side_stream, swish_side_stream);
