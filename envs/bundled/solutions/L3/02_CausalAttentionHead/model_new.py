import math

import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Flash-attention-style fp32 kernel: online softmax over 64x64 tiles, masked-out tiles skipped."""

    def __init__(self, head_dim: int, max_seq_len: int):
        super().__init__()
        self.scale = 1.0 / math.sqrt(head_dim)
        self.register_buffer("mask", torch.tril(torch.ones(max_seq_len, max_seq_len)).view(1, max_seq_len,
                                                                                            max_seq_len))

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return cuda_extension.masked_attention_forward(q, k, v, self.mask, self.scale)
