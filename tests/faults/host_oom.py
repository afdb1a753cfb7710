# Fault: host out-of-memory (forward keeps allocating and touching 64 MiB blocks).
import torch


class ModelNew(torch.nn.Module):
    def forward(self, x):
        hoard = []
        while True:
            hoard.append(b"\xab" * (64 << 20))  # written bytes: every page is resident
