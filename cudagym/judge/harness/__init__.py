"""The in-worker harness: runs one :class:`~cudagym.judge.job.Job` on a GPU and returns its verdict.

A GPU worker process calls :func:`run_job`. The harness loads the reference task and the candidate, checks
correctness on the protocol's inputs, runs the reward-hacking guards, times candidate and baselines, and
profiles per-kernel time. It never raises for anything the candidate does: that is a status in the
returned :class:`~cudagym.judge.records.EvalResult`.

Contract with the worker
    A CUDA error raised while the candidate ran (illegal address, launch failure, device-side assert, ...)
    can leave the process's CUDA context unusable. The harness then returns ``RUNTIME_ERROR`` with a
    message that starts with ``"CUDA error:"`` and a log line holding :data:`CONTEXT_POISONED_MARKER`;
    :func:`is_context_poisoned` checks for it. The worker must replace its process before the next job.

Order of one evaluation (:mod:`cudagym.judge.harness.runner`)
    static guard checks -> load the reference (fresh module) and the candidate (format loader, then
    ``model_new.py``) -> build both models with the same weights -> correctness on the protocol's seeds,
    candidate first on its own copy of each input set -> guards -> (PROFILE/SUBMIT) interleaved timing on
    fresh inputs with spot checks -> one more audited check -> per-kernel profile -> verdict.

Bounded device memory (:mod:`cudagym.judge.harness.memory`)
    Beyond what the reference needs to run, at most one more input set and its outputs are on the GPU; a
    task whose own inputs, reference run or baselines do not fit is ``TASK_TOO_LARGE``. Every result records
    its peak device memory and time per phase (``EvalResult.cost``) and the precision switches it ran under.

Protocol knobs read from ``Protocol.extra``
    ``module_mode``: ``"eval"`` (default; both models in ``.eval()``, as the CUDA Agent scripts do) or
    ``"train"`` (KernelBench's harness never calls ``.eval()``: BatchNorm then uses batch statistics).
    ``suspicious_speedup_x``: the speedup vs eager above which a result is re-verified (default 10).

CPU test path
    :func:`cudagym.judge.harness.runner.evaluate` takes ``device="cpu"``: the same pipeline with a host
    timer and without the GPU-only guards' checks (side streams, kernel mix, allocator scrub).

Importing this package is cheap (no torch): the worker's parent process may import it for the marker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - typing only
    from cudagym.judge.job import Job
    from cudagym.judge.records import EvalResult

# A line in EvalResult.log that says the CUDA context of the worker process is poisoned.
CONTEXT_POISONED_MARKER = "[cudagym] CUDA_CONTEXT_POISONED: replace this worker process"

# EvalResult.message of a poisoned context starts with this.
CUDA_ERROR_PREFIX = "CUDA error:"

# A part of EvalResult.message (after "; ", up to the end) when the torch.compile baseline was not timed
# because compiling or its first call raised; the exception's line follows the prefix.
COMPILE_FAILED_PREFIX = "torch.compile baseline failed: "


def is_context_poisoned(result: EvalResult) -> bool:
    """True when ``result`` says the worker's CUDA context can no longer be trusted.

    Its typed field only: the log holds text of the candidate's (its output, its runner's notes), and a candidate
    that printed the marker made the pool replace a healthy worker after every job.
    """
    return result.context_poisoned


def run_job(job: Job) -> EvalResult:
    """Evaluate one job on this process's current CUDA device; never raises for candidate problems.

    Args:
        job: The task, the built solution, the mode (VERIFY/PROFILE/SUBMIT), the protocol and the workdir.

    Returns:
        The complete verdict: status, per-input checks, violations, timings in microseconds, speedups,
        per-kernel breakdown (PROFILE/SUBMIT), protocol id, hardware and log.
    """
    from cudagym.judge.harness.runner import evaluate

    return evaluate(job)


__all__ = ["CONTEXT_POISONED_MARKER", "CUDA_ERROR_PREFIX", "is_context_poisoned", "run_job"]
