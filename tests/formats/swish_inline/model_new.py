# Swish (bundled/L1/01_Swish) in the inline format (KernelBench's load_inline), for the format tests; the
# tests derive the wrong, slow, crashing and non-compiling candidates from it by editing the constants
# below or the kernel source.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

swish_cuda_source = """
#include <c10/cuda/CUDAStream.h>

__global__ void swish_kernel(const float* __restrict__ x, float* __restrict__ y, long long n, float beta) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = x[i];
        y[i] = v / (1.0f + expf(-beta * v));
    }
}

void swish_launch(torch::Tensor x, torch::Tensor y, int64_t n, double beta, int64_t blocks) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.is_contiguous(),
                "expected contiguous CUDA float32");
    swish_kernel<<<(unsigned)blocks, 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), n, (float)beta);
}
"""

swish_cpp_source = "void swish_launch(torch::Tensor x, torch::Tensor y, int64_t n, double beta, int64_t blocks);"

swish = load_inline(
    name="swish_formats_test",
    cpp_sources=swish_cpp_source,
    cuda_sources=swish_cuda_source,
    functions=["swish_launch"],
    verbose=False,
)
BETA = 1.0
MAX_BLOCKS = 132 * 16  # a few blocks per SM; the grid-stride loop covers the rest


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        swish.swish_launch(x, y, n, BETA, min((n + 255) // 256, MAX_BLOCKS))
        return y
