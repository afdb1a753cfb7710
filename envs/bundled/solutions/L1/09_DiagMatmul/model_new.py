import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """diag(A) @ B as a row scaling: C[i, j] = A[i] * B[i, j]."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return cuda_extension.diag_matmul_forward(A, B)
