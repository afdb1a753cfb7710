"""Linear layer followed by GELU and a learned per-feature scale and shift.

The GEMM has a small inner dimension (64), so its 256 MB output costs about as much to move as to compute.
Eager PyTorch writes that output and then runs GELU, mul and add as three more kernels, each reading and
writing all 256 MB. A GEMM whose epilogue applies bias, GELU, scale and shift in registers writes the
output once.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 32768
in_features = 64
out_features = 2048


class Model(nn.Module):
    """y = gelu(x @ W^T + b) * scale + shift (exact erf GELU)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = nn.Parameter(1.0 + 0.5 * torch.randn(out_features))
        self.shift = nn.Parameter(0.5 * torch.randn(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.gelu(self.linear(x))
        y = y * self.scale
        return y + self.shift


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return [in_features, out_features]
