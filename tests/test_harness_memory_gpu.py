"""Bounded device memory on a real GPU: a 2 GiB task's peak stays within the bound, one that cannot fit is
TASK_TOO_LARGE (and the process still judges the next job), and every result carries its peak and phases.

Run on the GPU host (one GPU is enough)::

    pytest -m gpu tests/test_harness_memory_gpu.py -v

The reference is judged as its own candidate (``ModelNew = Model``, the raw format's no-op kernel: what
``cudagym baselines check`` runs), in this process, in PROFILE mode without cached baselines, so the timing loop
runs all three contenders.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from gpu_jobs import judge, stage_build

from cudagym.judge.baselines import reference_solution
from cudagym.judge.interface import EvalMode
from cudagym.judge.job import Job, KnownBaselines
from cudagym.judge.protocol import DEFAULT_PROTOCOL, KERNELBENCH
from cudagym.judge.records import EvalResult, EvalStatus
from cudagym.task import make_task

pytestmark = pytest.mark.gpu

GIB = 1 << 30
QUICK = dict(guards=(), warmup_runs=2, warmup_ms=0.0, min_runs=5, max_runs=10, target_ci_pct=0.0)

# RMS normalisation over dim 1 of a 2 GiB input: what the reference needs is its input, its output and one
# intermediate (x * x) of that size, 6 GiB; the bound allows one more input set and its outputs, 4 GiB.
RMSNORM_2GIB = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x / torch.sqrt((x * x).mean(dim=1, keepdim=True) + 1e-5)


def get_inputs():
    return [torch.randn(4096, 131072)]


def get_init_inputs():
    return []
'''

TOO_LARGE = RMSNORM_2GIB.replace("torch.randn(4096, 131072)", "torch.empty(64, 1 << 30)")  # 256 GiB


def run(tmp_path: Path, source: str, name: str, protocol=DEFAULT_PROTOCOL, monkeypatch=None) -> EvalResult:
    task = make_task(source, id=f"test/{name}", suite="test", level=1, name=name, origin="test")
    solution = reference_solution(task)
    checking = protocol.with_changes(**QUICK)
    built = stage_build()(task, solution, checking)
    assert built.ok, built.message
    from cudagym.judge.sandbox import prepare_workdir

    workdir = prepare_workdir(tmp_path / name, solution)
    job = Job(f"gpu-{task.short_hash}", task, solution, built, EvalMode.PROFILE, checking, KnownBaselines(),
              str(workdir))
    return judge(job, monkeypatch)


def test_a_2_gib_task_stays_within_the_bound(tmp_path, monkeypatch):
    result = run(tmp_path, RMSNORM_2GIB, "rmsnorm_2gib", monkeypatch=monkeypatch)
    assert result.status is EvalStatus.OK, result.message
    assert result.eager.measured and result.compiled.measured and result.candidate.measured
    peak = result.cost.peak_device_memory_bytes
    print(f"peak {peak / GIB:.2f} GiB; phases load {result.cost.load_s:.2f} s, check {result.cost.check_s:.2f} s, "
          f"timing {result.cost.timing_s:.2f} s (compile {result.cost.compile_s:.2f} s), "
          f"profile {result.cost.profile_s:.2f} s")
    # reference 6 GiB + one input set and its output 4 GiB, + 1.5 GiB for the L2 flush buffer, the chunked
    # comparisons' temporaries and the allocator's rounding
    assert 6 * GIB < peak <= 11.5 * GIB
    cost = result.cost
    assert cost.input_set_bytes == cost.output_set_bytes == 2 * GIB
    assert cost.reference_peak_bytes >= 4 * GIB  # its input, and its output or its intermediate
    assert peak <= cost.reference_peak_bytes + cost.input_set_bytes + cost.output_set_bytes + GIB
    assert cost.device_memory_total_bytes > peak


def test_a_task_that_cannot_fit_is_task_too_large_and_the_process_judges_the_next(tmp_path, monkeypatch):
    result = run(tmp_path, TOO_LARGE, "too_large", monkeypatch=monkeypatch)
    assert result.status is EvalStatus.TASK_TOO_LARGE, result.message
    assert "test/too_large" in result.message and "GiB" in result.message
    small = RMSNORM_2GIB.replace("torch.randn(4096, 131072)", "torch.randn(64, 1024)")
    after = run(tmp_path, small, "small_after", protocol=KERNELBENCH, monkeypatch=monkeypatch)
    assert after.status is EvalStatus.OK, after.message
    assert 0 < after.cost.peak_device_memory_bytes < GIB
    assert after.precision.cudnn_allow_tf32 and not after.precision.matmul_allow_tf32
