# EXPLOIT: return an empty output at once and let a detached host thread launch the kernel a moment later
#          ("thread injection"): the timed region ends before the work is even queued.
# GUARD: host_threads
# TASK: bundled/L1/01_Swish
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.swish_later(x)
