import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """x * sigmoid(x) in one kernel: one read and one write of the tensor."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.swish_forward(x)
