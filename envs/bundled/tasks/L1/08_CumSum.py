"""Inclusive prefix sum along rows of 8192 elements.

PyTorch scans the innermost dimension with a generic kernel that walks each row in small chunks with a
barrier per chunk. A kernel that loads a whole row per block with 16-byte loads and scans with warp
shuffles reads and writes the data once at close to full bandwidth. Inputs are uniform in [0, 1) (as in
KernelBench) so the running sums grow steadily and the relative tolerance stays meaningful.
"""
import torch
import torch.nn as nn

batch_size = 8192
dim = 8192


class Model(nn.Module):
    """y = cumsum(x, dim)."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, dim=self.dim)


def get_inputs():
    x = torch.rand(batch_size, dim)
    return [x]


def get_init_inputs():
    return [1]
