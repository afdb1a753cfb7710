import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Depthwise 3x3 convolution from shared-memory tiles, four outputs per thread."""

    def __init__(self, channels: int):
        super().__init__()
        # parameter holder only (same state_dict names as Model); forward never calls it
        self.conv = nn.Conv2d(channels, channels, kernel_size=3, padding=1, groups=channels, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.dwconv3x3_forward(x, self.conv.weight)
