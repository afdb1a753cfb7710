"""Attacks on the chained series (``harness.runner._series_check``) through the real worker and sandboxed runner.

The series' reading is the median per-call interval on the trusted clock less what an empty call of the judge's own
runner held beyond its own time. Both halves are attacked here, every guard off (as in test_series_robustness.py):
what a white-box candidate's runner can leave out of that empty call's cost, and how it can learn a later call's
input set before that set is placed.
"""

from __future__ import annotations

import textwrap

import pytest
from split_pools import cpu_split_pool
from test_series_claims import FORGED_SHORT
from test_series_robustness import RUNNER, judge, series_notes, why

from cudagym.judge.records import EvalStatus
from cudagym.judge.worker import WorkerPool

pool = pytest.fixture(scope="module", name="pool")(cpu_split_pool)

# --------------------------------------------------------------------------------- the delivery copy

# A memory-bound task: its output (8 MiB) costs about as much to copy as to compute.
RELU_TASK = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(2048, 1024)]

def get_init_inputs():
    return []
'''

# Honest: computes into a buffer of its own (no allocation per call); the runner copies it into the output arena.
RELU_HONEST = '''
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        if getattr(self, "buf", None) is None:
            self.buf = torch.empty_like(x)
        torch.clamp_min(x, 0.0, out=self.buf)
        return self.buf
'''

# EXPLOIT: the same work, written straight into the output arena's slot of the call (found on the runner's stack) and
# that slot returned, so the runner's copy of the outputs is a copy onto itself (no work); claims forged to 1 us. The
# judge subtracts an empty call's cost beyond its own time, which holds the judge's runner's copy of its outputs: the
# reading then falls short of the work by that copy, and the forged claims are floored only at what is left.
RELU_WRITES_THE_ARENA = FORGED_SHORT.split("import time")[0] + textwrap.dedent(RUNNER) + '''
import torch
import torch.nn as nn

def _slot():
    from cudagym.judge.split.arena import Slot, views
    frame = _sys._getframe(2)
    while frame is not None:
        name, seen = frame.f_code.co_name, frame.f_locals
        if name == "_series" and "slots" in seen:
            outputs, server = seen["slots"]["outputs"], seen["self"]
        elif name == "_timed_call" and "request" in seen:
            outputs, server = seen["request"]["outputs"], seen["self"]
        else:
            frame = frame.f_back
            continue
        return views(server.arenas["outputs"].tensor, [Slot.from_json(s) for s in outputs])[0]
    return None

class ModelNew(nn.Module):
    def forward(self, x):
        out = _slot()
        if out is None:
            out = torch.empty_like(x)
        torch.clamp_min(x, 0.0, out=out)
        return out
'''


@pytest.mark.xfail(strict=True, reason="the empty call's cost that a series' reading (and a GPU call's bracket) is "
                   "reduced by holds the runner's copy of its outputs, which a white-box runner can skip by writing "
                   "them in place; counting the copy instead would charge it to every honest candidate (a design "
                   "decision: see the report)")
def test_outputs_written_into_the_arena_do_not_shorten_the_series_reading(pool: WorkerPool) -> None:
    honest = judge(pool, RELU_HONEST, "relu_honest", task=RELU_TASK)
    forged = judge(pool, RELU_WRITES_THE_ARENA, "relu_in_arena", task=RELU_TASK)
    assert honest.status is EvalStatus.OK, why(honest)
    assert forged.status is EvalStatus.OK, why(forged)
    assert series_notes(forged), why(forged)
    # the same work a call: the forger may count less than the honest candidate only by the CPU path's noise
    assert forged.candidate.median_us >= 0.75 * honest.candidate.median_us, (series_notes(forged),
                                                                           series_notes(honest))


# --------------------------------------------------------------------------------- the later sets' seeds

def test_a_series_sets_seeds_are_drawn_each_on_its_own() -> None:
    # The chain places call k + 1's set only after call k is done, but a set's values give away its seed to a search of
    # the 2**30 seeds (on a GPU: Philox, seconds), and the sets were drawn from base + index: the loaded calibration
    # (its time counts for nothing) is handed series 0's first set, so a runner that searched it there knew all 96
    # sets of the three series before any was placed, and answered each call from memory.
    from cudagym.judge.harness.runner import TIMING_SEED_OFFSET, series_seeds

    for _ in range(3):
        seeds = series_seeds(32)
        assert len(seeds) == 32 and all(TIMING_SEED_OFFSET <= s < TIMING_SEED_OFFSET + 2**30 for s in seeds)
        steps = {b - a for a, b in zip(seeds, seeds[1:], strict=False)}
        assert len(steps) > 1, seeds  # no set's seed follows from another's (32 draws from 2**30: never all equal)
