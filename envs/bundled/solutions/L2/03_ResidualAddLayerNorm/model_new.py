import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Add + LayerNorm with one warp per row and the row in registers."""

    def __init__(self, hidden: int):
        super().__init__()
        self.ln = nn.LayerNorm(hidden)  # parameter holder (same names as Model)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return cuda_extension.add_layer_norm_forward(x, residual, self.ln.weight, self.ln.bias, self.ln.eps)
