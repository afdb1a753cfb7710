import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """A 128x128-tiled fp32 GEMM with the scale applied in the epilogue."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return cuda_extension.matmul_scale_forward(A, B, self.scale)
