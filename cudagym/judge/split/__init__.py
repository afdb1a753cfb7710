"""The trust split: the verdict is made in a process that never loads candidate code.

Per GPU, the worker (:mod:`cudagym.judge.worker`) is the *trusted* process: it owns the task's reference,
the input seeds and inputs, the reference outputs, the comparison, the baseline timings and the verdict.
Each job's candidate runs in a fresh *runner* (:mod:`.runner`), sandboxed on its own, started ahead of the
job and killed after it, so no state of one candidate survives to the next. The two share only two arenas
of memory (:mod:`.arena`: the inputs the trusted side wrote, the outputs the runner copied back) and a socket
of JSON messages (:mod:`.channel`). In the trusted process the candidate is a proxy (:mod:`.remote`); the
job function is :func:`.trusted.run_job`.

What the runner reports (its guards' findings, its timings) can only count against the candidate: a
timing claim stands only where the trusted process's own clock agrees, and the outputs are judged from
their bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

RUNNER_MODULE = "cudagym.judge.split.runner"
# A timed request, part by part, as each side accounts for it (microseconds, in this order). The runner: the
# inputs' views and the persisting-L2 reset (unbracketed, the flush too); its call queued (and the events read
# after); its host blocked until the GPU finished; torch's switches restored (unbracketed, the outputs copied out).
# The trusted process: its own part queued (inputs into the arena, the flush, the signals, the outputs' copy) and
# the request sent; the wait for the reply; the bracket closed and read.
RUNNER_PHASES = ("prepare", "queue", "GPU wait", "deliver")
TRUSTED_PHASES = ("queue and send", "reply wait", "close")


@dataclass(frozen=True)
class RunnerHandoff:
    """What the worker gets with a job in the split: the socket to the job's runner and the runner's copy of it."""

    fd: int
    job: Any  # the Job, its paths the runner's own
    on_candidate: Callable[[], None] | None = None  # called as the candidate is sent to the runner to load


__all__ = ["RUNNER_MODULE", "RUNNER_PHASES", "TRUSTED_PHASES", "RunnerHandoff"]
