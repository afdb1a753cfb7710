#include "binding_registry.h"

#include <c10/cuda/CUDAStream.h>

extern "C" int launch_touch(const float* x, float* sink, cudaStream_t stream);

namespace {

void touch(const torch::Tensor& x) {
  auto sink = torch::empty({1}, x.options());
  launch_touch(x.data_ptr<float>(), sink.data_ptr<float>(), at::cuda::getCurrentCUDAStream().stream());
}

}  // namespace

REGISTER_BINDING(touch, touch);
