# Fault: filling the disk with many files, each under the file size limit (the disk watchdog stops it).
import torch


class ModelNew(torch.nn.Module):
    def forward(self, x):
        block = b"\xff" * (1 << 20)
        n = 0
        while True:
            with open(f"ballast-{n}.bin", "wb") as fh:
                for _ in range(8):
                    fh.write(block)
            n += 1
