"""LayerNorm over (C, H, W) of an NCHW tensor: 16 rows of 4M elements each.

PyTorch's LayerNorm kernel gives each row to one thread block, so with 16 rows only 16 of the H200's 132
SMs work. A custom kernel splits every row over many blocks (partial statistics, merged with Chan's
formula) and normalises with the whole GPU.
"""
import torch
import torch.nn as nn

batch_size = 16
features = 64
dim1 = 256
dim2 = 256


class Model(nn.Module):
    """y = LayerNorm over the last three dims, with elementwise affine weight and bias."""

    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)
        with torch.no_grad():  # non-trivial affine parameters, deterministic under the harness's seed
            self.ln.weight.copy_(1.0 + 0.5 * torch.randn(normalized_shape))
            self.ln.bias.copy_(0.5 * torch.randn(normalized_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


def get_inputs():
    x = torch.randn(batch_size, features, dim1, dim2)
    return [x]


def get_init_inputs():
    return [(features, dim1, dim2)]
