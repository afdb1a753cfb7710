"""The timed rounds' input seeds: each one secret and drawn on its own, the warm-ups' too.

A set's values give its seed away to a search of the seed space: on the GPU the inputs come from Philox, a few
instructions a seed, so 2**30 seeds are about a second of an H200. When the rounds drew from a secret base plus
their round number, the first warm-up's set gave away every later round's, and a forward could compute the timed
rounds' answers during the untimed warm-up and return them at once, correct, with every clock timing it honestly.
The search itself needs a GPU (a CPU generator's seeding takes microseconds: hours for 2**30); these tests read the
seeds the harness draws, in-process on the CPU path, through a spy on the context's input maker.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from cudagym.judge.harness.context import EvalContext
from cudagym.judge.harness.runner import TIMING_SEED_OFFSET, RoundSeeds, evaluate
from cudagym.judge.interface import EvalMode
from cudagym.judge.job import Job, KnownBaselines
from cudagym.judge.protocol import CUDAGYM_V0
from cudagym.judge.records import BuildResult, BuildStatus, EvalStatus
from cudagym.solution import Solution
from cudagym.task import make_task

TASK = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
'''

CANDIDATE = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x.clamp_min(0)
'''


def test_each_round_draws_a_secret_seed_of_its_own() -> None:
    seeds = RoundSeeds()
    drawn = [seeds(r) for r in range(-3, 40)]
    assert all(TIMING_SEED_OFFSET <= s < TIMING_SEED_OFFSET + 2**30 for s in drawn)
    assert [seeds(r) for r in range(-3, 40)] == drawn  # a round asked again (the baselines' turn) gets the same set
    # no round's seed follows from another's: with 43 independent draws from 2**30, no two are neighbours
    assert not any(b - a == 1 for a, b in zip(sorted(drawn), sorted(drawn)[1:], strict=False))
    assert len(set(drawn)) == len(drawn)


@pytest.mark.parametrize("mode", [EvalMode.PROFILE, EvalMode.SUBMIT])
def test_the_timed_and_warm_up_rounds_of_a_job_share_no_seed_pattern(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      mode: EvalMode) -> None:
    seen: list[int] = []
    real = EvalContext.make_inputs

    def spy(self: EvalContext, seed: int, on_device: bool = True) -> list[Any]:
        seen.append(seed)
        return real(self, seed, on_device)

    monkeypatch.setattr(EvalContext, "make_inputs", spy)
    work = tmp_path / "work"
    work.mkdir()
    code = textwrap.dedent(CANDIDATE)
    (work / "model_new.py").write_text(code)
    job = Job(
        job_id="seeds",
        task=make_task(textwrap.dedent(TASK), id="test/seeds", suite="test", level=1, name="seeds", origin="test"),
        solution=Solution("inline", {"model_new.py": code}),
        build=BuildResult(BuildStatus.OK, "inline"),
        mode=mode,
        protocol=CUDAGYM_V0.with_changes(id="test-seeds", guards=(), num_inputs=2, warmup_runs=3, warmup_ms=0.0,
                                         min_runs=12, max_runs=12, target_ci_pct=0.0),
        baselines=KnownBaselines(),
        workdir=str(work),
    )
    result = evaluate(job, device="cpu")
    assert result.status is EvalStatus.OK, result.message
    timed = sorted({s for s in seen if s >= TIMING_SEED_OFFSET})
    assert len(timed) >= 15, seen  # 3 warm-ups and 12 timed rounds at least (SUBMIT times the baselines too)
    # a base plus the round made these neighbours: one set's seed then named every other round's
    assert not any(b - a == 1 for a, b in zip(timed, timed[1:], strict=False)), timed
