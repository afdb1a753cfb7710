"""Bounded memory on the CPU test path: chunked passes agree with whole-tensor ones, the live set stays bounded,
a task that does not fit gets its own status, and every result records its cost and precision.

The live-set test counts, at the start of every forward (reference, candidate, baselines), how many distinct
input-set and output tensors of the task exist in the process (through ``gc``): the harness promises at most
one input set and its outputs beyond what the reference itself needs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from test_harness_cpu import HONEST, LINEAR_TASK, one_thread, run  # noqa: F401 - one_thread is autouse

from cudagym.judge.harness import memory
from cudagym.judge.harness.correctness import Tolerance, compare_outputs, nonfinite_count
from cudagym.judge.harness.inputs import bitwise_equal
from cudagym.judge.harness.memory import PhaseClock, chunked_equal, flat_chunks, moments, rms_difference
from cudagym.judge.interface import EvalMode
from cudagym.judge.job import KnownBaselines
from cudagym.judge.protocol import CUDAGYM_V0
from cudagym.judge.records import EvalStatus

TOL = Tolerance(1e-4, 1e-4)


@pytest.fixture
def tiny_chunks(monkeypatch: pytest.MonkeyPatch) -> int:
    """Seven elements per chunk, so small tensors span many chunks."""
    monkeypatch.setattr(memory, "CHUNK_ELEMENTS", 7)
    return 7


# ------------------------------------------------------------------------------------- chunked passes


@pytest.mark.parametrize("make", [lambda: torch.arange(60.0).reshape(5, 12),
                                  lambda: torch.arange(60.0).reshape(12, 5).t(),
                                  lambda: torch.arange(8.0).reshape(1, 8).expand(6, 8),
                                  lambda: torch.tensor(3.0)])
def test_flat_chunks_cover_a_tensor_in_row_major_order_at_their_offsets(tiny_chunks, make):
    tensor = make()
    pieces = list(flat_chunks(tensor))
    assert torch.equal(torch.cat([p for _, (p,) in pieces]), tensor.reshape(-1))
    offsets = [offset for offset, _ in pieces]
    assert offsets == sorted(offsets) and offsets[0] == 0
    assert all(torch.equal(p, tensor.reshape(-1)[o:o + p.numel()]) for o, (p,) in pieces)
    assert list(flat_chunks(torch.empty(0, 3))) == []


@pytest.mark.parametrize("transpose", [False, True])
def test_chunked_comparison_reports_what_a_whole_tensor_comparison_would(monkeypatch, transpose):
    ref = torch.linspace(-2.0, 3.0, 143).reshape(11, 13)
    out = ref.clone()
    out[7, 2] += 0.5  # the first mismatch, far past the first chunk
    out[9, 12] = float("nan")
    out[10, 0] = float("inf")
    if transpose:  # a candidate may return a non-contiguous tensor
        ref, out = ref.t().contiguous().t(), out.t().contiguous().t()
    whole = compare_outputs(ref, out, TOL)
    monkeypatch.setattr(memory, "CHUNK_ELEMENTS", 5)
    chunked = compare_outputs(ref, out, TOL)
    assert chunked == whole
    assert chunked.mismatch_count == 3 and chunked.first_mismatch_index == (7, 2)
    assert chunked.max_abs_error == pytest.approx(0.5, rel=1e-5)
    assert "1 NaN, 1 Inf" in chunked.message and "first at (7, 2)" in chunked.message
    assert nonfinite_count(out) == 2


def test_chunked_equality_and_moments_match_torch(tiny_chunks):
    a = torch.randn(9, 11, generator=torch.Generator().manual_seed(0))
    b = a.clone()
    assert chunked_equal(a, b) and bitwise_equal(a, b)
    b[8, 10] = b[8, 10].item() + 1.0  # in the last chunk
    assert not chunked_equal(a, b) and not bitwise_equal(a, b)
    nan = torch.full((20,), float("nan"))
    assert bitwise_equal(nan, nan.clone())  # NaN equals NaN bit for bit
    found = moments(a)
    assert found.mean == pytest.approx(a.double().mean().item())
    assert found.std == pytest.approx(a.double().std().item())
    assert found.peak == pytest.approx(a.abs().max().item())
    assert rms_difference(a, b) == pytest.approx(((a - b).double().pow(2).mean().sqrt()).item())


def test_phase_clock_adds_up_repeated_phases():
    clock = PhaseClock()
    for _ in range(2):
        with clock.phase("check"):
            sum(range(10_000))
    assert clock.get("check") > 0.0 and clock.get("timing") == 0.0 and set(clock.seconds) == {"check"}


# ------------------------------------------------------------------------------------- the live set

COUNTING_TASK = '''
import gc
import json
import warnings

import torch
import torch.nn as nn

LOG = {log!r}
INPUT_SHAPE, OUTPUT_SHAPE = (37, 53), (37, 54)


def live(shape):
    """Distinct storages of the task's tensors of ``shape`` alive in the process."""
    with warnings.catch_warnings():  # isinstance on torch's deprecated module attributes warns
        warnings.simplefilter("ignore")
        return len({{o.untyped_storage().data_ptr() for o in gc.get_objects()
                    if isinstance(o, torch.Tensor) and tuple(o.shape) == shape}})


def count(who):
    with open(LOG, "a") as fh:
        fh.write(json.dumps([who, live(INPUT_SHAPE), live(OUTPUT_SHAPE)]) + "\\n")


class Model(nn.Module):
    def forward(self, x):
        count("reference")
        return torch.cat([x, x[:, :1]], dim=1) * 2.0


def get_inputs():
    return [torch.randn(*INPUT_SHAPE)]


def get_init_inputs():
    return []
'''

def counted(tmp_path: Path, **settings: object) -> tuple[list[list], object]:
    log = tmp_path / "live.jsonl"
    task = COUNTING_TASK.format(log=str(log))
    candidate = task.replace("class Model(", "class ModelNew(").replace('count("reference")', 'count("candidate")')
    result = run(tmp_path, candidate, task=task, **settings)
    return [json.loads(line) for line in log.read_text().splitlines()], result


@pytest.mark.parametrize("mode", [EvalMode.SUBMIT, EvalMode.PROFILE])  # both check correctness first
def test_at_most_one_input_set_and_its_outputs_beyond_the_references_own(tmp_path, monkeypatch, mode):
    monkeypatch.setattr(torch, "compile", lambda model, *args, **kwargs: model)  # eager stands in for it
    cached = KnownBaselines(eager=memory_free_stats(), compiled=memory_free_stats())
    rows, result = counted(tmp_path, mode=mode, baselines=cached if mode is EvalMode.PROFILE else KnownBaselines(),
                           guards=["input_mutation", "result_cache", "hard_coding", "degenerate_output",
                                   "stale_memory", "lazy_output"], num_inputs=3)
    assert result.status is EvalStatus.OK, result.message
    who = {r[0] for r in rows}
    assert who == {"reference", "candidate"}
    # when any forward starts: its own input set and one more; at most one other call's outputs
    assert max(r[1] for r in rows) == 2, rows
    assert max(r[2] for r in rows) <= 1, rows
    assert len(rows) > 20  # the timing rounds were counted too


def memory_free_stats():
    from cudagym.judge.records import TimingStats

    return TimingStats(median_us=100.0, mean_us=100.0, runs=30)


# ------------------------------------------------------------------------------------- too large

OOM = "torch.cuda.OutOfMemoryError('CUDA out of memory. Tried to allocate 64.00 GiB')"


@pytest.mark.parametrize("where", ["get_inputs", "forward"])
def test_a_task_that_does_not_fit_is_task_too_large_not_an_infra_error(tmp_path, where):
    if where == "get_inputs":
        task = LINEAR_TASK.replace("    return [torch.randn(8, 32)]", f"    raise {OOM}")
    else:
        task = LINEAR_TASK.replace("        return torch.relu(self.lin(x))", f"        raise {OOM}")
    result = run(tmp_path, HONEST, task=task)
    assert result.status is EvalStatus.TASK_TOO_LARGE, result.message
    assert "test/cpu_task" in result.message and "does not fit" in result.message
    assert "Tried to allocate 64.00 GiB" in result.message


def test_a_candidate_that_runs_out_of_memory_is_its_own_runtime_error(tmp_path):
    greedy = HONEST.replace("        return torch.relu(", f"        raise {OOM}\n        return torch.relu(")
    result = run(tmp_path, greedy)
    assert result.status is EvalStatus.RUNTIME_ERROR and "OutOfMemoryError" in result.message
    assert "(device memory: peak 0.00 GiB of 0.00 GiB; the reference alone peaked at 0.00 GiB)" in result.message


# ------------------------------------------------------------------------------------- cost and precision


def test_every_result_records_its_phases_peak_memory_and_precision(tmp_path, monkeypatch):
    verified = run(tmp_path, HONEST)
    assert verified.cost.load_s > 0 and verified.cost.check_s > 0
    assert verified.cost.timing_s == verified.cost.profile_s == verified.cost.compile_s == 0.0
    assert verified.cost.peak_device_memory_bytes == verified.cost.reference_peak_bytes == 0  # no device to meter
    assert verified.cost.input_set_bytes == verified.cost.output_set_bytes == 8 * 32 * 4
    assert not verified.precision.matmul_allow_tf32 and not verified.precision.cudnn_allow_tf32
    monkeypatch.setattr(torch, "compile", lambda model, *args, **kwargs: model)
    submitted = run(tmp_path, HONEST, mode=EvalMode.SUBMIT, baselines=KnownBaselines(),
                    baseline_precision="torch_default")
    assert submitted.status is EvalStatus.OK, submitted.message
    cost = submitted.cost
    assert cost.timing_s > 0 and cost.profile_s > 0 and 0 < cost.compile_s <= cost.timing_s
    assert submitted.precision.cudnn_allow_tf32 and not submitted.precision.matmul_allow_tf32
    assert submitted.precision.float32_matmul_precision == "highest"
    assert submitted.precision == CUDAGYM_V0.with_changes(baseline_precision="torch_default").precision
    assert "torch.backends.cudnn.allow_tf32=True" in submitted.log



def test_a_task_too_large_is_not_the_agents_fault_and_its_observation_says_so():
    from cudagym.judge.records import EvalResult, Precision
    from cudagym.observation import render_eval
    from cudagym.reward import is_evaluated, score

    result = EvalResult(EvalStatus.TASK_TOO_LARGE, "the task does not fit in this GPU's memory", protocol_id="p",
                        precision=Precision(False, True, "highest"))
    assert not is_evaluated(result) and score(result).reward == 0.0
    text = render_eval(result, "verify")
    assert text.startswith("Verify: NOT RUN: the task does not fit in this GPU's memory (not your solution's fault)")
    assert "TF32 off for matmuls, on for cuDNN convolutions" in text
