import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Inference batch norm + residual add + ReLU in one elementwise kernel."""

    def __init__(self, channels: int):
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)  # parameter and buffer holder (same names as Model)

    def forward(self, x: torch.Tensor, identity: torch.Tensor) -> torch.Tensor:
        return cuda_extension.bn_add_relu_forward(x, identity, self.bn.running_mean, self.bn.running_var,
                                                  self.bn.weight, self.bn.bias, self.bn.eps)
