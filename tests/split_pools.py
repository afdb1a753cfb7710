"""The trust split on the CPU path, as the tests that attack it through the real worker pool use it."""

from __future__ import annotations

from collections.abc import Iterator

from cudagym.judge.worker import PoolOptions, WorkerPool


def cpu_split_pool() -> Iterator[WorkerPool]:
    """One trusted worker on the CPU path, and a fresh sandboxed runner for each job (one kept spare)."""
    options = PoolOptions(job_fn="cudagym.judge.split.trusted:run_job_on_cpu", runner=True, startup_timeout_s=180.0,
                          spare_runners=1)
    with WorkerPool(["0"], options=options) as pool:
        yield pool
