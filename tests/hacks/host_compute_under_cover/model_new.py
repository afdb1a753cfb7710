# EXPLOIT: under a protocol whose launch cover hides the host's time in forward (cudagym-v1 sizes it to the host's
#          enqueue time), pull the input to the host over the copy engine on a private stream (the spin does not
#          hold copy engines back), compute there while the cover spins, and push the result back: the events
#          then see one host-to-device copy. The timed call's inputs are written behind the cover, so the early
#          copy reads what recycled memory held before: audited calls pass, every timed output is wrong.
# GUARD: result_cache
# TASK: bundled/L1/01_Swish
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.swish_on_host(x)
