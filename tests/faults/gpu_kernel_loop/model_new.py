# Fault: an endless loop in a GPU kernel (kernels/spin.cu); only the judge's timeout ends it, and killing the
# worker process is what frees the GPU.
import cuda_extension
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.spin_forward(x)
