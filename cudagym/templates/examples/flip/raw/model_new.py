import torch
import torch.nn as nn

from cudagym import runtime

# Finds the judge-built cubin of this source (or compiles it with nvcc when run outside the judge).
kernels = runtime.load("kernels/reverse.cu")


class ModelNew(nn.Module):
    """Reversing a 1-D tensor in one raw CUDA kernel, launched on torch's current stream."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        threads = 256
        kernels.reverse(grid=((n + threads - 1) // threads,), block=(threads,), args=(x, y, n))
        return y
