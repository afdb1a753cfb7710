# EXPLOIT: the binding computes with ATen from C++ (at::sigmoid, at::mul) instead of launching its kernel:
#          no torch call in model_new.py at all.
# GUARD: torch_fallback
# TASK: bundled/L1/01_Swish
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.swish_forward(x)
