# Fault: sys.exit inside forward (SystemExit escapes every `except Exception`).
import sys

import torch


class ModelNew(torch.nn.Module):
    def forward(self, x):
        sys.exit(4)
