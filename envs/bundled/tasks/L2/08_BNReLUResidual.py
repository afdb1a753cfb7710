"""Batch norm (inference statistics), residual add and ReLU: the end of a ResNet basic block.

Eager PyTorch runs batch norm (read, write), add (read two, write) and ReLU (read, write): seven passes over
256 MB tensors. One kernel reads x and the identity once and writes the result once: three passes.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 64
channels = 256
height = 64
width = 64


class Model(nn.Module):
    """out = relu(batch_norm_eval(x) + identity)."""

    def __init__(self, channels: int):
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)
        with torch.no_grad():  # inference statistics, deterministic under the harness's seed
            self.bn.weight.copy_(1.0 + 0.5 * torch.randn(channels))
            self.bn.bias.copy_(0.5 * torch.randn(channels))
            self.bn.running_mean.copy_(0.2 * torch.randn(channels))
            self.bn.running_var.copy_(0.5 + torch.rand(channels))

    def forward(self, x: torch.Tensor, identity: torch.Tensor) -> torch.Tensor:
        y = F.batch_norm(x, self.bn.running_mean, self.bn.running_var, self.bn.weight, self.bn.bias,
                         training=False, eps=self.bn.eps)
        return torch.relu(y + identity)


def get_inputs():
    x = torch.randn(batch_size, channels, height, width)
    identity = torch.randn(batch_size, channels, height, width)
    return [x, identity]


def get_init_inputs():
    return [channels]
