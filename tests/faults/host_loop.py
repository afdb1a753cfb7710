# Fault: endless loop on the host inside forward (only the wall-clock timeout ends it).
import torch


class ModelNew(torch.nn.Module):
    def forward(self, x):
        n = 0
        while True:
            n += 1
