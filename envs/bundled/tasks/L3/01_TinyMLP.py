"""A narrow MLP over many rows (NeRF / tiny-cuda-nn style): 32 -> 32 -> 32 -> 32 -> 16 with ReLU.

Each layer is a GEMM with K = 32, so eager PyTorch is bound by memory: every Linear reads and writes the
whole activation (2M rows x 32 floats = 256 MB) and every ReLU does it again, about 3.5 GB of traffic for
15 GFLOP. A fused kernel keeps a 128-row tile in shared memory through all four layers, with the weights
resident in shared memory, and touches global memory only to read the input and write the output.
"""
import torch
import torch.nn as nn

batch_size = 2 * 1024 * 1024
in_features = 32
hidden = 32
out_features = 16


class Model(nn.Module):
    """Linear(32, 32), ReLU, Linear(32, 32), ReLU, Linear(32, 32), ReLU, Linear(32, 16)."""

    def __init__(self, in_features: int, hidden: int, out_features: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_features, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, out_features),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return [in_features, hidden, out_features]
