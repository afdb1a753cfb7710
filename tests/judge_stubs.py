"""Stand-in build and GPU services for the pipeline's CPU tests: the real pipeline over services that
answer from configuration, record what they were given, and can be held back to test queueing."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from cudagym.judge.baselines import BaselineCache
from cudagym.judge.gpus import GpuProbe
from cudagym.judge.job import JobSpec
from cudagym.judge.pipeline import BuildService, GpuService, Pipeline, PipelineJudge
from cudagym.judge.protocol import Protocol
from cudagym.judge.records import BuildResult, BuildStatus, EvalResult, EvalStatus, Hardware, TimingStats
from cudagym.solution import Solution
from cudagym.task import Task

STUB_GPU = Hardware(gpu="Stub GPU", compute_capability="9.0", torch="0.0-stub")


class StubBuilds(BuildService):
    """OK builds (a COMPILE_ERROR when model_new.py says BROKEN) after ``delay_s``, on a thread pool."""

    def __init__(self, delay_s: float = 0.0, workers: int = 4) -> None:
        self.delay_s = delay_s
        self.calls = 0
        self.pool = ThreadPoolExecutor(workers)
        self.lock = threading.Lock()

    def build(self, task: Task, solution: Solution, protocol: Protocol) -> Future[BuildResult]:
        with self.lock:
            self.calls += 1
        return self.pool.submit(self._build, solution)

    def _build(self, solution: Solution) -> BuildResult:
        time.sleep(self.delay_s)
        if "BROKEN" in solution.files.get("model_new.py", ""):
            return BuildResult(BuildStatus.COMPILE_ERROR, solution.format, message="BROKEN")
        return BuildResult(BuildStatus.OK, solution.format, artifact_key=f"key-{solution.content_hash[:8]}",
                           artifact_path=f"/build-host/{solution.content_hash[:8]}.so")

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


class StubGpus(GpuService):
    """``devices`` GPUs that run each job on a thread once ``gate`` is set; records every spec it ran.

    Reference jobs (baselines) report eager 100 us and compile 90 us; others a candidate of 50 us.
    """

    def __init__(self, devices: int = 1, *, slots: int | None = None, hold: bool = False, job_s: float = 0.0) -> None:
        self.devices = tuple(str(i) for i in range(devices))
        self._slots = slots
        self.gate = threading.Event()
        if not hold:
            self.gate.set()
        self.job_s = job_s
        self.started: list[JobSpec] = []
        self.lock = threading.Lock()
        self.running = 0  # jobs inside their run now, and the most there were at once
        self.most_running = 0
        self.together = 0  # n > 0: a job waits (10 s at most) until n run at once, a test's proof that they can
        self._cond = threading.Condition(self.lock)
        self.pool = ThreadPoolExecutor(16)
        self.closed = False

    def probe(self) -> GpuProbe:
        if not self.devices:
            return GpuProbe((), Hardware(), "stub without GPUs")
        return GpuProbe(self.devices, STUB_GPU)

    def known_hardware(self) -> Hardware:
        return STUB_GPU if self.devices else Hardware()

    def slots(self) -> int:
        return self._slots if self._slots is not None else super().slots()

    def run(self, spec: JobSpec) -> Future[EvalResult]:
        with self.lock:
            self.started.append(spec)
        return self.pool.submit(self._run, spec)

    def _run(self, spec: JobSpec) -> EvalResult:
        self.gate.wait(timeout=60)
        with self._cond:
            self.running += 1
            self.most_running = max(self.most_running, self.running)
            self._cond.notify_all()
            if self.together:
                self._cond.wait_for(lambda: self.running >= self.together, timeout=10)
        try:
            time.sleep(self.job_s)
            return self._result(spec)
        finally:
            with self._cond:
                self.running -= 1

    def _result(self, spec: JobSpec) -> EvalResult:
        if spec.job_id.startswith("baselines:"):
            return EvalResult(EvalStatus.OK, "baselines", build=spec.build, hardware=STUB_GPU,
                              eager=TimingStats(median_us=100.0, runs=10),
                              compiled=TimingStats(median_us=90.0, runs=10))
        return EvalResult(EvalStatus.OK, f"ran {spec.job_id}", build=spec.build, hardware=STUB_GPU,
                          candidate=TimingStats(median_us=50.0, runs=10), eager=spec.baselines.eager,
                          compiled=spec.baselines.compiled)

    def candidates(self) -> list[str]:
        """Job ids of the non-baseline jobs, in the order they started."""
        with self.lock:
            return [s.job_id for s in self.started if not s.job_id.startswith("baselines:")]

    def close(self) -> None:
        self.closed = True
        self.gate.set()
        self.pool.shutdown(wait=False, cancel_futures=True)


def stub_judge(tmp_path: Path, *, gpus: StubGpus | None = None, builds: StubBuilds | None = None,
               max_queued_per_env: int = 8, protocol: str = "cudagym") -> PipelineJudge:
    """A judge handle on a new pipeline over the stubs (baselines cached under ``tmp_path``)."""
    pipeline = Pipeline(builds or StubBuilds(), gpus or StubGpus(), BaselineCache(tmp_path / "baselines"),
                        max_queued_per_env=max_queued_per_env)
    return PipelineJudge(protocol, pipeline)
