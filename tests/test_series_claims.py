"""Series of calls back to back: claims too short for one call's clock, judged through the real worker and runner.

On one call the trusted clock is only as fine as its noise (1 ms on the CPU path, 10 us on the GPU), so a runner
whose timer is patched to claim 1 us keeps that claim on any forward shorter than the noise. The judge then runs
series of the candidate's calls back to back, each on its own input set, and floors every timed call at what
the clock showed per call in them. These attacks run in the real sandboxed runner on the CPU path, every guard
off: only the split's timing rules stand between them and the reward.
"""

from __future__ import annotations

import re
import textwrap

import pytest
from split_pools import cpu_split_pool
from test_split import TASK

from cudagym.judge.harness.claims import SERIES_NOTE
from cudagym.judge.interface import EvalMode
from cudagym.judge.job import Job, KnownBaselines
from cudagym.judge.protocol import CUDAGYM_V0
from cudagym.judge.records import BuildResult, BuildStatus, EvalResult, EvalStatus
from cudagym.judge.worker import WorkerPool
from cudagym.solution import Solution
from cudagym.task import make_task

# work of 400 us a call: below the CPU path's one-call allowance (25% of the clock + 1 ms)
HONEST_SLOW = '''
import time
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        time.sleep(0.0004)
        return torch.relu(torch.addmm(self.lin.bias, x, self.lin.weight.t()))
'''

# The same work, every claim forged to 1 us (the runner's timer patched, as a white-box attacker would).
FORGED_SHORT = '''
import importlib

timing = importlib.import_module("cudagym.judge.harness." + "timing")
real = timing.HostTimer.measure

def fast(self, call, cover_us=None):
    m = real(self, call, cover_us)
    return timing.Measurement(m.outputs, 1.0, 1.0, 1.0)

setattr(timing.HostTimer, "measure", fast)
''' + HONEST_SLOW

# Honest claims, and zeros in place of the work whenever the runner is serving a series (found on the stack). Its
# claims are left honest so that only the series' comparison can catch it (a forged claim may also be
# unverifiable_timing on a busy host, which takes precedence).
SKIPS_IN_SERIES = HONEST_SLOW.replace('''        time.sleep(0.0004)
''', '''        import sys
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_name == "_series":
                return torch.zeros(x.shape[0], self.lin.out_features)
            frame = frame.f_back
        time.sleep(0.0004)
''')

pool = pytest.fixture(scope="module", name="pool")(cpu_split_pool)


def judge(pool: WorkerPool, candidate: str, job_id: str, mode: EvalMode = EvalMode.PROFILE) -> EvalResult:
    """One timed job of the linear+relu task with ``candidate``, every guard off, through the pool."""
    job = Job(
        job_id=job_id,
        task=make_task(textwrap.dedent(TASK), id=f"test/series_{job_id}", suite="test", level=1, name="series",
                       origin="test"),
        solution=Solution("inline", {"model_new.py": textwrap.dedent(candidate)}),
        build=BuildResult(BuildStatus.OK, "inline"),
        mode=mode,
        protocol=CUDAGYM_V0.with_changes(id="test-series", guards=(), num_inputs=2, warmup_runs=1, warmup_ms=0.0,
                                         min_runs=9, max_runs=9, target_ci_pct=0.0, runner_reference_runs=0),
        baselines=KnownBaselines(),
    )
    return pool.submit(job).result(timeout=300)


def _series_note(result: EvalResult) -> str:
    found = [n for n in result.notes if n.startswith(SERIES_NOTE)]
    assert len(found) == 1, result.log[-3000:]
    return found[0]


def _per_call(note: str) -> float:
    return float(re.search(r"showed ([0-9.]+) us per call", note).group(1))


def test_a_claim_forged_below_one_calls_allowance_counts_what_the_series_showed(pool: WorkerPool) -> None:
    # the honest control is timed before and after the forged run and the lower median kept: a busy 2-core host
    # only ever adds to a CPU-path time (one control timed once before read 657 us +-4.7% beside the suite, against
    # 576 us on a quiet host), so the control beside the forged run is the faster of the two
    before = judge(pool, HONEST_SLOW, "honest")
    forged = judge(pool, FORGED_SHORT, "forged")
    after = judge(pool, HONEST_SLOW, "honest_after")
    for honest in (before, after):
        assert honest.status is EvalStatus.OK, honest.message + honest.log[-3000:]
    assert forged.status is EvalStatus.OK, forged.message + forged.log[-3000:]
    honest = min(before, after, key=lambda r: r.candidate.median_us)
    note = _series_note(forged)
    assert "3 series of 32" in note and "each counts at least" in note, note
    # the sleep alone is 400 us a call: the series showed it, and every forged 1 us claim now counts at least that
    assert _per_call(note) >= 400.0, note
    assert forged.candidate.median_us >= 400.0, forged.log[-3000:]
    assert forged.candidate.median_us >= 0.75 * honest.candidate.median_us, (forged.candidate, honest.candidate)


def test_an_honest_claim_is_confirmed_by_the_series(pool: WorkerPool) -> None:
    honest = judge(pool, HONEST_SLOW, "honest_alone")
    assert honest.status is EvalStatus.OK, honest.message + honest.log[-3000:]
    note = _series_note(honest)
    claimed = float(re.search(r"against the timed calls' median ([0-9.]+) us", note).group(1))
    assert claimed >= 400.0, note  # its own claims: the sleep is in them
    # the series reads what the claims said, to the CPU path's noise (a busy 2-core host moves a sleep's overshoot;
    # on a quiet one the floor did not fire: 602 us read against 576 us claimed, 175 us allowed)
    assert 400.0 <= _per_call(note) <= 1.5 * claimed, note
    assert honest.candidate.median_us <= 1.5 * claimed


@pytest.mark.parametrize("mode", [EvalMode.PROFILE, EvalMode.SUBMIT])
def test_a_forward_that_skips_its_work_in_a_series_is_incorrect(pool: WorkerPool, mode: EvalMode) -> None:
    result = judge(pool, SKIPS_IN_SERIES, f"skips_{mode.value}", mode=mode)
    assert result.status is EvalStatus.INCORRECT, result.message + result.log[-3000:]
    assert "back to back" in result.message, result.message


# Reads the later calls' input sets ahead (the runner's series loop holds every call's arguments) and answers them
# all at the first call, for one sleep instead of one a call, every claim forged to 1 us: the series showed ~13 us
# a call before its calls were chained (white-box 34's CPU twin). Chained, a later call's set is not in the arena
# before the call ahead of it is done, so what it read ahead was not its inputs.
READS_AHEAD = FORGED_SHORT.replace('''        time.sleep(0.0004)
''', '''        import sys
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_name != "_series":
            frame = frame.f_back
        if frame is not None:
            calls = frame.f_locals["calls"]
            if getattr(self, "series", None) is not calls:  # a new series: answer all of it now
                self.series, self.at = calls, 0
                time.sleep(0.0004)
                self.ahead = [torch.relu(torch.addmm(self.lin.bias, a[0], self.lin.weight.t())) for a, _ in calls]
            self.at += 1
            return self.ahead[self.at - 1].clone()
        time.sleep(0.0004)
''')


@pytest.mark.parametrize("mode", [EvalMode.PROFILE, EvalMode.SUBMIT])
def test_a_forward_that_reads_the_later_sets_ahead_is_incorrect(pool: WorkerPool, mode: EvalMode) -> None:
    result = judge(pool, READS_AHEAD, f"ahead_{mode.value}", mode=mode)
    assert result.status is EvalStatus.INCORRECT, (result.status, result.message, result.log[-3000:])
    assert "back to back" in result.message, result.message
