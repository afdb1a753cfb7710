"""The precision guard's float64 probes on an input set of their own, through the real worker pool on the CPU path.

The probes ran on the first correctness input again (and that input with its signs flipped, from the same seed). A
candidate that keeps its precise answer to the first input it ever sees, and computes every other input in fp16,
gave the probes that answer; in VERIFY mode no timed round follows to look at anything else, so the fp16 passed.
The probes now draw an input set from an unpublished seed, never a correctness seed, and flip its signs from it.
"""

from __future__ import annotations

import textwrap

import pytest
from split_pools import cpu_split_pool

from cudagym.judge.interface import EvalMode
from cudagym.judge.job import Job, KnownBaselines
from cudagym.judge.protocol import CUDAGYM_V0
from cudagym.judge.records import BuildResult, BuildStatus, EvalResult, EvalStatus
from cudagym.judge.worker import WorkerPool
from cudagym.solution import Solution
from cudagym.task import make_task

pool = pytest.fixture(scope="module", name="pool")(cpu_split_pool)

# KernelBench's matmuls draw all-positive inputs: fp16 operands (fp32 accumulation) pass atol=rtol=1e-4 there and
# stay under the magnitude rule's limit; the rounding signature is what tells them from fp32.
MATMUL = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return a @ b


def get_inputs():
    return [torch.rand(64, 1024), torch.rand(1024, 64)]


def get_init_inputs():
    return []
'''

FP16 = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        return a.half().float() @ b.half().float()
'''

# EXPLOIT: the first input set a candidate sees is correctness input 0, which the probes drew again. Its fp32
# answer is kept; a later set equal to it gets that answer, one with its absolute values (the probe's sign flip)
# gets fp32, every other set fp16.
FP16_BUT_THE_FIRST_INPUT = '''
import torch
import torch.nn as nn

_first = []


class ModelNew(nn.Module):
    def forward(self, a, b):
        if not _first:
            _first.append((a.clone(), b.clone(), a @ b))
        seen_a, seen_b, answer = _first[0]
        if torch.equal(a, seen_a) and torch.equal(b, seen_b):
            return answer.clone()
        if torch.equal(a.abs(), seen_a.abs()) and torch.equal(b.abs(), seen_b.abs()):
            return a @ b
        return a.half().float() @ b.half().float()
'''

HONEST = FP16.replace("a.half().float() @ b.half().float()", "a @ b")


def judge(pool: WorkerPool, code: str, *, guards: tuple[str, ...] = ("precision",),
          job_id: str = "probe") -> EvalResult:
    """One VERIFY job of the matmul task through the pool: two correctness inputs, no timed round."""
    job = Job(
        job_id=job_id,
        task=make_task(textwrap.dedent(MATMUL), id=f"test/probe_{job_id}", suite="test", level=1, name="probe",
                       origin="test"),
        solution=Solution("inline", {"model_new.py": textwrap.dedent(code)}),
        build=BuildResult(BuildStatus.OK, "inline"),
        mode=EvalMode.VERIFY,
        protocol=CUDAGYM_V0.with_changes(id="test-probe-seed", guards=guards, num_inputs=2, warmup_runs=1,
                                         warmup_ms=0.0, min_runs=3, max_runs=3, target_ci_pct=0.0),
        baselines=KnownBaselines(),
    )
    return pool.submit(job).result(timeout=300)


def detail(result: EvalResult) -> str:
    """The verdict and its log, for an assertion's message."""
    return f"{result.status.value}: {result.message}\n{result.log[-3000:]}"


def test_fp16_passes_the_tolerance_and_the_probe_flags_it(pool: WorkerPool) -> None:
    """The control: the probe itself catches plain fp16 on this path, which the tolerance alone lets through."""
    unguarded = judge(pool, FP16, guards=(), job_id="fp16-unguarded")
    assert unguarded.status is EvalStatus.OK, detail(unguarded)
    flagged = judge(pool, FP16, job_id="fp16")
    assert flagged.status is EvalStatus.RULE_VIOLATION, detail(flagged)
    assert [v.guard for v in flagged.violations] == ["precision"], detail(flagged)
    assert "on inputs as drawn" in flagged.message and "rounding" in flagged.message, detail(flagged)


def test_fp16_that_keeps_the_first_inputs_precise_answer_is_flagged_in_verify_mode(pool: WorkerPool) -> None:
    unguarded = judge(pool, FP16_BUT_THE_FIRST_INPUT, guards=(), job_id="cached-unguarded")
    assert unguarded.status is EvalStatus.OK, detail(unguarded)  # every correctness input within the tolerance
    flagged = judge(pool, FP16_BUT_THE_FIRST_INPUT, job_id="cached")
    assert flagged.status is EvalStatus.RULE_VIOLATION, detail(flagged)
    assert [v.guard for v in flagged.violations] == ["precision"], detail(flagged)
    assert "on inputs as drawn" in flagged.message and "rounding" in flagged.message, detail(flagged)


def test_fp32_passes_the_probes(pool: WorkerPool) -> None:
    result = judge(pool, HONEST, job_id="honest")
    assert result.status is EvalStatus.OK, detail(result)
    assert not result.violations, detail(result)
