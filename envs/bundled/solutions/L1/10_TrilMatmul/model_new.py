import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """A 128x128-tiled fp32 GEMM that computes only the tiles on or below the diagonal."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return cuda_extension.tril_matmul_forward(A, B)
