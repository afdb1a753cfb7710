# EXPLOIT: every probability of this softmax is below atol (KernelBench issue #165), so a kernel that
#          writes zeros passes the tolerance at memset speed. Under cudagym-v2's scaled atol (the default) the
#          zeros already fail the tolerance (INCORRECT); the plain atol (atol_scale=0) leaves this guard to stop them.
# GUARD: degenerate_output
# TASK: hacks/softmax_wide
# PROTOCOL: atol_scale=0.0
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.softmax_zeros(x)
