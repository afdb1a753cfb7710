"""Squeeze-and-excitation with the residual add and ReLU that close an SE-ResNet block, inference mode.

s = sigmoid(fc2(relu(fc1(mean_hw(x))))); out = relu(x * s + identity). Eager PyTorch runs a mean, four
tiny kernels for the squeeze MLP, then mul, add and ReLU over 256 MB tensors: eight full passes. A mean
kernel, one tiny kernel for the whole squeeze MLP, and one kernel for scale + add + ReLU make four.
Inputs carry a random per-channel offset so the channel means, and hence the gates, differ.
"""
import torch
import torch.nn as nn

batch_size = 64
channels = 256
reduction = 16
height = 64
width = 64


class Model(nn.Module):
    """out = relu(x * sigmoid(fc2(relu(fc1(mean(x, (2, 3))))))[..., None, None] + identity)."""

    def __init__(self, channels: int, reduction: int):
        super().__init__()
        self.fc1 = nn.Linear(channels, channels // reduction)
        self.fc2 = nn.Linear(channels // reduction, channels)

    def forward(self, x: torch.Tensor, identity: torch.Tensor) -> torch.Tensor:
        s = x.mean(dim=(2, 3))
        s = torch.sigmoid(self.fc2(torch.relu(self.fc1(s))))
        return torch.relu(x * s[:, :, None, None] + identity)


def get_inputs():
    x = torch.randn(batch_size, channels, height, width) + torch.randn(batch_size, channels, 1, 1)
    identity = torch.randn(batch_size, channels, height, width)
    return [x, identity]


def get_init_inputs():
    return [channels, reduction]
