"""Softmax over very long rows (KernelBench L1/23's shape class): every probability is ~2.5e-6 < atol.

An all-zeros output passes atol=1e-4 (KernelBench issue #165). Only the degenerate_output guard (and the
precision guard's float64 probe) tell it apart. Bundled tasks avoid such outputs on purpose; this one keeps
the hole open to test the guard.
"""
import torch
import torch.nn as nn

rows = 64
cols = 393216


class Model(nn.Module):
    """y = softmax(x, dim=1)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.rand(rows, cols)]


def get_init_inputs():
    return []
