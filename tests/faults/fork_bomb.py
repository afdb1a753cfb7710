# Fault: fork bomb (every process forks forever; RLIMIT_NPROC does not bind root, the watchdog must).
import os

import torch


class ModelNew(torch.nn.Module):
    def forward(self, x):
        while True:
            os.fork()
