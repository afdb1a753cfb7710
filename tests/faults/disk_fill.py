# Fault: filling the disk with one ever-growing file (the file size limit stops it: EFBIG).
import torch


class ModelNew(torch.nn.Module):
    def forward(self, x):
        block = b"\xff" * (1 << 20)
        with open("ballast.bin", "wb") as fh:
            while True:
                fh.write(block)
                fh.flush()
