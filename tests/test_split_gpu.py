"""The trust split on the H200, through LocalJudge: white-box attacks on the judge's own code, every guard off.

Each candidate is the bundled Swish extension solution with an attack added to ``model_new.py`` by someone
who read the judge: it patches the comparison, the timer, or the harness's state in the process where it
runs, or hunts that process for the reference's answers. With no guard running, only the split's structure
can stop them: the verdict, the reference outputs and the clock live in the trusted process.
"""

from __future__ import annotations

import pytest

from cudagym.judge.interface import EvalMode
from cudagym.judge.local import LocalJudge, probe_gpus
from cudagym.judge.protocol import DEFAULT_PROTOCOL
from cudagym.judge.records import EvalStatus
from cudagym.solution import Solution

pytestmark = pytest.mark.gpu

TASK_ID = "bundled/L1/01_Swish"
NO_GUARDS = DEFAULT_PROTOCOL.with_changes(id="split-attacks", guards=())

FORGE_COMPARISON = '''
import importlib as _il
_c = _il.import_module("cudagym.judge.harness." + "correctness")
_x = _il.import_module("cudagym.judge.harness." + "context")
_real = _c.compare_outputs
def _always(reference, candidate, tolerance, **kw):
    return _real(reference, reference, tolerance, **kw)
setattr(_c, "compare_outputs", _always)
setattr(_x, "compare_outputs", _always)
_forward = ModelNew.forward
ModelNew.forward = lambda self, x: _forward(self, x) * 0.5
'''

FORGE_TIMER = '''
import importlib as _il
_t = _il.import_module("cudagym.judge.harness." + "timing")
_real = _t.CudaEventTimer.measure
def _fast(self, call, cover_us=None, bracket=None):
    m = _real(self, call, cover_us, bracket)
    return _t.Measurement(m.outputs, m.time_us / 20, m.wall_us / 20, m.enqueue_us)
setattr(_t.CudaEventTimer, "measure", _fast)
'''

STEAL_REFERENCE = '''
import gc as _gc
import torch as _torch
_forward = ModelNew.forward
def _steal(self, x):
    for obj in _gc.get_objects():
        if isinstance(obj, _torch.Tensor) and obj.shape == x.shape and obj.is_cuda and obj.data_ptr() != x.data_ptr():
            return obj.clone()
    return _torch.zeros_like(x)
ModelNew.forward = _steal
'''

# Rewrite the harness's state from inside: clear every violation and mark every check passed, as it runs.
REWRITE_STATE = '''
import sys as _sys
_forward = ModelNew.forward
def _rewrite(self, x):
    for frame in list(_sys._current_frames().values()):
        while frame is not None:
            ctx = frame.f_locals.get("ctx")
            if ctx is not None and hasattr(ctx, "violations"):
                ctx.violations.clear()
                ctx.speedup_vs_eager = 100.0
            frame = frame.f_back
    return _forward(self, x) + 1.0
ModelNew.forward = _rewrite
'''


@pytest.fixture(scope="module")
def swish():
    from cudagym.sources.bundled import BundledSource

    source = BundledSource()
    return source.get(TASK_ID), source.solution(TASK_ID)


@pytest.fixture(scope="module")
def judge():
    with LocalJudge(NO_GUARDS, devices=list(probe_gpus("auto").device_ids[:1])) as j:
        yield j


def _with(reference: Solution, attack: str) -> Solution:
    return Solution("extension", {**reference.files, "model_new.py": reference.files["model_new.py"] + "\n" + attack})


def test_the_bundled_solution_passes_judged_by_the_trusted_process(swish, judge) -> None:
    task, reference = swish
    result = judge.evaluate(task, reference, EvalMode.SUBMIT)
    assert result.status is EvalStatus.OK and not result.violations, result.message + result.log[-3000:]
    assert "made by the trusted process" in result.log and "timing claims: median" in result.log
    # the judge's staging and its parts, timed and empty calls: where a staging grew, the note says which part
    assert "in the empty calls (inputs, poison, flush: " in result.log, result.log[-3000:]
    assert result.speedup_vs_eager > 0 and result.candidate.runs > 0
    print(result.message)
    print("\n".join(line for line in result.log.splitlines() if line.startswith("timing claims")))


def test_a_patched_comparison_forges_nothing(swish, judge) -> None:
    task, reference = swish
    result = judge.evaluate(task, _with(reference, FORGE_COMPARISON), EvalMode.SUBMIT)
    assert result.status is EvalStatus.INCORRECT, result.message


def test_a_patched_timer_is_unverifiable(swish, judge) -> None:
    task, reference = swish
    result = judge.evaluate(task, _with(reference, FORGE_TIMER), EvalMode.SUBMIT)
    assert result.status is EvalStatus.RULE_VIOLATION, result.message + result.log[-2000:]
    assert {v.guard for v in result.violations} == {"unverifiable_timing"}
    print(result.message)


def test_the_reference_outputs_are_not_in_the_candidates_process(swish, judge) -> None:
    task, reference = swish
    result = judge.evaluate(task, _with(reference, STEAL_REFERENCE), EvalMode.VERIFY)
    assert result.status is EvalStatus.INCORRECT, result.message


def test_rewriting_the_harness_state_in_the_candidates_process_changes_no_verdict(swish, judge) -> None:
    task, reference = swish
    result = judge.evaluate(task, _with(reference, REWRITE_STATE), EvalMode.SUBMIT)
    assert result.status is EvalStatus.INCORRECT, result.message
