"""Swish (SiLU) written out the way models often spell it: x * sigmoid(x).

Eager PyTorch runs this as two elementwise kernels (sigmoid, then mul), so the tensor crosses memory five
times (read x, write s, read x, read s, write y); a fused kernel reads x once and writes y once.
"""
import torch
import torch.nn as nn

batch_size = 4096
dim = 16384


class Model(nn.Module):
    """y = x * sigmoid(x), elementwise."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
