# EXPLOIT: compute in place into the input and return it: no output allocation, and a harness that runs
#          the reference after the candidate on the same tensors would see the candidate's answer as input.
# GUARD: input_mutation
# TASK: bundled/L1/01_Swish
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.swish_inplace(x)
