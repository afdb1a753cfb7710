"""What a result was measured on: GPU name, compute capability, driver, CUDA and torch versions, L2 size."""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch

from cudagym.judge.records import Hardware


@functools.lru_cache(maxsize=8)
def describe(device: torch.device) -> Hardware:
    """The :class:`Hardware` record of ``device`` (``gpu="cpu"`` for the CPU test path); cached per process."""
    if device.type != "cuda":
        return Hardware(gpu="cpu", torch=torch.__version__)
    props = torch.cuda.get_device_properties(device)
    return Hardware(
        gpu=props.name,
        compute_capability=f"{props.major}.{props.minor}",
        driver=driver_version(),
        cuda=str(torch.version.cuda or ""),
        torch=torch.__version__,
        l2_cache_bytes=int(getattr(props, "L2_cache_size", 0)),
    )


def l2_cache_bytes(device: torch.device) -> int:
    """The device's L2 cache size in bytes (0 on the CPU or where torch does not report it)."""
    return describe(device).l2_cache_bytes


@functools.lru_cache(maxsize=1)
def driver_version() -> str:
    """The NVIDIA driver version (e.g. ``580.65.06``), else the driver's CUDA API version, else ``""``."""
    proc = Path("/proc/driver/nvidia/version")
    try:
        for word in proc.read_text(encoding="utf-8", errors="replace").split():
            parts = word.split(".")
            if len(parts) >= 2 and all(p.isdigit() for p in parts):
                return word
    except OSError:
        pass
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
        version = ctypes.c_int(0)
        if libcuda.cuDriverGetVersion(ctypes.byref(version)) == 0 and version.value:
            return f"cuda-driver-api {version.value // 1000}.{(version.value % 1000) // 10}"
    except OSError:
        pass
    return ""
