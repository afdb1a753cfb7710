"""A GPU job: what the judge process sends to a worker, and what comes back.

The worker infrastructure (``cudagym.judge.worker``) moves jobs between processes, enforces timeouts and
replaces dead workers; the harness (``cudagym.judge.harness``) runs one job inside a worker. This module is
the seam between them: plain, picklable, frozen records. A :class:`JobSpec` is the host-free form of a job
that crosses hosts; a :class:`Job` is what one host's worker runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from cudagym.judge.interface import EvalMode
from cudagym.judge.protocol import Protocol
from cudagym.judge.records import BuildResult, TimingStats, Yardstick
from cudagym.solution import Solution
from cudagym.task import Task


@dataclass(frozen=True)
class KnownBaselines:
    """Baseline times from the cache; ``eager.runs == 0`` means unknown (the harness times them).

    ``yardstick``: the reference's time in a runner, taken by the clean job that timed the baselines; a job that
    does not retime the baselines takes it from here instead of timing it again (unmeasured: it times it).
    """

    eager: TimingStats = field(default_factory=TimingStats)
    compiled: TimingStats = field(default_factory=TimingStats)
    yardstick: Yardstick = field(default_factory=Yardstick)

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


@dataclass(frozen=True)
class JobSpec:
    """A job as a value: what any host needs to run it, and nothing that names a place on the judge's host.

    The pipeline makes one per evaluation and hands it to a GPU service. The service's host resolves
    :attr:`artifact_key` in its own build cache (building on a miss), makes its own working copy of the
    solution, and only then turns the spec into a worker :class:`Job` with paths of that host
    (:meth:`to_job`).

    Attributes:
        job_id: Unique id; the journal records exactly one result per id.
        task: The reference task.
        solution: The candidate's files.
        mode: VERIFY, PROFILE or SUBMIT.
        protocol: How to judge.
        build: The build's facts (status, diagnostics, kernels) without ``artifact_path``.
        baselines: Cached baseline times, if any.
    """

    job_id: str
    task: Task
    solution: Solution
    mode: EvalMode
    protocol: Protocol
    build: BuildResult
    baselines: KnownBaselines = field(default_factory=KnownBaselines)

    @classmethod
    def of(cls, job_id: str, task: Task, solution: Solution, mode: EvalMode, protocol: Protocol,
           build: BuildResult, baselines: KnownBaselines | None = None) -> JobSpec:
        """A spec whose build record names no path of this host."""
        return cls(job_id, task, solution, mode, protocol, replace(build, artifact_path=""),
                   baselines or KnownBaselines())

    @property
    def artifact_key(self) -> str:
        """The content key of the built artifact the job loads."""
        return self.build.artifact_key

    def to_job(self, local_build: BuildResult, workdir: str) -> Job:
        """The worker's job on this host: ``local_build`` is this host's build of the same key."""
        return Job(self.job_id, self.task, self.solution, local_build, self.mode, self.protocol, self.baselines,
                   workdir)
