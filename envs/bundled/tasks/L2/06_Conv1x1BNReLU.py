"""Pointwise (1x1) convolution, batch norm (inference statistics) and ReLU.

A 1x1 convolution is a GEMM per image (Cout x Cin times Cin x H*W). Eager PyTorch runs it through cuDNN
and then runs batch norm and ReLU as two more kernels over the 256 MB output. A GEMM whose epilogue applies
the per-channel normalisation and the ReLU writes the output once and never reads it back.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 128
in_channels = 64
out_channels = 128
height = 64
width = 64


class Model(nn.Module):
    """y = relu(batch_norm_eval(conv1x1(x)))."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=1, bias=False)
        self.bn = nn.BatchNorm2d(out_channels)
        with torch.no_grad():  # inference statistics, deterministic under the harness's seed
            self.bn.weight.copy_(1.0 + 0.5 * torch.randn(out_channels))
            self.bn.bias.copy_(0.5 * torch.randn(out_channels))
            self.bn.running_mean.copy_(0.2 * torch.randn(out_channels))
            self.bn.running_var.copy_(0.5 + torch.rand(out_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        y = F.batch_norm(y, self.bn.running_mean, self.bn.running_var, self.bn.weight, self.bn.bias,
                         training=False, eps=self.bn.eps)
        return torch.relu(y)


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels]
