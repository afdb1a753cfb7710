"""Task sources: KernelBench (checkout or Hugging Face), CUDA-Agent-Ops-6K, and the bundled suite.

Each source is a :class:`TaskSource`; constructing one reads nothing, its tasks load on first use. Most
callers want :mod:`cudagym.suites` instead, which picks the source by suite name or task id.
"""

from __future__ import annotations

from cudagym.sources.base import TaskSource
from cudagym.sources.bundled import BundledSource
from cudagym.sources.kernelbench import KernelBenchHubSource, KernelBenchSource, kernelbench_source
from cudagym.sources.ops6k import Ops6KSource

__all__ = [
    "TaskSource",
    "KernelBenchSource",
    "KernelBenchHubSource",
    "kernelbench_source",
    "Ops6KSource",
    "BundledSource",
]
