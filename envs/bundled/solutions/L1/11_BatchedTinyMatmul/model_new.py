import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """16x16 batched matmul streamed through shared memory, four products per block."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return cuda_extension.bmm16_forward(A, B)
