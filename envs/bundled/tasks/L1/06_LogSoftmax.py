"""Row-wise log-softmax over long rows (32768 columns).

PyTorch's kernel for rows this long reads each row three times (max, sum of exponentials, write); a kernel
that keeps the row in registers reads it once. Outputs are near -11 with a spread of about 1, so the check
at atol=rtol=1e-4 is tight.
"""
import torch
import torch.nn as nn

batch_size = 2048
dim = 32768


class Model(nn.Module):
    """y = log_softmax(x, dim=1)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x, dim=1)


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
