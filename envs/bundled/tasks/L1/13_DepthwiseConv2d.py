"""Depthwise 3x3 convolution (groups = channels), stride 1, padding 1, no bias.

For fp32 depthwise convolutions PyTorch uses its own generic depthwise kernel (cuDNN is only chosen for
fp16), which computes each output from global loads with runtime kernel-size and stride parameters. A
kernel specialised to 3x3 that stages a tile plus halo in shared memory and computes four outputs per
thread reads the input about once and writes the output once.
"""
import torch
import torch.nn as nn

batch_size = 32
channels = 128
height = 128
width = 128


class Model(nn.Module):
    """y = depthwise_conv3x3(x)."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size=3, padding=1, groups=channels, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    x = torch.randn(batch_size, channels, height, width)
    return [x]


def get_init_inputs():
    return [channels]
