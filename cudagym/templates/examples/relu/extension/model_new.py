import torch
import torch.nn as nn

import cuda_extension  # built by the judge from kernels/*.cu and kernels/*_binding.cpp


class ModelNew(nn.Module):
    """ReLU through the custom extension: no torch compute in forward."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.relu_forward(x.contiguous())
