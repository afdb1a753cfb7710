import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Group statistics kernel, then one normalise + SiLU kernel."""

    def __init__(self, groups: int, channels: int):
        super().__init__()
        self.gn = nn.GroupNorm(groups, channels)  # parameter holder (same names as Model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.group_norm_silu_forward(x, self.gn.weight, self.gn.bias, self.gn.num_groups,
                                                      self.gn.eps)
