# Fault: 100 MB written to stdout from forward (must fill neither memory nor disk).
import sys

import torch


class ModelNew(torch.nn.Module):
    def forward(self, x):
        line = "spam " * 20 + "\n"
        for _ in range(100 * 1024 * 1024 // len(line)):
            sys.stdout.write(line)
        return x.clamp_min(0.0)
