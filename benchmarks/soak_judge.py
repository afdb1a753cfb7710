"""Soak of the judge: N mixed jobs, 25% faulty candidates, every job gets exactly one result.

Run on a GPU host (real build stage and harness, every GPU, bundled reference solutions as the good jobs,
the fault corpus of tests/faults/ as the bad ones)::

    CUDAGYM_SOAK_JOBS=500 pytest -m slow -s benchmarks/soak_judge.py

Without a GPU the same flow runs with a faked GPU and the CPU stand-in of the harness
(``tests/faults/model_jobs.py``), as a quick smoke (default N = 40).

Asserts: N results (and N journaled), every good job correct, every faulty job a -1-tier status (never
INFRA_ERROR), no stuck worker (a final correct job on every GPU, in time), a healthy GPU (no process of the
judge left on it after close, per nvidia-smi), and prints counts per fault and status, wall time and how many
workers were replaced.
"""

from __future__ import annotations

import collections
import os
import random
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from faults import FAULTS_DIR, candidate, relu_task  # noqa: E402

from cudagym.judge.interface import EvalMode  # noqa: E402
from cudagym.judge.journal import Journal  # noqa: E402
from cudagym.judge.local import GpuProbe, LocalJudge, probe_gpus  # noqa: E402
from cudagym.judge.protocol import DEFAULT_PROTOCOL  # noqa: E402
from cudagym.judge.records import BuildResult, BuildStatus, EvalStatus, Hardware  # noqa: E402
from cudagym.judge.sandbox import GiB, MiB, SandboxPolicy  # noqa: E402
from cudagym.judge.worker import PoolOptions  # noqa: E402
from cudagym.solution import Solution  # noqa: E402

FAULTY_FRACTION = 0.25
TIMEOUT_S = float(os.environ.get("CUDAGYM_SOAK_TIMEOUT_S", "20"))
# fault -> weight: crashes are cheap and common; hangs cost a whole timeout each, so they are rarer
HOST_FAULTS = {"segfault": 3, "exit_os": 3, "exit_sys": 3, "crash_at_import": 3, "stdout_flood": 3,
               "disk_fill": 3, "host_oom": 1, "fork_bomb": 1, "host_loop": 1}
GPU_FAULTS = {"gpu_illegal_address": 3, "gpu_device_oom": 3, "gpu_kernel_loop": 1}
FAIL_STATUSES = {EvalStatus.CRASHED, EvalStatus.TIMEOUT, EvalStatus.RUNTIME_ERROR, EvalStatus.INCORRECT,
                 EvalStatus.BUILD_FAILED, EvalStatus.RULE_VIOLATION}


def _gpu_workload():
    """(judge kwargs, good (task, solution) pairs, fault name -> solution factory) on a real GPU."""
    from cudagym.sources.bundled import BundledSource

    source = BundledSource()
    good = [(t, source.solution(t.id)) for t in source.tasks() if t.level == 1]
    swish_task = source.get("bundled/L1/01_Swish")  # one float32 input: every fault's forward(x) fits it
    swish = source.solution(swish_task.id)

    def fault(name: str) -> Solution:
        folder = FAULTS_DIR / name
        if folder.is_dir():
            return Solution("extension", {p.relative_to(folder).as_posix(): p.read_text()
                                          for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts})
        return Solution("extension", {**swish.files, "model_new.py": (FAULTS_DIR / f"{name}.py").read_text()})

    policy = SandboxPolicy(host_rss_bytes=16 * GiB, file_size_bytes=256 * MiB, disk_bytes=1 * GiB)
    # a quarter of the jobs crash their worker: three spares per GPU start up while the others run
    kwargs = {"devices": "auto", "pool_options": PoolOptions(policy=policy, spare_workers=3)}
    faults = {name: (swish_task, fault(name)) for name in {**HOST_FAULTS, **GPU_FAULTS}}
    return kwargs, good, faults, {**HOST_FAULTS, **GPU_FAULTS}


def _cpu_workload():
    """The same shape on CPU: a faked GPU, the stand-in harness, the relu task."""
    policy = SandboxPolicy(max_processes=32, host_rss_bytes=1 * GiB, file_size_bytes=64 * MiB,
                           disk_bytes=256 * MiB, output_bytes=8 * MiB)
    kwargs = {
        "gpus": GpuProbe(("0", "1"), Hardware(gpu="Fake GPU (CPU smoke)", torch="cpu")),
        "pool_options": PoolOptions(job_fn="model_jobs:run_model", pythonpath=(str(FAULTS_DIR),), policy=policy),
        "build_fn": lambda task, solution, protocol: BuildResult(BuildStatus.OK, solution.format),
    }
    task = relu_task()
    return kwargs, [(task, candidate("good_relu"))], {n: (task, candidate(n)) for n in HOST_FAULTS}, HOST_FAULTS


def _gpu_compute_apps() -> set[str]:
    """The pid of every process with a CUDA context (nvidia-smi), empty where it is missing."""
    import shutil
    import subprocess

    if not shutil.which("nvidia-smi"):
        return set()
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=60).stdout
    return {line.split(",")[0].strip() for line in out.splitlines() if line.strip()}


@pytest.mark.slow
def test_soak_every_job_gets_one_result_and_the_gpus_stay_healthy(tmp_path):
    on_gpu = bool(probe_gpus("auto").device_ids)
    jobs_n = int(os.environ.get("CUDAGYM_SOAK_JOBS", "500" if on_gpu else "40"))
    kwargs, good, faults, weights = _gpu_workload() if on_gpu else _cpu_workload()
    protocol = DEFAULT_PROTOCOL.with_changes(id="cudagym-soak", guards=(), eval_timeout_s=TIMEOUT_S)
    rng = random.Random(1234)
    faulty = set(rng.sample(range(jobs_n), round(jobs_n * FAULTY_FRACTION)))  # exactly a quarter, spread out
    plan = []  # (job id, fault name or "", task, solution)
    for i in range(jobs_n):
        if i in faulty:
            name = rng.choices(list(weights), weights=list(weights.values()))[0]
            plan.append((f"soak-{i:05d}", name, *faults[name]))
        else:
            plan.append((f"soak-{i:05d}", "", *good[i % len(good)]))
    journal_path = tmp_path / "soak.jsonl"
    apps_before = _gpu_compute_apps() if on_gpu else set()
    started = time.monotonic()
    # on a GPU host the user build cache (CUDAGYM_CACHE_DIR), which benchmarks/prebuild.py can fill beforehand
    cache_dir = None if on_gpu else tmp_path / "cache"
    with LocalJudge(protocol, cache_dir=cache_dir, journal=journal_path, **kwargs) as judge:
        futures = [judge.submit(task, solution, EvalMode.VERIFY, job_id=job_id) for job_id, _, task, solution in plan]
        budget_s = 600 + jobs_n * (TIMEOUT_S + 30)
        results = [f.result(timeout=budget_s) for f in futures]
        soak_s = time.monotonic() - started
        generations = [w.generation for w in judge.workers()]
        # no stuck worker: one more correct job per GPU, each within its timeout
        final_started = time.monotonic()
        finals = [judge.submit(*good[0], EvalMode.VERIFY) for _ in generations]
        final = [f.result(timeout=TIMEOUT_S + 300) for f in finals]
        final_s = time.monotonic() - final_started

    counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for (_, name, _, _), result in zip(plan, results, strict=True):
        counts[name or "good"][result.status.value] += 1
    print(f"\nsoak: {jobs_n} jobs ({sum(1 for p in plan if p[1])} faulty) on {'GPU' if on_gpu else 'CPU'} "
          f"in {soak_s:.0f} s; workers per device after: {generations} (replacements included)")
    for name in sorted(counts):
        print(f"  {name:22s} {dict(counts[name])}")
    print(f"  final correct jobs: {[r.status.value for r in final]} in {final_s:.1f} s")

    assert len(results) == jobs_n
    journaled = Journal(journal_path).done_ids()
    assert {job_id for job_id, *_ in plan} <= journaled and len(journaled) == jobs_n + len(final)
    outcomes = list(zip(plan, results, strict=True))
    bad_good = [(p[0], r.status.value, r.message[:200]) for p, r in outcomes
                if not p[1] and r.status is not EvalStatus.OK]
    assert not bad_good, bad_good
    wrong_faults = [(p[1], r.status.value, r.message[:200]) for p, r in outcomes
                    if p[1] and r.status not in FAIL_STATUSES]
    assert not wrong_faults, wrong_faults
    assert all(r.status is EvalStatus.OK for r in final), [r.message for r in final]
    if on_gpu:  # a healthy GPU: once the judge closed, none of its processes holds a context any more
        deadline = time.monotonic() + 60  # the driver tears contexts down asynchronously
        while (left := _gpu_compute_apps() - apps_before) and time.monotonic() < deadline:
            time.sleep(1)
        print(f"  processes on the GPUs after close: {sorted(left) or 'none of the judge'}")
        assert not left, f"judge processes still on the GPU after close: {sorted(left)}"
