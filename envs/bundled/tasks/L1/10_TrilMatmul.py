"""Lower triangle of a matrix product: tril(A @ B).

Eager PyTorch computes the full N x N product (2 N^3 flops) and then zeroes the upper triangle in a second
kernel. Only the output tiles on or below the diagonal need computing: a tiled GEMM that skips the tiles
above it does about half the work. A and B are general dense matrices (scaled by 1/sqrt(N) so the products
are O(1) and fp32 rounding stays far below the tolerance).
"""
import torch
import torch.nn as nn

N = 4096


class Model(nn.Module):
    """C = tril(A @ B) for square A, B."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.tril(torch.matmul(A, B))


def get_inputs():
    A = torch.randn(N, N) / N ** 0.5
    B = torch.randn(N, N)
    return [A, B]


def get_init_inputs():
    return []
