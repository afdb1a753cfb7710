"""Bounded memory on the CPU test path: chunked passes agree with whole-tensor ones, the live set stays bounded,
a task that does not fit gets its own status, and every result records its cost and precision.

The live-set test counts, at the start of every forward (reference, candidate, baselines), how many distinct
input-set and output tensors of the task exist in the process (through ``gc``): the harness promises at most
one input set and its outputs beyond what the reference itself needs.
"""

from __future__ import annotations

import dataclasses
import json
import weakref
from pathlib import Path

import pytest
import torch
import torch.utils._pytree as pytree
from script_module import load_script
from test_harness_cpu import HONEST, LINEAR_TASK, one_thread, run  # noqa: F401 - one_thread is autouse
from torch.utils._python_dispatch import TorchDispatchMode

from cudagym.judge.harness import memory
from cudagym.judge.harness.correctness import Tolerance, compare_outputs, comparison_temporaries_bytes, nonfinite_count
from cudagym.judge.harness.inputs import bitwise_equal
from cudagym.judge.harness.memory import PhaseClock, chunked_equal, flat_chunks, moments, rms_difference
from cudagym.judge.harness.runner import ARENAS_NOTE
from cudagym.judge.interface import EvalMode
from cudagym.judge.job import KnownBaselines
from cudagym.judge.protocol import CUDAGYM_V0
from cudagym.judge.records import EvalStatus
from cudagym.judge.split.remote import SERIES_CALLS
from cudagym.judge.task_check import memory_bound_bytes

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


@pytest.fixture
def tiny_digest_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Five elements per digest piece, so a small tensor's digest is summed over many pieces."""
    from cudagym.judge.harness import inputs

    monkeypatch.setattr(inputs, "DIGEST_CHUNK_ELEMENTS", 5)


@pytest.mark.parametrize("make", [lambda: torch.linspace(-3.0, 3.0, 77).reshape(7, 11),
                                  lambda: torch.linspace(-3.0, 3.0, 77).reshape(11, 7).t(),  # not contiguous
                                  lambda: torch.arange(60, dtype=torch.float64).reshape(3, 4, 5),
                                  lambda: torch.arange(40, dtype=torch.float64)[::3],  # strided, 8-byte elements
                                  lambda: torch.arange(-30, 30, dtype=torch.int8),
                                  lambda: torch.linspace(0, 1, 33, dtype=torch.float16),
                                  lambda: torch.linspace(0, 1, 33, dtype=torch.bfloat16),
                                  lambda: torch.arange(12) % 3 == 0,
                                  lambda: torch.randn(9, dtype=torch.complex64),
                                  lambda: torch.tensor(2.5)])
def test_a_digest_is_the_same_for_the_same_bits_and_changes_with_any_one_element(tiny_digest_chunks, make):
    from cudagym.judge.harness.inputs import bits_digest, tree_digest

    tensor = make()
    assert bits_digest(tensor) == bits_digest(tensor.clone()) == bits_digest(tensor.contiguous())
    flat = tensor.reshape(-1)
    for index in {0, flat.numel() // 2, flat.numel() - 1}:  # first, middle and last piece
        changed = tensor.clone()
        view = changed.view(-1) if changed.is_contiguous() else changed.t().reshape(-1)
        if tensor.dtype == torch.bool:
            view[index] = ~view[index]
        else:
            view[index] = view[index] + 1
        assert not torch.equal(changed, tensor)
        assert bits_digest(changed) != bits_digest(tensor), index
    tree = [tensor, {"n": 3}, (tensor.clone(),)]
    assert tree_digest(tree) == tree_digest([tensor.clone(), {"n": 3}, (tensor,)])
    assert tree_digest(tree) != tree_digest([tensor, {"n": 4}, (tensor,)])


def test_a_digest_tells_swapped_elements_signed_zeros_nan_payloads_dtypes_and_shapes_apart(tiny_digest_chunks):
    from cudagym.judge.harness.inputs import bits_digest

    x = torch.arange(20.0)
    swapped = x.clone()
    swapped[[3, 17]] = swapped[[17, 3]]
    assert bits_digest(swapped) != bits_digest(x)  # the plain sum is kept; the position-weighted one is not
    assert bits_digest(torch.tensor([0.0])) != bits_digest(torch.tensor([-0.0]))
    quiet = torch.tensor([float("nan")])
    other = quiet.view(torch.int32).add(1).view(torch.float32)  # another NaN: equal to nothing, bits differ
    assert bits_digest(quiet) != bits_digest(other) and bits_digest(quiet) == bits_digest(quiet.clone())
    assert bits_digest(torch.zeros(4)) != bits_digest(torch.zeros(4, dtype=torch.int32))  # same bits, dtype
    assert bits_digest(torch.zeros(4)) != bits_digest(torch.zeros(2, 2))


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


def test_chunked_counts_and_sign_scans_match_whole_tensor_ones(tiny_chunks):
    from cudagym.judge.harness.context import signed_float_tensors
    from cudagym.judge.harness.inputs import poison_, poison_count
    from cudagym.judge.harness.memory import any_negative, count_equal

    values = torch.arange(-30.0, 60.0).reshape(9, 10) % 7
    assert count_equal(values, 3.0) == int((values == 3.0).sum()) > 0
    assert count_equal(values.t(), 3.0) == int((values == 3.0).sum())  # a non-contiguous tensor: row runs
    positive = torch.rand(9, 10) + 0.5
    assert not any_negative(positive) and not any_negative(positive.t())
    positive[8, 9] = -1.0  # in the last chunk
    assert any_negative(positive) and any_negative(positive.t())
    assert signed_float_tensors([positive, torch.rand(5, 5), 3, torch.arange(-4, 4)]) == [positive]
    out = torch.randn(13, 11)
    poison_(out[3:7])
    assert poison_count(out) == 4 * 11 and poison_count(out.t()) == 4 * 11


def test_phase_clock_adds_up_repeated_phases():
    clock = PhaseClock()
    for _ in range(2):
        with clock.phase("check"):
            sum(range(10_000))
    assert clock.get("check") > 0.0 and clock.get("timing") == 0.0 and set(clock.seconds) == {"check"}


# ------------------------------------------------------------------------------------- the live set

# What both counting tasks share: the model (it counts on every reference call) and its inputs.
TASK_TAIL = '''
class Model(nn.Module):
    def forward(self, x):
        count("reference")
        return torch.cat([x, x[:, :1]], dim=1) * 2.0


def get_inputs():
    return [torch.randn(*INPUT_SHAPE)]


def get_init_inputs():
    return []
'''

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

''' + TASK_TAIL


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
                                   "stale_memory", "lazy_output"], num_inputs=3, scaled_inputs=(4.0,),
                           atol_scale=0.01, flat_reference_note=True)  # as cudagym-v2, the default
    assert result.status is EvalStatus.OK, result.message
    assert any(c.index >= 500 for c in result.checks)  # the scaled set was checked
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


# the host's: torch's CPU allocator and Python's own
HOST_OOMS = ("RuntimeError('[enforce fail at alloc_cpu.cpp:116] . DefaultCPUAllocator: can\\'t allocate memory: "
             "you tried to allocate 68719476736 bytes')", "MemoryError()")


@pytest.mark.parametrize("where", ["get_inputs", "forward"])
@pytest.mark.parametrize("error", [OOM, *HOST_OOMS])
def test_a_task_that_does_not_fit_is_task_too_large_not_an_infra_error(tmp_path, where, error):
    if where == "get_inputs":
        task = LINEAR_TASK.replace("    return [torch.randn(8, 32)]", f"    raise {error}")
    else:
        task = LINEAR_TASK.replace("        return torch.relu(self.lin(x))", f"        raise {error}")
    result = run(tmp_path, HONEST, task=task)
    assert result.status is EvalStatus.TASK_TOO_LARGE, result.message
    assert "test/cpu_task" in result.message and "does not fit" in result.message
    if error == OOM:
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


# ------------------------------------------------------------------------------------- timed rounds


class Recorder:
    """A round hook that keeps, per timed call, what it was handed: the same objects or not, and their values."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, bool, torch.Tensor, torch.Tensor, int]] = []

    def call(self, index, name, inputs, args, outputs):
        self.calls.append((name, index, args is inputs, args[0].clone(), inputs[0].clone(), id(args[0])))

    def done_with_first(self, index):
        return False

    def end(self, index):
        pass


class ComparesWithEager(Recorder):
    """A round hook done with the candidate's outputs once eager's came back (as the spot check is)."""

    def __init__(self) -> None:
        super().__init__()
        self.eager_seen = False

    def call(self, index, name, inputs, args, outputs):
        super().call(index, name, inputs, args, outputs)
        self.eager_seen = name == "eager" or (self.eager_seen and name != "candidate")

    def done_with_first(self, index):
        return self.eager_seen


@pytest.mark.parametrize("hook_done", [False, True])
def test_the_candidates_outputs_are_poisoned_before_the_next_baseline_once_the_round_is_done_with_them(hook_done):
    # Interleaved rounds held the candidate's outputs through torch.compile's call, one output set over the
    # bound on the H200's largest convolutions; once eager's outputs were compared with them they go first.
    from cudagym.judge.harness.inputs import poison_count
    from cudagym.judge.harness.stats import StoppingRule
    from cudagym.judge.harness.timing import Contender, L2Flusher, TimingLoop, make_timer

    cpu = torch.device("cpu")
    last: dict[str, torch.Tensor] = {}
    poisoned_at_compiled: list[bool] = []

    def candidate(args):
        last["candidate"] = args[0] * 2.0
        return last["candidate"]

    def compiled(args):
        poisoned_at_compiled.append(poison_count(last["candidate"]) == last["candidate"].numel())
        return args[0] * 2.0

    loop = TimingLoop(
        contenders=[Contender("candidate", candidate), Contender("eager", lambda a: a[0] * 2.0, baseline=True),
                    Contender("compiled", compiled, baseline=True)],
        make_inputs=lambda r: [torch.full((4, 3), float(r))], timer=make_timer("cuda_events", cpu),
        flusher=L2Flusher(cpu, 0, True), rule=StoppingRule(3, 3, 0.0, "median"), warmup_runs=1, warmup_s=0.0,
        interleave=True, budget_s=60.0, may_poison=lambda t: True,
        on_round=ComparesWithEager() if hook_done else Recorder())
    loop.run()
    assert len(poisoned_at_compiled) == 4 and poisoned_at_compiled[0]  # a warm-up round compares nothing
    assert poisoned_at_compiled[1:] == [hook_done] * 3, poisoned_at_compiled  # the timed rounds
    assert poison_count(last["candidate"]) == last["candidate"].numel()  # poisoned by the round's end either way


@pytest.mark.parametrize("share", [True, False])
def test_a_timed_round_copies_the_set_only_for_contenders_that_need_a_copy_of_their_own(share):
    from cudagym.judge.harness.stats import StoppingRule
    from cudagym.judge.harness.timing import Contender, L2Flusher, TimingLoop, make_timer

    handed: dict[str, list] = {}

    def forward(name):
        def call(args):
            handed.setdefault(name, []).append(args)
            return args[0] * 2.0
        return call

    arena = [torch.zeros(4, 3)]  # stands in for the runner's input arena: the contender copies into it

    def remote(args, cover_us):
        arena[0].copy_(args[0])
        arena[0].add_(1.0)  # the candidate writes its copy; the round's set must not change
        measured = make_timer("cuda_events", torch.device("cpu")).measure(lambda: forward("candidate")(args))
        return measured

    hook = Recorder()
    loop = TimingLoop(
        contenders=[Contender("candidate", forward("candidate"), measure=remote, seen=lambda: list(arena)),
                    Contender("eager", forward("eager"), baseline=True),
                    Contender("compiled", forward("compiled"), baseline=True)],
        make_inputs=lambda r: [torch.full((4, 3), float(r))], timer=make_timer("cuda_events", torch.device("cpu")),
        flusher=L2Flusher(torch.device("cpu"), 0, True), rule=StoppingRule(3, 3, 0.0, "median"), warmup_runs=1,
        warmup_s=0.0, interleave=True, budget_s=60.0, may_poison=lambda t: True, on_round=hook,
        baselines_share_inputs=share)
    loop.run()
    assert [c[1] for c in hook.calls if c[0] == "candidate"] == [0, 1, 2]
    for name, index, same, seen, inputs, seen_id in hook.calls:
        assert torch.equal(inputs, torch.full((4, 3), float(index)))  # the round's set was never written
        if name == "candidate":  # handed the set itself; what it left is its own copy (the arena), written
            assert seen_id == id(arena[0]) and torch.equal(seen, inputs + 1.0)
        else:  # the baselines ran on the set itself, or on a copy each
            assert same is share and torch.equal(seen, inputs)
    assert all(args[0] is not arena[0] for args in handed["eager"])


REFERENCE_WRITES = LINEAR_TASK.replace("        return torch.relu(self.lin(x))",
                                       "        y = torch.relu(self.lin(x))\n        x.mul_(0.5)\n        return y")


def test_a_reference_that_writes_its_inputs_is_found_once_and_exempts_the_candidate(tmp_path, monkeypatch):
    writer = HONEST.replace("        return torch.relu(", "        out = torch.relu(torch.addmm(self.lin.bias, x, "
                            "self.lin.weight.t()))\n        x.mul_(0.5)\n        return out\n        return (")
    monkeypatch.setattr(torch, "compile", lambda model, *args, **kwargs: model)
    exempt = run(tmp_path, writer, task=REFERENCE_WRITES, guards=["input_mutation"], mode=EvalMode.SUBMIT,
                 baselines=KnownBaselines())
    assert exempt.status is EvalStatus.OK, exempt.message
    assert "the reference itself writes to its inputs; input_mutation not enforced" in exempt.log
    flagged = run(tmp_path, writer, guards=["input_mutation"])  # the plain task's reference leaves x alone
    assert flagged.status is EvalStatus.RULE_VIOLATION
    assert "forward changed its input(s) [0]" in flagged.message


# ------------------------------------------------------------------------------------- the split's live set

# Each forward prints how many input-set and output tensors of the task its process holds in memory of its
# own (a storage exactly its size: views of an arena do not count; the arenas' bytes are in the result).
SPLIT_COUNTING_TASK = '''
import gc
import json
import sys
import time
import warnings

import torch
import torch.nn as nn

INPUT_SHAPE, OUTPUT_SHAPE = (37, 53), (37, 54)
SLOW_S = 0.025


def tensor_or_none(o):
    try:  # a dead weak proxy raises on isinstance; torch.compile's tracing tensors are subclasses
        return o if isinstance(o, torch.Tensor) and type(o) is torch.Tensor else None
    except ReferenceError:
        return None


def own(shape):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = [t for t in map(tensor_or_none, gc.get_objects()) if t is not None and tuple(t.shape) == shape]
        return len({t.untyped_storage().data_ptr() for t in found
                    if t.untyped_storage().nbytes() == t.numel() * t.element_size()})


def compiled():
    """Whether this forward is torch.compile's (its frames are on the stack)."""
    frame = sys._getframe()
    while frame is not None:
        if "torch/_dynamo" in frame.f_code.co_filename.replace("\\\\", "/"):
            return True
        frame = frame.f_back
    return False


def count(who):
    who = "compiled" if who == "reference" and compiled() else who
    print("LIVE " + json.dumps([who, own(INPUT_SHAPE), own(OUTPUT_SHAPE)]), flush=True)
    time.sleep(SLOW_S)  # every call past the CPU path's series threshold: no series (whose sets are alive at once)

''' + TASK_TAIL



@pytest.fixture(scope="module")
def split_pool():
    from cudagym.judge.worker import PoolOptions, WorkerPool

    options = PoolOptions(job_fn="cudagym.judge.split.trusted:run_job_on_cpu", runner=True, startup_timeout_s=180.0)
    with WorkerPool(["0"], options=options) as pool:
        yield pool


def test_the_split_counting_task_is_slower_than_the_series_threshold():
    """Its calls stay one a request: a series (a fast candidate's, claims.series_wanted) holds its sets at once by
    design, and its bound is the arenas' cap, not the one set these tests count (gc.get_objects in a runner whose
    warm-up froze its imports no longer slows each call past it by itself)."""
    from cudagym.judge.harness.claims import CPU_CLAIM_SLACK_US, SERIES_SHARE, series_wanted

    assert not series_wanted([25_000.0], on_gpu=False) and CPU_CLAIM_SLACK_US / SERIES_SHARE < 25_000.0
    assert "SLOW_S = 0.025" in SPLIT_COUNTING_TASK


def judged_in_the_split(pool, task: str, name: str, protocol):
    """SUBMIT ``task``'s model as its own candidate (counting as ``candidate``) through the real split; OK asserted."""
    from cudagym.judge.job import Job
    from cudagym.judge.records import BuildResult, BuildStatus
    from cudagym.solution import Solution
    from cudagym.task import make_task

    candidate = task.replace("class Model(", "class ModelNew(").replace('count("reference")', 'count("candidate")')
    job = Job(name, make_task(task, id=f"test/{name}", suite="test", level=1, name=name, origin="test"),
              Solution("inline", {"model_new.py": candidate}), BuildResult(BuildStatus.OK, "inline"),
              EvalMode.SUBMIT, protocol, KnownBaselines())
    result = pool.submit(job).result(timeout=300)
    assert result.status is EvalStatus.OK, result.message + result.log[-3000:]
    return result


def test_in_the_split_the_trusted_side_holds_one_input_set_and_the_arenas_the_candidates(split_pool):
    from cudagym.judge.split.arena import layout

    protocol = CUDAGYM_V0.with_changes(id="test-split-memory", num_inputs=3, warmup_runs=1, warmup_ms=0.0,
                                       min_runs=5, max_runs=5, target_ci_pct=0.0,
                                       guards=("input_mutation", "result_cache", "hard_coding", "stale_memory"),
                                       scaled_inputs=(4.0,), atol_scale=0.01, flat_reference_note=True)
    result = judged_in_the_split(split_pool, SPLIT_COUNTING_TASK, "split_memory", protocol)
    rows = [json.loads(line[len("LIVE "):]) for line in result.log.splitlines() if line.startswith("LIVE ")]
    trusted = [r for r in rows if r[0] in ("reference", "compiled")]
    runner = [r for r in rows if r[0] == "candidate"]
    compiled = [r for r in rows if r[0] == "compiled"]
    assert len(trusted) > 10 and len(runner) > 10, rows  # checks, guards and timed rounds on both sides
    # torch.compile's calls (its warm-up and each timed round's) run beside no other output set: a round lets
    # the candidate's outputs go once eager's were compared with them
    assert len(compiled) >= 5 and max(r[2] for r in compiled) == 0, compiled
    assert any(c.index >= 500 for c in result.checks)  # the scaled set was checked
    # the trusted process: the reference's own input set and at most the candidate's outputs (its copy)
    assert max(r[1] for r in trusted) == 1 and max(r[2] for r in trusted) <= 1, trusted
    # the runner: the candidate reads its inputs from the arena; it holds at most its own last outputs
    assert max(r[1] for r in runner) == 0 and max(r[2] for r in runner) <= 1, runner
    # ... and the arenas are one input set and one output set, but while an empty series of calls back to back is
    # calibrated before the candidate loads (remote.SERIES_CALLS sets; given back before it loads)
    one_input, one_output = layout([torch.empty(37, 53)])[1], layout([torch.empty(37, 54)])[1]
    assert result.cost.arena_bytes == SERIES_CALLS * (one_input + one_output)
    assert f"{ARENAS_NOTE}: {one_input + one_output} bytes" in result.log, result.log[-3000:]
    assert result.cost.peak_device_memory_bytes == result.cost.runner_peak_device_memory_bytes == 0  # no device


DRAWING = ("def get_inputs():\n    return [torch.randn(*INPUT_SHAPE)]",
           "def get_inputs():\n    print('DRAW ' + json.dumps([torch.initial_seed(), own(INPUT_SHAPE)]), flush=True)\n"
           "    return [torch.randn(*INPUT_SHAPE)]")


@pytest.mark.parametrize("writes", [False, True])
def test_the_priming_run_draws_one_input_set_and_still_finds_a_reference_that_writes_it(split_pool, writes):
    """Whether the reference writes its inputs is found from the set's digest: no second set is ever drawn
    beside it (the H200 sweep: 15 KernelBench L1 tasks one input set over the bound in the load phase)."""
    task = SPLIT_COUNTING_TASK.replace(*DRAWING)
    if writes:  # the last element only: one chunk of many in a digest's pass would change
        task = task.replace('        count("reference")\n', '        count("reference")\n        x[-1, -1] += 1.0\n')
    protocol = CUDAGYM_V0.with_changes(id="test-split-priming", num_inputs=2, warmup_runs=1, warmup_ms=0.0,
                                       min_runs=3, max_runs=3, target_ci_pct=0.0, guards=("input_mutation",))
    result = judged_in_the_split(split_pool, task, f"split_priming_{writes}", protocol)
    draws = [json.loads(line[len("DRAW "):]) for line in result.log.splitlines() if line.startswith("DRAW ")]
    priming = protocol.seed - 1
    assert [seed for seed, _ in draws].count(priming) == 1, draws
    assert max(live for _, live in draws) <= 1, draws  # a set is drawn with at most one other alive
    exempt = "the reference itself writes to its inputs; input_mutation not enforced"
    assert (exempt in result.log) is writes


def test_the_link_keeps_the_runners_largest_reported_peak_and_the_arenas_most_bytes_at_once():
    import os
    import socket
    import threading
    import time

    from cudagym.judge.split.channel import Channel
    from cudagym.judge.split.remote import RunnerLink

    trusted_end, runner_end = socket.socketpair()
    runner = Channel(runner_end)
    reported = [5 << 20, "a lie", 3 << 20, -1, float("nan"), float("inf"), 1e301]  # only plausible byte counts

    def serve() -> None:  # the runner's side of the protocol: attach arenas, answer with what it reports
        for peak in [0, 0, *reported]:
            message, fds = runner.receive(30, max_fds=2)
            for fd in fds:
                os.close(fd)
            kind = "attached" if message["kind"] == "arenas" else "outputs"
            runner.send({"kind": kind, "peak_bytes": peak})

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    link = RunnerLink(Channel(trusted_end), time.monotonic() + 60)
    link.ensure_arenas(1000, 300)
    link.ensure_arenas(4000, 200)  # too small for the inputs: both replaced, the old ones closed first
    link.ensure_arenas(10, 10)  # big enough: kept
    assert link.arena_peak_bytes == 4000 + 200 == sum(a.size for a in link.arenas.values())  # never both pairs
    for _ in reported:
        link.request({"kind": "forward"}, expect="outputs")
    assert link.runner_peak_bytes == 5 << 20
    thread.join(10)
    link.close()


# ------------------------------------------------------------------------------------- the probe's replay

MIB = 1 << 20


def frames(*names: str) -> list[dict]:
    return [{"filename": f"/repo/cudagym/judge/harness/{n}.py", "line": i + 1, "name": n} for i, n in enumerate(names)]


def test_the_probe_replay_finds_both_peaks_and_what_pins_a_partly_used_segment():
    from cudagym.judge.harness.memhistory import replay, report, where

    g = 2048 * MIB
    trace = [
        {"action": "free_completed", "addr": 9000, "size": 4 * MIB},  # allocated before recording began
        {"action": "segment_alloc", "addr": 0, "size": g},
        {"action": "alloc", "addr": 0, "size": g, "frames": frames("make_inputs", "_correctness")},
        {"action": "segment_alloc", "addr": 10 * g, "size": g},
        {"action": "alloc", "addr": 10 * g, "size": 64 * MIB, "frames": frames("flat_chunks", "moments")},
        {"action": "segment_alloc", "addr": 20 * g, "size": g},  # the 64 MiB block pins the second segment
        {"action": "alloc", "addr": 20 * g, "size": g, "frames": frames("run_reference", "verify_seed")},
        {"action": "free_requested", "addr": 0, "size": g},
        {"action": "free_completed", "addr": 0, "size": g},
        {"action": "alloc", "addr": 10 * g + 64 * MIB, "size": 128 * MIB, "frames": frames("compare")},
    ]
    snapshot = {"device_traces": [trace], "segments": [
        {"device": 0, "address": 10 * g, "total_size": g, "blocks": [
            {"address": 10 * g, "size": 64 * MIB, "state": "active_allocated"},
            {"address": 10 * g + 64 * MIB, "size": 128 * MIB, "state": "active_allocated"},
            {"address": 10 * g + 192 * MIB, "size": g - 192 * MIB, "state": "inactive"}]},
        {"device": 0, "address": 20 * g, "total_size": g, "blocks": [
            {"address": 20 * g, "size": g, "state": "active_allocated"}]},
        {"device": 0, "address": 0, "total_size": g, "blocks": [{"address": 0, "size": g, "state": "inactive"}]},
        {"device": 0, "address": 50 * g, "total_size": 2 * MIB, "blocks": [  # held from before recording
            {"address": 50 * g, "size": 1 * MIB, "state": "active_allocated"}]}]}
    peaks = replay(snapshot)
    assert peaks.entries == len(trace)
    # the 1 MiB block from before recording, alive at the end, counts; the 4 MiB one was freed at entry 0
    assert peaks.allocated.index == 6 and peaks.allocated.allocated == 2 * g + 64 * MIB + 1 * MIB
    assert peaks.reserved.index == 6 and peaks.reserved.reserved == 3 * g + 2 * MIB  # the fullest of 5 and 6
    pinned = next(s for s in peaks.reserved.segments if s.addr == 10 * g)
    assert [b.size for b in peaks.reserved.used_in(pinned)] == [64 * MIB]
    text = report(snapshot, {"max_memory_reserved": 3 * g, "max_memory_allocated": 2 * g})
    assert "caching-allocator slack at the peaks 2,048 MiB" in text  # from torch's counters
    assert "64.0 / 2,048.0 MiB" in text and "holds 64.0 MiB: flat_chunks (cudagym/judge/harness/flat_chunks.py:1)" \
        in text
    assert "2,048.0 MiB  make_inputs (cudagym/judge/harness/make_inputs.py:1) < _correctness" in text
    assert "live blocks >= 64 MiB: 3 (4,160 MiB); smaller blocks: 1 MiB" in text
    outermost_first = tuple(reversed([("/repo/benchmarks/memory_probe.py", 9, "<module>"),
                                      ("/repo/cudagym/judge/harness/runner.py", 5, "_timing"),
                                      ("/site-packages/torch/_tensor.py", 2, "clone")]))
    assert where(outermost_first[::-1]) == where(outermost_first) == \
        "clone (torch/_tensor.py:2) < _timing (cudagym/judge/harness/runner.py:5)"


def test_the_probe_runs_an_evaluation_in_one_process_and_in_the_split_on_the_cpu(tmp_path):

    probe = load_script("benchmarks/memory_probe.py", "memory_probe")
    assert probe.main(["--cpu", "--gib", "0.0001", "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["one_process"]["status"] == summary["split"]["status"] == "ok"
    assert summary["split"]["cost"]["arena_bytes"] > 0  # the split really ran: its arenas were made
    assert (tmp_path / "split_runner_output.txt").exists()


def test_the_probe_takes_any_suites_task_and_protocol_and_refuses_unknown_ones_plainly(tmp_path, capsys):
    probe = load_script("benchmarks/memory_probe.py", "memory_probe")
    assert probe.main(["--cpu", "--task", "bundled/L1/01_Swish", "--protocol", "kernelbench", "--mode", "one",
                       "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["task"] == "bundled/L1/01_Swish" and summary["protocol"] == "memory-probe-kernelbench-v0.9"
    assert summary["one_process"]["status"] == "ok"
    assert probe.main(["--cpu", "--task", "L9/nope", "--out", str(tmp_path)]) == 2
    assert probe.main(["--cpu", "--protocol", "fastest", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "memory_probe: cannot tell the suite of task id 'L9/nope'" in err and "expected one of" in err


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.complex64])
def test_the_chunked_passes_leave_float64_and_every_other_output_untouched(tiny_chunks, dtype):
    ref = torch.linspace(-3.0, 5.0, 90).reshape(9, 10).to(dtype)
    out = ref.clone()
    out[4, 4] = out[4, 4] * 1.5 + 1
    keep_ref, keep_out = ref.clone(), out.clone()
    check = compare_outputs(ref, out, Tolerance(1e-4, 1e-4, atol_scale=0.01))
    assert not check.passed and check.mismatch_count == 1 and check.first_mismatch_index == (4, 4)
    assert check.max_abs_error > 0 and check.max_rel_error > 0
    if not dtype.is_complex:
        moments(ref)
        rms_difference(ref, out)
    assert torch.equal(ref, keep_ref) and torch.equal(out, keep_out)  # the in-place steps work on copies


def test_a_runner_grown_beyond_the_reference_and_an_output_set_took_the_judges_memory() -> None:
    gib = 1 << 30
    # the reference needs 3 GiB, an output set is 1 GiB: the runner may add 3 + 1 + the 2 GiB margin
    assert not memory.memory_taken_beyond_bound(6 * gib, 3 * gib, gib)
    assert memory.memory_taken_beyond_bound(6 * gib + 1, 3 * gib, gib)
    assert memory.memory_taken_beyond_bound(100 * gib, 0, 0)  # a runner that filled the device
    assert not memory.memory_taken_beyond_bound(-gib, 3 * gib, gib)  # others shrank (a spare runner ended)


def test_no_other_process_is_counted_off_the_gpu() -> None:
    meter = memory.DeviceMemoryMeter.start(torch.device("cpu"))
    assert meter.others_bytes(0) is None


class _LiveBytes(TorchDispatchMode):
    """The peak of the bytes held by storages that ops create while they are alive (a view keeps its base's)."""

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self.holders: dict[int, list[int]] = {}  # storage address -> [tensors alive on it, its bytes]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        given = {t.untyped_storage().data_ptr() for t in pytree.tree_leaves((args, kwargs))
                 if isinstance(t, torch.Tensor)}
        for t in pytree.tree_leaves(out):
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            address = storage.data_ptr()
            if address not in self.holders:
                if address in given:  # the caller's own tensor, written in place or viewed
                    continue
                self.holders[address] = [0, storage.nbytes()]
                self.live += storage.nbytes()
                self.peak = max(self.peak, self.live)
            self.holders[address][0] += 1
            weakref.finalize(t, self._released, address)
        return out

    def _released(self, address: int) -> None:
        holder = self.holders[address]
        holder[0] -= 1
        if holder[0] == 0:
            self.live -= holder[1]
            del self.holders[address]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.complex64])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
@pytest.mark.parametrize("wrong", [False, True])
def test_the_memory_bound_counts_every_temporary_a_comparison_makes(monkeypatch, dtype, layout, wrong):
    monkeypatch.setattr(memory, "CHUNK_ELEMENTS", 1 << 14)  # pieces of 16K elements, several per tensor
    ref = (torch.randn(300, 200) * 3).to(dtype) if not dtype.is_complex else torch.randn(300, 200, dtype=dtype)
    if layout == "transposed":
        ref = ref.t()
    out = ref.clone()
    if wrong:
        out[5, 7] += 1
    counted = comparison_temporaries_bytes([ref, ref[:10]])
    with _LiveBytes() as seen:
        compare_outputs(ref, out, Tolerance(1e-4, 1e-4, atol_scale=0.01))
    assert 0 < seen.peak <= counted, (seen.peak, counted)
    assert seen.peak >= 0.6 * counted, (seen.peak, counted)  # a count, not a blanket allowance
    assert comparison_temporaries_bytes([]) == 0


def test_the_bound_adds_the_small_buffers_an_evaluation_recorded(tmp_path):
    result = run(tmp_path, HONEST)
    cost = result.cost
    assert result.status is EvalStatus.OK, result.message
    # on the CPU: no flush buffer, the comparison's temporaries of the task's (8, 32) fp32 output
    assert cost.small_buffers_bytes == comparison_temporaries_bytes(torch.empty(8, 32)) > 0
    without = dataclasses.replace(cost, small_buffers_bytes=0)
    assert memory_bound_bytes(cost) == memory_bound_bytes(without) + cost.small_buffers_bytes


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_flat_reference_moments_hold_one_float64_piece_at_a_time(monkeypatch, dtype):
    # session 46 (H100): its float64 piece and that piece's magnitudes were both alive, 2 x 128 MiB cached at a
    # 2 GiB evaluation's peak, where the bound's small buffers count one such piece
    monkeypatch.setattr(memory, "CHUNK_ELEMENTS", 1 << 14)
    ref = (torch.randn(300, 200, dtype=torch.float64) * 3 + 0.5).to(dtype)
    kept = ref.clone()
    with _LiveBytes() as seen:
        found = memory.moments(ref)
    assert 0 < seen.peak <= (1 << 14) * 8 + 1024, seen.peak  # one float64 piece, and the scalars of its passes
    assert torch.equal(ref, kept)  # a float64 reference's pieces are copied, never its own memory made absolute
    wide = ref.double()
    assert found.mean == pytest.approx(float(wide.mean()), rel=1e-12)
    assert found.std == pytest.approx(float(wide.std()), rel=1e-9)
    assert found.peak == float(wide.abs().max())
