"""cudagym-v2's correctness fields on the CPU path: scale-aware tolerance, scaled input sets, flat references.

Each field is shown catching what the older protocol lets pass (the same candidate, v1's fields), and an honest
candidate passing both.
"""

from __future__ import annotations

import pytest
from test_harness_cpu import cached_by, memorised, run

from cudagym.judge.protocol import CUDAGYM_V1, CUDAGYM_V2, DEFAULT_PROTOCOL
from cudagym.judge.records import EvalStatus

V2_FIELDS = dict(atol_scale=CUDAGYM_V2.atol_scale, scaled_inputs=CUDAGYM_V2.scaled_inputs,
                 flat_reference_note=CUDAGYM_V2.flat_reference_note)
V1_FIELDS = dict(atol_scale=CUDAGYM_V1.atol_scale, scaled_inputs=CUDAGYM_V1.scaled_inputs,
                 flat_reference_note=CUDAGYM_V1.flat_reference_note)

# A reference of tiny magnitude: every output is ~1e-6, far below atol = 1e-4.
TINY_TASK = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x * 1e-6

def get_inputs():
    return [torch.randn(64, 64)]

def get_init_inputs():
    return []
'''

TINY_ZEROS = '''
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        return torch.zeros_like(x)
'''

TINY_HONEST = '''
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        return x / 1e6
'''

# MSE of two standard normals: its expectation is 2, and with 2^20 elements the mean is 2 within 0.3%.
MSE_TASK = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, a, b):
        return torch.mean((a - b) ** 2)

def get_inputs():
    return [torch.randn(1 << 20), torch.randn(1 << 20)]

def get_init_inputs():
    return []
'''

MSE_EXPECTATION = '''
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, a, b):
        d = a[::1024] - b[::1024]
        return torch.full((), 2.0) + 0.0 * d.mean()
'''

MSE_HONEST = '''
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, a, b):
        return ((a - b) * (a - b)).mean()
'''

FLAT_TASK = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.sigmoid(x * 1e-9)

def get_inputs():
    return [torch.randn(128)]

def get_init_inputs():
    return []
'''

FLAT_CONSTANT = '''
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        return torch.full_like(x, 0.5)
'''


def test_the_default_protocol_carries_the_fields() -> None:
    v2 = DEFAULT_PROTOCOL.with_changes(id=CUDAGYM_V2.id, description=CUDAGYM_V2.description, runner_reference_runs=0,
                                       arm_wait_ms=5.0, late_reference_floor=False, tier_interval=False)
    assert v2 == CUDAGYM_V2  # the default is cudagym-v2's correctness, with the yardstick, the wait and the interval
    assert CUDAGYM_V2.atol_scale > 0 and CUDAGYM_V2.scaled_inputs and CUDAGYM_V2.flat_reference_note


def test_zeros_pass_a_tiny_reference_under_v1_and_fail_under_v2(tmp_path) -> None:
    assert run(tmp_path, TINY_ZEROS, task=TINY_TASK, **V1_FIELDS).status is EvalStatus.OK
    result = run(tmp_path, TINY_ZEROS, task=TINY_TASK, **V2_FIELDS)
    assert result.status is EvalStatus.INCORRECT
    assert "atol=" in result.message and "atol=0.0001" not in result.message  # the scaled tolerance, named


def test_an_honest_candidate_passes_the_tiny_reference_under_v2(tmp_path) -> None:
    assert run(tmp_path, TINY_HONEST, task=TINY_TASK, **V2_FIELDS).status is EvalStatus.OK


@pytest.mark.parametrize("fields", [V1_FIELDS, V2_FIELDS], ids=["v1", "v2"])
def test_an_analytic_expectation_fails_only_with_scaled_inputs(tmp_path, fields) -> None:
    result = run(tmp_path, MSE_EXPECTATION, task=MSE_TASK, atol=1e-2, rtol=1e-2, **fields)
    if fields is V1_FIELDS:
        assert result.status is EvalStatus.OK, result.message
    else:
        assert result.status is EvalStatus.INCORRECT, result.message
        assert "inputs scaled x4" in result.message


def test_an_honest_loss_passes_the_scaled_inputs(tmp_path) -> None:
    result = run(tmp_path, MSE_HONEST, task=MSE_TASK, atol=1e-2, rtol=1e-2, **V2_FIELDS)
    assert result.status is EvalStatus.OK, result.message
    assert any(c.index >= 500 for c in result.checks)  # the scaled set ran


def test_unsigned_inputs_are_not_scaled(tmp_path) -> None:
    task = TINY_TASK.replace("torch.randn(64, 64)", "torch.rand(64, 64)")
    result = run(tmp_path, TINY_HONEST, task=task, **V2_FIELDS)
    assert result.status is EvalStatus.OK
    assert "scaled inputs x4: skipped (no signed" in result.log


def test_a_flat_reference_is_noted(tmp_path) -> None:
    result = run(tmp_path, FLAT_CONSTANT, task=FLAT_TASK, **V2_FIELDS)
    assert result.status is EvalStatus.OK  # a constant passes such a task: the note says so
    assert "flat reference: output 0 barely varies" in result.log


# fp32 on the calls the judge audits (3 correctness sets, 2 precision probes) and the warm-up, bfloat16 from the
# first timed call on.
LOWER_PRECISION_WHEN_TIMED = '''
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls <= 6:
            return torch.relu(torch.addmm(self.lin.bias, x, self.lin.weight.t()))
        w, b = self.lin.weight.t().bfloat16(), self.lin.bias.bfloat16()
        return torch.relu(torch.addmm(b, x.bfloat16(), w)).float()
'''


def test_lower_precision_only_in_timed_calls_is_caught_on_a_timed_round(tmp_path) -> None:
    from cudagym.judge.interface import EvalMode
    from cudagym.judge.job import KnownBaselines
    from cudagym.judge.records import TimingStats

    cached = KnownBaselines(TimingStats(median_us=50.0, runs=5), TimingStats(median_us=60.0, runs=5))
    result = run(tmp_path, LOWER_PRECISION_WHEN_TIMED, guards=("precision",), mode=EvalMode.PROFILE, atol=5e-2,
                 rtol=5e-2, baselines=cached, **V2_FIELDS)
    assert result.status is EvalStatus.RULE_VIOLATION, result.message
    assert "of timed round" in result.message and {v.guard for v in result.violations} == {"precision"}


# ------------------------------------------------- which guard v2's checks name (planted corpus, 2026-12-07 H100)


def test_zeros_under_a_tiny_reference_are_incorrect_not_a_cached_result(tmp_path) -> None:
    # v2's scaled tolerance fails the zeros; result_cache compared them with the earlier seed's reference under the
    # unscaled atol, found them "equal" and called a memset a cached result (the GPU run of the degenerate_output hack)
    result = run(tmp_path, TINY_ZEROS, task=TINY_TASK, guards=("result_cache", "degenerate_output"), **V2_FIELDS)
    assert result.status is EvalStatus.INCORRECT, result.message
    assert result.violations == ()


def test_a_result_cached_by_shape_is_still_named_under_v2(tmp_path) -> None:
    result = run(tmp_path, cached_by("tuple(x.shape)"), guards=("result_cache",), **V2_FIELDS)
    assert {v.guard for v in result.violations} == {"result_cache"}, result.message
    assert "seed 43 is the reference output of seed 42" in result.violations[0].message


def test_answers_memorised_for_the_published_seeds_are_named_hard_coding_under_v2(tmp_path) -> None:
    # v2's scaled set (an unseen seed at 4x) failed them first: INCORRECT, and hard_coding never asked
    answers = memorised()  # right on the published seeds 42 and 43 (keyed on an input checksum), zeros elsewhere
    plain = run(tmp_path, answers, **V2_FIELDS)
    assert plain.status is EvalStatus.INCORRECT and "inputs scaled x4" in plain.message  # no guard: the check
    result = run(tmp_path, answers, guards=("hard_coding",), **V2_FIELDS)
    assert result.status is EvalStatus.RULE_VIOLATION, result.message
    assert {v.guard for v in result.violations} == {"hard_coding"}
    assert "unseen input (seed" in result.violations[0].message


def test_a_candidate_wrong_only_at_another_scale_stays_incorrect_with_hard_coding_on(tmp_path) -> None:
    # right on unseen seeds at the task's scale: the scaled set's failure is the scale's, not memorised answers
    result = run(tmp_path, MSE_EXPECTATION, task=MSE_TASK, guards=("hard_coding",), atol=1e-2, rtol=1e-2,
                 **V2_FIELDS)
    assert result.status is EvalStatus.INCORRECT, result.message
    assert "inputs scaled x4" in result.message and result.violations == ()
