import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Channel means, the squeeze MLP in one small kernel, then scale + residual + ReLU in one pass."""

    def __init__(self, channels: int, reduction: int):
        super().__init__()
        # parameter holders only (same state_dict names as Model)
        self.fc1 = nn.Linear(channels, channels // reduction)
        self.fc2 = nn.Linear(channels // reduction, channels)

    def forward(self, x: torch.Tensor, identity: torch.Tensor) -> torch.Tensor:
        return cuda_extension.se_residual_forward(x, identity, self.fc1.weight, self.fc1.bias, self.fc2.weight,
                                                  self.fc2.bias)
