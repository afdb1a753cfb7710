# Swish computed on the host: the input comes down over the copy engine on a private stream (the launch cover's
# spin does not hold copy engines back, so this starts while it spins), the host computes, the result goes back
# on the caller's stream. Correct, and no kernel touches the data: only the judge's timing decides whether host
# work hides behind the cover. The candidate's cover is never sized to its host time, so it must be timed slow.
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.swish_on_host(x)
