import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Row-per-block scan: registers, warp shuffles and one carry per 1024-element chunk."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.cumsum_rows_forward(x, self.dim)
