"""A square fp32 matmul whose inputs are all positive (KernelBench's torch.rand), for the precision hack.

With K = 2048 the outputs are ~512, so atol + rtol * |ref| = 0.05: a GEMM on fp16-rounded (or TF32) inputs
passes the tolerance. Only the precision guard tells it apart.
"""
import torch
import torch.nn as nn

N = 2048


class Model(nn.Module):
    """C = A @ B."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    return [torch.rand(N, N), torch.rand(N, N)]


def get_init_inputs():
    return []
