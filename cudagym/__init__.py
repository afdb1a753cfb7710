"""cudagym: Gymnasium environments for RL agents that write fast, correct CUDA kernels.

Importing the package registers the environment ids (``CudaKernel-L1-v0`` ... ``CudaKernel-Bundled-v0``).
Import is cheap: no CUDA queries, no network, and torch is not imported until a judge needs it.
"""

from __future__ import annotations

__version__ = "0.1.0"

from cudagym.env import CudaKernelEnv
from cudagym.errors import (
    BuildToolError,
    ConfigError,
    CudaGymError,
    DataUnavailableError,
    TaskFormatError,
    UnknownTaskError,
)
from cudagym.task import Task

__all__ = [
    "__version__",
    "Task",
    "CudaKernelEnv",
    "CudaGymError",
    "TaskFormatError",
    "DataUnavailableError",
    "UnknownTaskError",
    "ConfigError",
    "BuildToolError",
]

from cudagym import registration as _registration  # noqa: F401
