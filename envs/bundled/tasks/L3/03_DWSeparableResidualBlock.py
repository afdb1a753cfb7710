"""Depthwise-separable residual block (MobileNet / ConvNeXt family), inference mode.

x + BN2(conv1x1(ReLU(BN1(dwconv3x3(x))))) with 128 channels on 64x64 maps. Eager PyTorch runs six kernels
(depthwise conv, batch norm, ReLU, cuDNN 1x1 conv, batch norm, add), each reading and writing a 128 MB
activation. Two kernels suffice: depthwise conv + BN + ReLU from a shared-memory tile, then the 1x1 conv as
a GEMM whose epilogue applies BN and adds the residual.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 64
channels = 128
height = 64
width = 64


def _set_bn(bn: nn.BatchNorm2d) -> None:
    """Non-trivial inference statistics, deterministic under the harness's seed."""
    c = bn.num_features
    with torch.no_grad():
        bn.weight.copy_(1.0 + 0.5 * torch.randn(c))
        bn.bias.copy_(0.5 * torch.randn(c))
        bn.running_mean.copy_(0.2 * torch.randn(c))
        bn.running_var.copy_(0.5 + torch.rand(c))


class Model(nn.Module):
    """out = x + bn2(pw(relu(bn1(dw(x))))), batch norms with inference statistics."""

    def __init__(self, channels: int):
        super().__init__()
        self.dw = nn.Conv2d(channels, channels, kernel_size=3, padding=1, groups=channels, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.pw = nn.Conv2d(channels, channels, kernel_size=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        _set_bn(self.bn1)
        _set_bn(self.bn2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.batch_norm(self.dw(x), self.bn1.running_mean, self.bn1.running_var, self.bn1.weight, self.bn1.bias,
                         training=False, eps=self.bn1.eps)
        y = torch.relu(y)
        y = F.batch_norm(self.pw(y), self.bn2.running_mean, self.bn2.running_var, self.bn2.weight, self.bn2.bias,
                         training=False, eps=self.bn2.eps)
        return x + y


def get_inputs():
    x = torch.randn(batch_size, channels, height, width)
    return [x]


def get_init_inputs():
    return [channels]
