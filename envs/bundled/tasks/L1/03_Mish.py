"""Mish activation: x * tanh(softplus(x)).

Eager PyTorch runs softplus, tanh and mul as three kernels (seven passes over the tensor); a fused kernel
makes two.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 4096
dim = 16384


class Model(nn.Module):
    """y = x * tanh(softplus(x)) (softplus with beta=1, threshold=20)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.tanh(F.softplus(x))


def get_inputs():
    x = torch.randn(batch_size, dim) * 2.0
    return [x]


def get_init_inputs():
    return []
