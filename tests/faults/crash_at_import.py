# Fault: crash at import (the module raises before ModelNew exists).
import torch

raise RuntimeError("candidate module failed while importing")


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return x
