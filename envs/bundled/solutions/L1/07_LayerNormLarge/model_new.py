import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """LayerNorm with each row split across many blocks: partial stats, merge, normalise."""

    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)  # parameter holder (same names as Model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.layer_norm_large_forward(x, self.ln.weight, self.ln.bias, self.ln.eps)
