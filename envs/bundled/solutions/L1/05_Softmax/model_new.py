import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """One block per row; the row stays in registers between the reductions and the write."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.softmax_forward(x)
