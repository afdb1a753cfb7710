#include "binding_registry.h"

#include <c10/cuda/CUDAStream.h>

extern "C" int launch_rms_norm_channels(const float* x, float* y, int N, int C, int HW, float eps,
                                        cudaStream_t stream);

namespace {

torch::Tensor rms_norm_channels_forward(const torch::Tensor& x, double eps) {
  TORCH_CHECK(x.is_cuda(), "rms_norm_channels_forward: expected a CUDA tensor, got one on ", x.device());
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "rms_norm_channels_forward: expected float32, got ",
              x.scalar_type());
  TORCH_CHECK(x.is_contiguous(), "rms_norm_channels_forward: expected a contiguous tensor");
  TORCH_CHECK(x.dim() >= 2, "rms_norm_channels_forward: expected (N, C, ...), got ", x.dim(), " dims");
  auto y = torch::empty_like(x);
  if (x.numel() == 0) return y;
  const int64_t N = x.size(0), C = x.size(1);
  const int64_t HW = x.numel() / (N * C);
  // one block per (image, tile of up to 128 pixels): the grid's x dimension bounds N * ceil(HW / 32)
  TORCH_CHECK(HW < (1LL << 31) && C < (1LL << 31) && N * ((HW + 31) / 32) < (1LL << 31),
              "rms_norm_channels_forward: expected N * ceil(H*W / 32) < 2^31, got N=", N, ", H*W=", HW);
  const int err = launch_rms_norm_channels(x.data_ptr<float>(), y.data_ptr<float>(), (int)N, (int)C, (int)HW,
                                           (float)eps, at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "rms_norm_channels_forward: kernel launch failed: ",
              cudaGetErrorString(static_cast<cudaError_t>(err)));
  return y;
}

}  // namespace

REGISTER_BINDING(rms_norm_channels_forward, rms_norm_channels_forward);
