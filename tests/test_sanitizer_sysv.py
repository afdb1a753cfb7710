"""System V IPC is refused to the candidate under compute-sanitizer, as it is in the job's runner.

A segment no process maps lives on in the sandbox's IPC namespace, held by no process, so no memory limit counts
it (``test_runner_persistence`` has the attack on the runner). The gates run the candidate a second time, in the
sanitized runner, a process of its own: the refusal must hold there too. Through the real worker pool on the CPU
path, with ``test_sanitizer_pool``'s stand-in playing compute-sanitizer at its command line (it runs the real
sanitized runner, confined, then reports as the tool does). The candidates act only under the tool (the sanitized
runner's ``argv[0]`` tells), so the job's runner has judged them honest and the gate decides.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from split_pools import cpu_split_pool
from test_sanitizer_pool import GATED, STAND_IN, TASK

from cudagym.judge.interface import EvalMode
from cudagym.judge.job import Job, KnownBaselines
from cudagym.judge.records import BuildResult, BuildStatus, EvalResult, EvalStatus
from cudagym.judge.sanitizer import BINARY_ENV
from cudagym.judge.worker import WorkerPool
from cudagym.solution import Solution
from cudagym.task import make_task

# Asks for one System V object of each kind when its module loads (removing any it got: nothing is left behind).
PROBE = '''
import ctypes
import os
import sys

import torch
import torch.nn as nn

UNDER_THE_TOOL = sys.argv[0].endswith("sanitizer.py")
_libc = ctypes.CDLL(None, use_errno=True)


def _ask(kind, get, remove):
    key = get()
    if key < 0:
        return f"{kind} refused: {os.strerror(ctypes.get_errno())}"
    remove(key)
    return f"{kind} gave id {key}"


OUTCOMES = [  # IPC_PRIVATE, IPC_CREAT | 0600; IPC_RMID
    _ask("shmget", lambda: _libc.shmget(0, 64 << 20, 0o1600), lambda k: _libc.shmctl(k, 0, None)),
    _ask("semget", lambda: _libc.semget(0, 1, 0o1600), lambda k: _libc.semctl(k, 0, 0)),
    _ask("msgget", lambda: _libc.msgget(0, 0o1600), lambda k: _libc.msgctl(k, 0, None)),
]
'''

# Says what it got, under the tool only: its failure there carries the outcomes into the gate's verdict.
REPORTS = PROBE + '''

class ModelNew(nn.Module):
    def forward(self, x):
        if UNDER_THE_TOOL:
            raise RuntimeError("sysv under the tool: " + "; ".join(OUTCOMES))
        return torch.clamp(x, min=0.0)
'''

# Fails under the tool only if it got an object; refused, it is an honest candidate and the gate passes.
HOLDS = PROBE + '''

class ModelNew(nn.Module):
    def forward(self, x):
        got = [o for o in OUTCOMES if "refused" not in o]
        if UNDER_THE_TOOL and got:
            raise RuntimeError("sysv under the tool: " + "; ".join(got))
        return torch.clamp(x, min=0.0)
'''


pool = pytest.fixture(scope="module", name="pool")(cpu_split_pool)


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    tool = tmp_path / "sanitizer" / "bin" / "compute-sanitizer"
    tool.parent.mkdir(parents=True)
    tool.write_text(STAND_IN.format(python=sys.executable))
    tool.chmod(0o755)
    monkeypatch.setenv(BINARY_ENV, str(tool))
    return tool


def submit(pool: WorkerPool, candidate: str, job_id: str) -> EvalResult:
    """A SUBMIT of the relu task gated on initcheck (the stand-in finds nothing there on its own)."""
    job = Job(
        job_id=job_id,
        task=make_task(textwrap.dedent(TASK), id="test/sanitizer-sysv", suite="test", level=1, name="relu",
                       origin="test"),
        solution=Solution("inline", {"model_new.py": textwrap.dedent(candidate)}),
        build=BuildResult(BuildStatus.OK, "inline"),
        mode=EvalMode.SUBMIT,
        protocol=GATED.with_changes(sanitizer=("initcheck",)),
        baselines=KnownBaselines(),
    )
    return pool.submit(job).result(timeout=600)


def test_the_candidate_under_the_tool_is_refused_every_system_v_object(pool: WorkerPool, stand_in: Path) -> None:
    result = submit(pool, REPORTS, "sysv-reports")
    assert result.status is EvalStatus.RULE_VIOLATION, result.message + result.log[-3000:]
    assert [v.guard for v in result.violations] == ["sanitizer_initcheck"]
    refused = "sysv under the tool: shmget refused: Operation not permitted; semget refused: Operation not " \
              "permitted; msgget refused: Operation not permitted"
    assert refused in result.violations[0].message, result.violations[0].message


def test_refused_system_v_ipc_leaves_an_honest_candidate_passing_its_gate(pool: WorkerPool, stand_in: Path) -> None:
    result = submit(pool, HOLDS, "sysv-holds")
    assert result.status is EvalStatus.OK, result.message + result.log[-3000:]
    assert [n for n in result.notes if n.startswith("compute-sanitizer initcheck: no errors")], result.notes
    assert result.candidate.runs == 5  # the job's runner timed it as usual: the probe changed nothing there
