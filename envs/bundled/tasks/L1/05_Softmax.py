"""Row-wise softmax over long rows (16384 columns, too long for PyTorch's shared-memory softmax path).

PyTorch's fallback softmax kernel reads each row three times (max, sum, write); a kernel that keeps the row
in registers reads it once. Inputs are scaled by 3 so the probabilities spread over several orders of
magnitude (about 5% of entries exceed 1e-4 and each row's largest is ~0.1): a kernel with a wrong max or
sum cannot hide under atol=1e-4.
"""
import torch
import torch.nn as nn

batch_size = 4096
dim = 16384


class Model(nn.Module):
    """y = softmax(x, dim=1)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


def get_inputs():
    x = torch.randn(batch_size, dim) * 3.0
    return [x]


def get_init_inputs():
    return []
