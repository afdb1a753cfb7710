"""Fault candidates (one file per fault, each opening with a comment naming it) and helpers to judge them."""

from __future__ import annotations

import uuid
from pathlib import Path

from cudagym.judge.interface import EvalMode
from cudagym.judge.job import Job
from cudagym.judge.protocol import CUDAGYM_V0, Protocol
from cudagym.judge.records import BuildResult, BuildStatus
from cudagym.solution import Solution
from cudagym.task import Task, make_task

FAULTS_DIR = Path(__file__).resolve().parent

RELU_SOURCE = '''\
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(256, 256)]


def get_init_inputs():
    return []
'''


def relu_task() -> Task:
    return make_task(RELU_SOURCE, id="test/relu", suite="test", level=1, name="relu", origin="tests/faults")


def fast_protocol(timeout_s: float = 30.0) -> Protocol:
    return CUDAGYM_V0.with_changes(id="test-fast", eval_timeout_s=timeout_s)


def candidate(name: str) -> Solution:
    """The inline-format solution whose model_new.py is tests/faults/<name>.py."""
    return Solution("inline", {"model_new.py": (FAULTS_DIR / f"{name}.py").read_text()})


def script(source: str) -> Solution:
    """An inline-format solution from source text (run by the `jobs:run_script` stand-in)."""
    return Solution("inline", {"model_new.py": source})


def make_job(solution: Solution, *, timeout_s: float = 30.0, task: Task | None = None, job_id: str = "") -> Job:
    return Job(
        job_id=job_id or uuid.uuid4().hex[:12],
        task=task or relu_task(),
        solution=solution,
        build=BuildResult(BuildStatus.OK, solution.format),
        mode=EvalMode.VERIFY,
        protocol=fast_protocol(timeout_s),
    )


def process_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (not gone, not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False
