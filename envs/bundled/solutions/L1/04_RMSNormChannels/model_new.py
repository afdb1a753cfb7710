import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Channel RMS norm in one kernel: one read and one write of the tensor (channels held in registers)."""

    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.rms_norm_channels_forward(x, self.eps)
