# Fault: illegal memory address on the GPU (kernels/wild_store.cu stores through a wild pointer). The error
# is sticky: it poisons the process's CUDA context, so the worker must be replaced before the next job.
import cuda_extension
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.wild_forward(x)
