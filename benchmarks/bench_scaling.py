"""Evaluations per minute on one GPU and on two (issue 16): LocalJudge and RayJudge, in one run on one host.

On a two-GPU host (the device tool's ``nvidia-h200-x2``; builds first, so the window times GPU work)::

    CUDAGYM_BENCH_GPU=1 pytest benchmarks/bench_scaling.py -s --benchmark-json scaling.json

or, as one device call (kind ``nvidia-h200-x2``; carry ``.whl``, ``.debs``, ``.commit``; about 8 minutes)::

    bash benchmarks/gpu_session.sh 450 585 prebuild1:120 scaling:455

Four figures in one run, all sharing one cache folder: LocalJudge with ``devices=[0]`` then ``[0, 1]``, RayJudge
with one GPU actor then two. Each runs the bundled level-1 tasks' solutions in PROFILE: a warm-up judges each
once (baselines, then cached; builds come from the default build cache, which ``benchmarks/prebuild.py``
fills), then for ``CUDAGYM_BENCH_SECONDS`` (default 60) it keeps
:data:`IN_FLIGHT_PER_GPU` jobs in flight per GPU and counts the correct verdicts that arrive in the window.
Beside each rate: each GPU's busy fraction (``nvidia-smi``'s ``utilization.gpu``, the share of time a kernel
ran, sampled every 200 ms over the window) and the baseline jobs the pipeline ran; the four runs share one
baseline cache, so each task is timed once, in the first warm-up, and never again. The goal (two GPUs at least
1.9x one) is printed with the figures, not asserted.

The driver (:func:`measure`, :class:`BaselineJobs`, :class:`GpuSampler`) is tested on the CPU against a test
judge of one or two stand-in GPUs (``tests/test_bench_scaling.py``).
"""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from cudagym.judge.interface import EvalMode
from cudagym.judge.records import EvalResult, EvalStatus
from cudagym.solution import Solution
from cudagym.task import Task

GPU = os.environ.get("CUDAGYM_BENCH_GPU") == "1"
WINDOW_S = float(os.environ.get("CUDAGYM_BENCH_SECONDS", "60"))
IN_FLIGHT_PER_GPU = 4  # one running, the rest queued: a lane never waits for the client
SAMPLE_MS = 200
GOAL = 1.9


@dataclass
class Rate:
    """One judge's window: correct verdicts, the window's length, and each GPU's busy fraction in it."""

    correct: int
    other: int
    seconds: float
    busy: dict[int, float] = field(default_factory=dict)

    @property
    def per_minute(self) -> float:
        """Correct verdicts per minute of the window."""
        return self.correct / self.seconds * 60.0 if self.seconds > 0 else 0.0


def bundled_level1() -> list[tuple[Task, Solution]]:
    """The bundled suite's level-1 tasks with their solutions."""
    from cudagym.sources.bundled import BundledSource

    source = BundledSource()
    return [(source.get(t.id), source.solution(t.id)) for t in source.tasks() if t.level == 1]


class BaselineJobs:
    """Counts, per task id, the baseline jobs a judge's pipeline sends to its GPUs (they carry ``baselines:`` ids).

    Only counts: every job still runs as it would (the pipeline's GPU service is wrapped, not replaced).
    """

    def __init__(self) -> None:
        self.by_task: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()

    def watch(self, judge: Any) -> None:
        """Count the baseline jobs of ``judge`` (a LocalJudge, RayJudge or any PipelineJudge) from now on."""
        gpus = judge.pipeline.gpus
        run = gpus.run

        def counted(spec: Any) -> Future[EvalResult]:
            if spec.job_id.startswith("baselines:"):
                with self._lock:
                    self.by_task[spec.task.id] += 1
            return run(spec)

        gpus.run = counted


class GpuSampler:
    """``nvidia-smi``'s per-GPU ``utilization.gpu`` every :data:`SAMPLE_MS` while running (none without it)."""

    def __init__(self, command: str = "nvidia-smi") -> None:
        self.command = command
        self.samples: dict[int, list[float]] = collections.defaultdict(list)
        self._proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    @contextmanager
    def running(self) -> Iterator[GpuSampler]:
        """Sample for the duration of the block."""
        self.samples.clear()
        if shutil.which(self.command) is not None:
            self._proc = subprocess.Popen(
                [self.command, "--query-gpu=index,utilization.gpu", "--format=csv,noheader,nounits",
                 f"-lms={SAMPLE_MS}"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            self._reader = threading.Thread(target=self._read, daemon=True)
            self._reader.start()
        try:
            yield self
        finally:
            if self._proc is not None:
                self._proc.terminate()
                self._proc.wait(10)
                self._proc = None
            if self._reader is not None:
                self._reader.join(10)

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            index, _, util = line.partition(",")
            try:
                self.samples[int(index)].append(float(util) / 100.0)
            except ValueError:
                continue

    def busy(self) -> dict[int, float]:
        """Each GPU's mean busy fraction over the samples taken."""
        return {i: sum(v) / len(v) for i, v in sorted(self.samples.items()) if v}


def warm_up(judge: Any, work: Sequence[tuple[Task, Solution]]) -> list[EvalResult]:
    """Judge each solution once, all at once (builds, baselines); the results."""
    futures = [judge.submit(task, solution, EvalMode.PROFILE) for task, solution in work]
    return [f.result(timeout=1800) for f in futures]


def measure(judge: Any, work: Sequence[tuple[Task, Solution]], seconds: float, in_flight: int,
            sampler: GpuSampler | None = None) -> Rate:
    """Keep ``in_flight`` PROFILE jobs of ``work`` (in turn) in flight for ``seconds``; count what arrives in time.

    Jobs still running when the window closes are waited for (so they do not spill into the next judge's
    window) but not counted.
    """
    slots = threading.Semaphore(in_flight)
    lock = threading.Lock()
    arrived: list[tuple[float, EvalStatus]] = []
    futures: list[Future[EvalResult]] = []

    def done(future: Future[EvalResult]) -> None:
        with lock:
            arrived.append((time.perf_counter(), future.result().status))
        slots.release()

    sampler = sampler or GpuSampler()
    with sampler.running():
        start = time.perf_counter()
        end = start + seconds
        k = 0
        while time.perf_counter() < end:
            if not slots.acquire(timeout=0.05):
                continue
            task, solution = work[k % len(work)]
            k += 1
            future = judge.submit(task, solution, EvalMode.PROFILE)
            futures.append(future)
            future.add_done_callback(done)
    for future in futures:
        future.result(timeout=1800)
    with lock:
        in_window = [status for at, status in arrived if at <= end]
    correct = sum(1 for s in in_window if s is EvalStatus.OK)
    return Rate(correct, len(in_window) - correct, seconds, sampler.busy())


def describe(name: str, gpus: int, rate: Rate) -> str:
    """One line of the table."""
    busy = ", ".join(f"GPU {i} {b:.0%}" for i, b in rate.busy.items()) or "no nvidia-smi"
    return (f"| {name} | {gpus} | {rate.correct} | {rate.other} | {rate.seconds:.0f} | {rate.per_minute:.1f} | "
            f"{busy} |")


# ---------------------------------------------------------------------------------------------- on two GPUs


def _scaling_run(cache_dir: str) -> dict[str, Any]:
    from pathlib import Path

    from cudagym.judge.local import LocalJudge
    from cudagym.judge.pipeline import cache_root_of

    Path(cache_dir).mkdir(parents=True, exist_ok=True)  # a fresh baseline cache, the host's builds
    builds = cache_root_of(None) / "build"
    if builds.is_dir():
        (Path(cache_dir) / "build").symlink_to(builds)
    work = bundled_level1()
    jobs = BaselineJobs()
    rates: dict[tuple[str, int], Rate] = {}
    for n in (1, 2):
        with LocalJudge(devices=list(range(n)), cache_dir=cache_dir) as judge:
            jobs.watch(judge)
            bad = [r for r in warm_up(judge, work) if r.status is not EvalStatus.OK]
            assert not bad, [f"{r.status.value}: {r.message[:300]}" for r in bad]
            rates[("LocalJudge", n)] = measure(judge, work, WINDOW_S, IN_FLIGHT_PER_GPU * n)
    ray = pytest.importorskip("ray")
    from cudagym.judge.ray_judge import RayJudge

    ray.init(include_dashboard=False, log_to_driver=False)
    try:
        for n in (1, 2):
            with RayJudge(actors=n, gpus_per_actor=1, cache_dir=cache_dir) as judge:
                jobs.watch(judge)
                warm_up(judge, work)
                rates[("RayJudge", n)] = measure(judge, work, WINDOW_S, IN_FLIGHT_PER_GPU * n)
    finally:
        ray.shutdown()
    return {"rates": rates, "baseline_jobs": dict(jobs.by_task), "tasks": [t.id for t, _ in work]}


@pytest.mark.skipif(not GPU, reason="set CUDAGYM_BENCH_GPU=1 on a two-GPU host")
def test_two_gpus_against_one_local_and_ray(benchmark: Any, tmp_path: Any) -> None:
    from cudagym.judge.gpus import probe_gpus

    if len(probe_gpus("auto").device_ids) < 2:
        pytest.skip("needs two GPUs (the device tool's nvidia-h200-x2)")
    found = benchmark.pedantic(_scaling_run, args=(str(tmp_path / "cache"),), rounds=1, iterations=1)
    rates, baseline_jobs = found["rates"], found["baseline_jobs"]
    lines = ["| judge | GPUs | correct | other | window s | per minute | busy |", "|---|---:|---:|---:|---:|---:|---|"]
    lines += [describe(name, n, rate) for (name, n), rate in rates.items()]
    for name in ("LocalJudge", "RayJudge"):
        ratio = rates[(name, 2)].per_minute / max(rates[(name, 1)].per_minute, 1e-9)
        lines.append(f"{name}: two GPUs / one = {ratio:.2f}x (goal >= {GOAL}x)")
        benchmark.extra_info[f"{name}_two_over_one"] = ratio
    lines.append(f"baseline jobs per task over the four runs: {baseline_jobs} (tasks: {len(found['tasks'])})")
    print("\n" + "\n".join(lines))
    benchmark.extra_info.update({f"{name}_{n}gpu_per_minute": r.per_minute for (name, n), r in rates.items()})
    benchmark.extra_info["baseline_jobs"] = baseline_jobs
    assert all(r.correct > 0 for r in rates.values()), lines
    assert set(baseline_jobs) <= set(found["tasks"]) and all(v == 1 for v in baseline_jobs.values()), baseline_jobs
