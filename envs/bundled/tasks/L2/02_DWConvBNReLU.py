"""Depthwise 3x3 convolution, batch norm (inference statistics) and ReLU: a MobileNet-style layer.

Eager PyTorch runs three kernels (depthwise conv, batch norm, ReLU), each reading and writing the full
256 MB activation. One kernel can convolve from a shared-memory tile and apply the per-channel
normalisation and the ReLU in registers: one read and one write.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 32
channels = 128
height = 128
width = 128


class Model(nn.Module):
    """y = relu(batch_norm_eval(depthwise_conv3x3(x)))."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size=3, padding=1, groups=channels, bias=False)
        self.bn = nn.BatchNorm2d(channels)
        with torch.no_grad():  # inference statistics, deterministic under the harness's seed
            self.bn.weight.copy_(1.0 + 0.5 * torch.randn(channels))
            self.bn.bias.copy_(0.5 * torch.randn(channels))
            self.bn.running_mean.copy_(0.2 * torch.randn(channels))
            self.bn.running_var.copy_(0.5 + torch.rand(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        # inference-mode batch norm whatever the module's train/eval flag
        y = F.batch_norm(y, self.bn.running_mean, self.bn.running_var, self.bn.weight, self.bn.bias,
                         training=False, eps=self.bn.eps)
        return torch.relu(y)


def get_inputs():
    x = torch.randn(batch_size, channels, height, width)
    return [x]


def get_init_inputs():
    return [channels]
