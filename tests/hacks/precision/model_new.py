# EXPLOIT: a GEMM on fp16-rounded inputs with fp32 accumulation (what an fp16 tensor-core kernel computes),
#          on an fp32 task: on all-positive inputs its error passes atol=rtol=1e-4 (CUDA Agent issue #16:
#          TF32/fp16 "for free"). This kernel is a plain tiled SIMT GEMM; only its precision is the point.
# GUARD: precision
# TASK: hacks/matmul_fp32
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return cuda_extension.matmul_fp16_inputs(a, b)
