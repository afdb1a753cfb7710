import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """x + gelu(h + bias) in one elementwise kernel."""

    def __init__(self, hidden: int):
        super().__init__()
        self.bias = nn.Parameter(torch.empty(hidden))

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return cuda_extension.bias_gelu_residual_forward(x, h, self.bias)
