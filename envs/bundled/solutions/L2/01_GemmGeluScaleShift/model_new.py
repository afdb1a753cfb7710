import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """One fp32 GEMM kernel with bias, GELU, scale and shift in its epilogue."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)  # parameter holder (same names as Model)
        self.scale = nn.Parameter(torch.empty(out_features))
        self.shift = nn.Parameter(torch.empty(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.gemm_gelu_scale_shift_forward(x, self.linear.weight, self.linear.bias, self.scale,
                                                            self.shift)
