"""Residual add followed by LayerNorm, as after every transformer sub-layer (post-norm).

Eager PyTorch writes x + y to a temporary (read 2, write 1) and then normalises it (read 1, write 1): five
passes over a 256 MB activation. One kernel that adds, normalises and applies the affine parameters with
each row in registers makes three.
"""
import torch
import torch.nn as nn

batch_size = 65536
hidden = 1024


class Model(nn.Module):
    """out = LayerNorm(x + residual) over the last dimension."""

    def __init__(self, hidden: int):
        super().__init__()
        self.ln = nn.LayerNorm(hidden)
        with torch.no_grad():  # non-trivial affine parameters, deterministic under the harness's seed
            self.ln.weight.copy_(1.0 + 0.5 * torch.randn(hidden))
            self.ln.bias.copy_(0.5 * torch.randn(hidden))

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.ln(x + residual)


def get_inputs():
    x = torch.randn(batch_size, hidden)
    residual = torch.randn(batch_size, hidden)
    return [x, residual]


def get_init_inputs():
    return [hidden]
