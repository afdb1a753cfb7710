import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Depthwise conv + inference batch norm + ReLU in one kernel."""

    def __init__(self, channels: int):
        super().__init__()
        # parameter and buffer holders only (same state_dict names as Model)
        self.conv = nn.Conv2d(channels, channels, kernel_size=3, padding=1, groups=channels, bias=False)
        self.bn = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.dwconv_bn_relu_forward(x, self.conv.weight, self.bn.running_mean, self.bn.running_var,
                                                     self.bn.weight, self.bn.bias, self.bn.eps)
