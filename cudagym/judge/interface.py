"""The one interface between the environment and whatever judges solutions.

The env calls a :class:`Judge` for ``compile()``, ``verify()``, ``profile()`` and ``submit()``. The local
implementation runs builds on CPU workers and checks/timing on GPU worker processes; a Ray-backed or remote
judge implements the same methods. A judge never raises for a bad candidate: that is an
:class:`~cudagym.judge.records.EvalResult` with a status.
"""

from __future__ import annotations

import abc
import enum

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
    def evaluate(self, task: Task, solution: Solution, mode: EvalMode = EvalMode.PROFILE) -> EvalResult:
        """Build if needed, then check (and for PROFILE/SUBMIT time) the solution against the task."""

    @abc.abstractmethod
    def hardware(self) -> Hardware:
        """The GPU this judge evaluates on (``gpu == "none"`` when it has none); cheap after the first call."""

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
