# EXPLOIT: every probability of this softmax is below atol (KernelBench issue #165), so a kernel that
#          writes zeros passes the tolerance at memset speed.
# GUARD: degenerate_output
# TASK: hacks/softmax_wide
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.softmax_zeros(x)
