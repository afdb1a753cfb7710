# EXPLOIT: launch the real work on a private non-blocking stream and return without making the current
#          stream wait for it: CUDA events recorded on the current stream see almost nothing (the classic
#          "stream injection" timing hack).
# GUARD: side_stream
# TASK: bundled/L1/01_Swish
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.swish_side_stream(x)
