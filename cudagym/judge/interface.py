"""The one interface between the environment and whatever judges solutions.

The env calls a :class:`Judge` for ``compile()``, ``verify()``, ``profile()`` and ``submit()``. The primitive
is :meth:`Judge.submit`, which returns a future at once; :meth:`Judge.evaluate` is ``submit(...).result()``
and :meth:`Judge.aevaluate` awaits the same future from asyncio code. Every backend (the local one, the Ray
one, the client of a host's judge) runs the one pipeline of :mod:`cudagym.judge.pipeline` or speaks to a
process that does. A judge never raises for a bad candidate: that is an
:class:`~cudagym.judge.records.EvalResult` with a status.
"""

from __future__ import annotations

import abc
import asyncio
import enum
from concurrent.futures import Future

from cudagym.judge.protocol import Protocol
from cudagym.judge.records import BuildResult, EvalResult, Hardware
from cudagym.solution import Solution
from cudagym.task import Task


class EvalMode(str, enum.Enum):
    """How much of an evaluation to run."""

    VERIFY = "verify"  # build + correctness on the protocol's inputs + guards
    PROFILE = "profile"  # VERIFY + timing against the baselines + per-kernel breakdown
    SUBMIT = "submit"  # PROFILE with the full protocol (re-verification of suspicious speedups)


class Judge(abc.ABC):
    """Builds, checks and times solutions of tasks under one protocol."""

    protocol: Protocol

    @abc.abstractmethod
    def build(self, task: Task, solution: Solution) -> BuildResult:
        """Compile the solution (cached by content); never raises for bad candidate code."""

    @abc.abstractmethod
    def submit(
        self, task: Task, solution: Solution, mode: EvalMode = EvalMode.PROFILE, *, job_id: str | None = None
    ) -> Future[EvalResult]:
        """Start judging the solution; the future always gets exactly one result, never an exception.

        Args:
            task: The reference task.
            solution: The candidate's files.
            mode: VERIFY, PROFILE or SUBMIT.
            job_id: A stable id (a journal answers a known id from its record); a fresh one when None.
        """

    @abc.abstractmethod
    def hardware(self) -> Hardware:
        """The GPU this judge evaluates on (``gpu == "none"`` when it has none); cheap after the first call."""

    def evaluate(self, task: Task, solution: Solution, mode: EvalMode = EvalMode.PROFILE) -> EvalResult:
        """Build if needed, then check (and for PROFILE/SUBMIT time) the solution; blocks for the verdict."""
        return self.submit(task, solution, mode).result()

    async def aevaluate(
        self, task: Task, solution: Solution, mode: EvalMode = EvalMode.PROFILE, *, job_id: str | None = None
    ) -> EvalResult:
        """:meth:`evaluate` for asyncio code: awaits the job without blocking the event loop.

        ``submit`` itself may wait while this judge handle has its cap of queued jobs (back-pressure), so it
        runs on the loop's default executor.
        """
        loop = asyncio.get_running_loop()
        future = await loop.run_in_executor(None, lambda: self.submit(task, solution, mode, job_id=job_id))
        return await asyncio.wrap_future(future)

    def cancel_pending(self) -> int:
        """Drop this handle's jobs that have not reached a GPU yet (an env reset or closed).

        Each dropped job's future gets an ``INFRA_ERROR`` result saying it was cancelled. Returns how many
        were dropped; a judge without a queue drops none.
        """
        return 0

    @property
    def has_gpu(self) -> bool:
        """True when :meth:`evaluate` can run checks and timing."""
        return self.hardware().gpu != "none"

    def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Stop worker processes and free resources; safe to call twice."""

    def __enter__(self) -> Judge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
