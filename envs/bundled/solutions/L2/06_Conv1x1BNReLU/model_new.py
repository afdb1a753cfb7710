import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """1x1 conv as a per-image fp32 GEMM with batch norm and ReLU in the epilogue."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        # parameter and buffer holders only (same state_dict names as Model)
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=1, bias=False)
        self.bn = nn.BatchNorm2d(out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.conv1x1_bn_relu_forward(x, self.conv.weight, self.bn.running_mean, self.bn.running_var,
                                                      self.bn.weight, self.bn.bias, self.bn.eps)
