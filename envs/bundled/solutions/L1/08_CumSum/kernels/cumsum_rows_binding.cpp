#include "binding_registry.h"

#include <c10/cuda/CUDAStream.h>

#include <cstdint>

extern "C" int launch_cumsum_rows(const float* x, float* y, int rows, int D, cudaStream_t stream);

namespace {

torch::Tensor cumsum_rows_forward(const torch::Tensor& x, int64_t dim) {
  TORCH_CHECK(x.is_cuda(), "cumsum_rows_forward: expected a CUDA tensor, got one on ", x.device());
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "cumsum_rows_forward: expected float32, got ", x.scalar_type());
  TORCH_CHECK(x.is_contiguous() && x.dim() >= 1, "cumsum_rows_forward: expected a contiguous tensor");
  const int64_t last = x.dim() - 1;
  TORCH_CHECK(dim == last || dim == -1, "cumsum_rows_forward: only the last dimension is supported, got dim=", dim);
  const int64_t D = x.size(last);
  const int64_t rows = D == 0 ? 0 : x.numel() / D;
  TORCH_CHECK(D % 4 == 0 && D <= 32768, "cumsum_rows_forward: expected a row length that is a multiple of 4 and at "
              "most 32768, got ", D);
  TORCH_CHECK(rows < (1LL << 31), "cumsum_rows_forward: too many rows");
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(x.data_ptr()) % 16 == 0, "cumsum_rows_forward: expected 16-byte "
              "alignment");
  auto y = torch::empty_like(x);
  const int err = launch_cumsum_rows(x.data_ptr<float>(), y.data_ptr<float>(), (int)rows, (int)D,
                                     at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "cumsum_rows_forward: kernel launch failed: ",
              cudaGetErrorString(static_cast<cudaError_t>(err)));
  return y;
}

}  // namespace

REGISTER_BINDING(cumsum_rows_forward, cumsum_rows_forward);
