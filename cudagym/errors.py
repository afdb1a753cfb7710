"""Named exceptions for misuse of the library.

A bad candidate kernel is never an exception: it is data (a status and an observation). These errors are
for the caller of the library: a missing data set, a malformed task file, an unknown id or option.
Each message says what was expected, what was found, and what to do.
"""

from __future__ import annotations


class CudaGymError(Exception):
    """Base class of every error cudagym raises on purpose."""


class TaskFormatError(CudaGymError, ValueError):
    """A task file is not in KernelBench format (missing `Model`, `get_inputs`, `get_init_inputs`, ...)."""


class DataUnavailableError(CudaGymError, FileNotFoundError):
    """A task source's data cannot be found locally and cannot be fetched; the message says how to provide it."""


class UnknownTaskError(CudaGymError, KeyError):
    """A task id, suite or filter matched nothing."""

    def __str__(self) -> str:  # KeyError would repr() the message; show it as written
        return str(self.args[0]) if self.args else ""


class ConfigError(CudaGymError, ValueError):
    """An option (protocol, solution format, reward mode, tokenizer, ...) has an unsupported value."""


class BuildToolError(CudaGymError, RuntimeError):
    """A build tool the judge needs (nvcc, a C++ compiler, torch headers) is missing or unusable."""


class SandboxUnavailableError(CudaGymError, RuntimeError):
    """The host cannot confine candidate code as asked (bubblewrap missing or namespaces not allowed)."""
