"""Helpers of the GPU tests that judge candidates in the test process, as a worker would.

``make_job`` builds a solution with the build stage and prepares its working folder; ``judge`` runs the
harness on it in this process; ``judge_in_child`` runs it in a fresh interpreter, for candidates that may
poison the CUDA context (an illegal address breaks every later CUDA call of the process it happens in).
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from hacks.corpus import load_task

from cudagym.judge.interface import EvalMode
from cudagym.judge.job import Job, KnownBaselines
from cudagym.judge.protocol import Protocol
from cudagym.judge.records import EvalResult, TimingStats, from_dict
from cudagym.solution import Solution

# Cached baselines that keep timing to the candidate (PROFILE mode): tiny, so no speedup looks suspicious.
QUIET = KnownBaselines(eager=TimingStats(median_us=1.0, mean_us=1.0, runs=1),
                       compiled=TimingStats(median_us=1.0, mean_us=1.0, runs=1))

_CHILD = """
import json, pickle, sys
from cudagym.judge.harness import run_job
from cudagym.judge.records import to_dict
job = pickle.load(open(sys.argv[1], "rb"))
print("RESULT " + json.dumps(to_dict(run_job(job))))
"""


def stage_build():
    """``build(task, solution, protocol)`` with the default (content-addressed, persistent) build cache."""
    from cudagym.judge import build as stage

    cache = stage.default_cache()
    return lambda task, solution, protocol: stage.build(task, solution, protocol, cache)


def make_job(build, tmp_path: Path, task_id: str, solution: Solution, protocol: Protocol,
             mode: EvalMode = EvalMode.PROFILE, baselines: KnownBaselines = QUIET) -> Job:
    """Build ``solution`` for ``task_id`` (a bundled id or a hacks task) and wrap it as a worker's job."""
    from cudagym.judge.sandbox import prepare_workdir

    task = load_task(task_id)
    built = build(task, solution, protocol)
    workdir = prepare_workdir(tmp_path / "work", solution)
    return Job(f"gpu-{task.short_hash}", task, solution, built, mode, protocol, baselines, str(workdir))


def judge(job: Job, monkeypatch: pytest.MonkeyPatch) -> EvalResult:
    """Evaluate ``job`` in this process, in its working folder as the worker would."""
    from cudagym.judge.harness.runner import evaluate

    monkeypatch.chdir(job.workdir)
    return evaluate(job)


def judge_in_child(job: Job, tmp_path: Path, timeout_s: float = 600) -> EvalResult:
    """Evaluate ``job`` in a fresh interpreter (its CUDA context dies with it)."""
    (tmp_path / "job.pkl").write_bytes(pickle.dumps(job))
    done = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path / "job.pkl")], cwd=job.workdir,
                          capture_output=True, text=True, timeout=timeout_s)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, f"the child gave no result (exit {done.returncode}): {done.stderr[-3000:]}"
    return from_dict(EvalResult, json.loads(line[len("RESULT "):]))


def edited(solution: Solution, path: str, old: str, new: str) -> Solution:
    """``solution`` with one exact text replacement in one file (the text must be there)."""
    assert old in solution.files[path], f"{old!r} not in {path}"
    return Solution(solution.format, {**solution.files, path: solution.files[path].replace(old, new)})
