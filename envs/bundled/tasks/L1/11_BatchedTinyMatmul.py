"""Batched product of many tiny 16x16 matrices (262144 pairs, 256 MB per operand).

torch.bmm hands this to cuBLAS's strided-batched GEMM, whose tiling is built for larger matrices; with
16x16x16 problems the work is pure data movement (3 KB per product). A kernel that streams the operands
through shared memory with 16-byte loads, four matrix pairs per 256-thread block, runs at memory speed.
"""
import torch
import torch.nn as nn

batch_size = 262144
n = 16


class Model(nn.Module):
    """C = bmm(A, B) for A, B of shape (batch, 16, 16)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.bmm(A, B)


def get_inputs():
    A = torch.randn(batch_size, n, n)
    B = torch.randn(batch_size, n, n)
    return [A, B]


def get_init_inputs():
    return []
