"""A GPU job: what the judge process sends to a worker, and what comes back.

The worker infrastructure (``cudagym.judge.worker``) moves jobs between processes, enforces timeouts and
replaces dead workers; the harness (``cudagym.judge.harness``) runs one job inside a worker. This module is
the seam between them: plain, picklable, frozen records.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cudagym.judge.interface import EvalMode
from cudagym.judge.protocol import Protocol
from cudagym.judge.records import BuildResult, TimingStats
from cudagym.solution import Solution
from cudagym.task import Task


@dataclass(frozen=True)
class KnownBaselines:
    """Baseline times from the cache; ``eager.runs == 0`` means unknown (the harness times them)."""

    eager: TimingStats = field(default_factory=TimingStats)
    compiled: TimingStats = field(default_factory=TimingStats)

    @property
    def known(self) -> bool:
        """True when both baselines came from the cache."""
        return self.eager.measured and self.compiled.measured


@dataclass(frozen=True)
class Job:
    """One evaluation to run on a GPU worker.

    Attributes:
        job_id: Unique id; the journal records exactly one result per id.
        task: The reference task.
        solution: The candidate's files.
        build: The finished build (``artifact_path`` is what the worker loads).
        mode: VERIFY, PROFILE or SUBMIT.
        protocol: How to judge.
        baselines: Cached baseline times, if any.
        workdir: A private copy of the solution and protected files; the candidate's cwd.
    """

    job_id: str
    task: Task
    solution: Solution
    build: BuildResult
    mode: EvalMode
    protocol: Protocol
    baselines: KnownBaselines = field(default_factory=KnownBaselines)
    workdir: str = ""
