# Not a fault: a correct candidate for the relu task (the job after each fault must still pass).
import torch


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return x.clamp_min(0.0)
