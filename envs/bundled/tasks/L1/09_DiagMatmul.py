"""diag(a) @ B: a dense matmul with a diagonal matrix built on the fly.

Eager PyTorch materialises the N x N diagonal matrix and runs a full N^3 GEMM (137 GFLOP at N=4096). The
product is just a row scaling of B: N*M multiplies, one read of B and one write.
"""
import torch
import torch.nn as nn

N = 4096
M = 4096


class Model(nn.Module):
    """C = diag(A) @ B, with A of shape (N,) and B of shape (N, M)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.diag(A) @ B


def get_inputs():
    A = torch.randn(N)
    B = torch.randn(N, M)
    return [A, B]


def get_init_inputs():
    return []
