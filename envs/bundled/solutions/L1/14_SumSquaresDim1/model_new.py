import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Square-and-sum over dim 1 in one read of the input."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.sumsq_dim1_forward(x)
