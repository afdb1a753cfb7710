"""The harness end to end on the CPU test path: statuses, messages, and each run-time guard on a planted hack.

The candidates here are plain Python (a build without an artifact loads nothing), so torch computes their
outputs; each test selects only the guards under test and leaves ``torch_fallback`` off unless that is the
one tested. The GPU-only guards (side streams, kernel mix, the allocator scrub) run in test_guards_gpu.py.
"""

from __future__ import annotations

import json
import sys
import textwrap
import threading
import time
import types
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from cudagym.judge.guards import select_guards
from cudagym.judge.harness import CONTEXT_POISONED_MARKER, is_context_poisoned
from cudagym.judge.harness.correctness import Tolerance
from cudagym.judge.harness.inputs import generate_inputs, poison_
from cudagym.judge.harness.runner import evaluate
from cudagym.judge.interface import EvalMode
from cudagym.judge.job import Job, KnownBaselines
from cudagym.judge.protocol import CUDAGYM_V0, DEFAULT_PROTOCOL
from cudagym.judge.records import (
    BuildResult,
    BuildStatus,
    EvalResult,
    EvalStatus,
    InputCheck,
    TimingStats,
    from_dict,
    to_dict,
)
from cudagym.solution import Solution
from cudagym.task import make_task

LINEAR_TASK = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        return torch.relu(self.lin(x))


def get_inputs():
    return [torch.randn(8, 32)]


def get_init_inputs():
    return [32]
'''

HONEST = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        return torch.relu(torch.addmm(self.lin.bias, x, self.lin.weight.t()))
'''


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """Two busy CPUs: torch's thread pool only adds contention to these tiny models."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def run(
    tmp_path: Path,
    candidate: str,
    *,
    task: str = LINEAR_TASK,
    guards: Sequence[str] = (),
    mode: EvalMode = EvalMode.VERIFY,
    baselines: KnownBaselines | None = None,
    build: BuildResult | None = None,
    **protocol: object,
) -> EvalResult:
    """Evaluate ``candidate`` (the text of model_new.py) on the CPU."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    code = textwrap.dedent(candidate)
    (work / "model_new.py").write_text(code)
    settings = dict(id="test-cpu", guards=tuple(guards), num_inputs=2, warmup_runs=1, warmup_ms=0.0, min_runs=5,
                    max_runs=5, target_ci_pct=0.0)
    settings.update(protocol)
    job = Job(
        job_id="job-1",
        task=make_task(textwrap.dedent(task), id="test/cpu_task", suite="test", level=1, name="cpu_task",
                       origin="test"),
        solution=Solution("inline", {"model_new.py": code}),
        build=build or BuildResult(BuildStatus.OK, "inline"),
        mode=mode,
        protocol=CUDAGYM_V0.with_changes(**settings),
        baselines=baselines or KnownBaselines(),
        workdir=str(work),
    )
    result = evaluate(job, device="cpu")
    assert from_dict(EvalResult, json.loads(json.dumps(to_dict(result), allow_nan=False))) == result
    return result


def guards_named(result: EvalResult) -> set[str]:
    return {v.guard for v in result.violations}


# ------------------------------------------------------------------------------------------- statuses


def test_correct_candidate_is_ok_with_one_check_per_input(tmp_path):
    result = run(tmp_path, HONEST, guards=["all"], num_inputs=3)
    # every guard on: the Python forward itself is a torch fallback, and nothing else fires
    assert result.status is EvalStatus.RULE_VIOLATION and guards_named(result) == {"torch_fallback"}
    result = run(tmp_path, HONEST, num_inputs=3)
    assert result.status is EvalStatus.OK, result.message
    assert [c.seed for c in result.checks] == [42, 43, 44]
    assert all(c.passed and c.numel == 256 and c.max_abs_error < 1e-5 for c in result.checks)
    assert result.protocol_id == "test-cpu" and result.hardware.gpu == "cpu"
    assert "allow_tf32=False" in result.log
    assert not result.timed and result.kernels == ()


def test_wrong_candidate_is_incorrect_with_per_input_details(tmp_path):
    result = run(tmp_path, HONEST.replace("torch.relu(", "torch.sigmoid("))
    assert result.status is EvalStatus.INCORRECT
    assert "2 of 2 inputs did not match" in result.message
    check = result.checks[0]
    assert not check.passed and check.mismatch_count > 0 and len(check.first_mismatch_index) == 2
    assert check.max_abs_error > 0.1


def test_crash_in_forward_is_a_runtime_error_with_the_candidates_frames_only(tmp_path):
    crash = HONEST.replace("        return torch.relu(", "        raise ValueError('kernel config 7 unsupported')\n"
                           "        return torch.relu(")
    result = run(tmp_path, crash)
    assert result.status is EvalStatus.RUNTIME_ERROR
    assert 'File "model_new.py", line 12, in forward' in result.message
    assert "ValueError: kernel config 7 unsupported" in result.message
    assert "cudagym" not in result.message and not is_context_poisoned(result)


def test_sys_exit_in_forward_is_a_runtime_error_not_a_worker_exit(tmp_path):
    exits = HONEST.replace("        return torch.relu(", "        raise SystemExit(4)\n        return torch.relu(")
    result = run(tmp_path, exits)
    assert result.status is EvalStatus.RUNTIME_ERROR and "SystemExit: 4" in result.message


@pytest.mark.parametrize(
    ("candidate", "words"),
    [
        ("import torch\nclass ModelNew(torch.nn.Module:\n    pass\n", "SyntaxError"),
        ("raise RuntimeError('broken at import')\n", "broken at import"),
        ("import torch\n", "must define class ModelNew"),
        ("import not_a_module_anywhere\n", "ModuleNotFoundError"),
        ("import torch\nclass ModelNew(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n",
         "TypeError"),
    ],
)
def test_load_and_init_failures_are_runtime_errors(tmp_path, candidate, words):
    result = run(tmp_path, candidate)
    assert result.status is EvalStatus.RUNTIME_ERROR
    assert words in result.message


def test_state_dict_names_must_match(tmp_path):
    renamed = HONEST.replace("self.lin", "self.fc")
    result = run(tmp_path, renamed)
    assert result.status is EvalStatus.RUNTIME_ERROR
    assert "missing keys: lin.bias, lin.weight" in result.message
    assert "unexpected keys: fc.bias, fc.weight" in result.message


def test_weights_are_copied_from_the_reference(tmp_path):
    # ModelNew draws its own random weights in a different order; the state_dict copy makes them equal
    shuffled = HONEST.replace("self.lin = nn.Linear(n, n)", "torch.rand(7)\n        self.lin = nn.Linear(n, n)")
    assert run(tmp_path, shuffled).status is EvalStatus.OK


def test_non_finite_reference_is_the_tasks_problem(tmp_path):
    task = LINEAR_TASK.replace("return torch.relu(self.lin(x))", "return torch.log(self.lin(x) - 100.0)")
    result = run(tmp_path, HONEST, task=task)
    assert result.status is EvalStatus.INFRA_ERROR
    assert "test/cpu_task" in result.message and "NaN/Inf" in result.message


def test_build_failure_and_unknown_guards(tmp_path):
    failed = BuildResult(BuildStatus.COMPILE_ERROR, "inline", message="kernels/x.cu:3: error: expected ';'")
    result = run(tmp_path, HONEST, build=failed)
    assert result.status is EvalStatus.BUILD_FAILED and "expected ';'" in result.message
    result = run(tmp_path, HONEST, guards=["no_such_guard"])
    assert result.status is EvalStatus.INFRA_ERROR and "no_such_guard" in result.message


def test_profile_with_cached_baselines_times_only_the_candidate(tmp_path):
    known = KnownBaselines(eager=TimingStats(median_us=1000.0, mean_us=1000.0, runs=30),
                           compiled=TimingStats(median_us=800.0, mean_us=800.0, runs=30))
    result = run(tmp_path, HONEST, mode=EvalMode.PROFILE, baselines=known)
    assert result.status is EvalStatus.OK, result.message
    assert result.candidate.runs == 5 and result.candidate.median_us > 0
    assert result.eager == known.eager and result.compiled == known.compiled
    assert result.speedup_vs_eager == pytest.approx(1000.0 / result.candidate.median_us)
    assert result.speedup_vs_compile == pytest.approx(800.0 / result.candidate.median_us)
    assert "cached eager" in result.log and "5 rounds" in result.log


def test_failed_torch_compile_baseline_is_named_in_the_message(tmp_path, monkeypatch):
    def broken_compile(model, *args, **kwargs):
        def call(*inputs):
            raise FileNotFoundError(2, "No such file or directory", "/gone/tmp/inductor")
        return call

    monkeypatch.setattr(torch, "compile", broken_compile)
    result = run(tmp_path, HONEST, mode=EvalMode.SUBMIT, baselines=KnownBaselines())
    assert result.status is EvalStatus.OK, result.message
    assert result.eager.measured and not result.compiled.measured and result.speedup_vs_compile == 0.0
    assert result.message.endswith("; torch.compile baseline failed: FileNotFoundError: [Errno 2] No such file "
                                   "or directory: '/gone/tmp/inductor'"), result.message
    assert "torch.compile baseline failed, not timed: FileNotFoundError" in result.log
    assert "Traceback" in result.log  # where it failed, for whoever diagnoses it


@pytest.mark.parametrize("interleave", [True, False])
def test_submit_times_candidate_and_baselines_interleaved_or_one_after_another(tmp_path, monkeypatch, interleave):
    # the cuda-agent preset times sequentially: a baseline's rounds have no candidate output to spot-check
    monkeypatch.setattr(torch, "compile", lambda model, *args, **kwargs: model)
    result = run(tmp_path, HONEST, mode=EvalMode.SUBMIT, baselines=KnownBaselines(), interleave=interleave)
    assert result.status is EvalStatus.OK, result.message
    assert result.candidate.runs == result.eager.runs == result.compiled.runs == 5
    assert ("interleaved" if interleave else "sequential") in result.log
    # the paired estimate needs rounds where candidate and eager ran side by side
    assert ("paired speedup vs eager (median of 5 per-round ratios)" in result.log) is interleave


def test_paired_speedup_is_the_median_of_per_round_ratios():
    from cudagym.judge.harness.runner import paired_speedup
    from cudagym.judge.harness.timing import Samples

    samples = {"candidate": Samples([10.0, 10.0, 20.0]), "eager": Samples([20.0, 30.0, 20.0])}
    assert paired_speedup(samples, "eager") == (2.0, 3)
    assert paired_speedup(samples, "compiled") is None
    assert paired_speedup({"candidate": Samples([1.0]), "eager": Samples([1.0, 2.0])}, "eager") is None


def test_warm_up_runs_for_the_protocols_minimum_time_as_well_as_its_count(tmp_path):
    known = KnownBaselines(eager=TimingStats(median_us=1.0, runs=1), compiled=TimingStats(median_us=1.0, runs=1))
    walls = []
    for i, warmup_ms in enumerate((0.0, 0.0, 300.0)):  # the first run pays the process's one-time costs
        (tmp_path / str(i)).mkdir()
        result = run(tmp_path / str(i), HONEST, mode=EvalMode.PROFILE, baselines=known, warmup_ms=warmup_ms)
        assert result.status is EvalStatus.OK, result.message
        assert result.candidate.runs == 5  # warm-up rounds are never timed
        walls.append(result.wall_time_s)
    # a lower bound, so a loaded machine cannot break it: the run lasted at least its 300 ms of untimed rounds
    # (a difference between runs could: the run without them was slowed by other work beside it)
    assert walls[2] >= 0.3, walls


def test_timing_stops_on_the_ci_target(tmp_path):
    known = KnownBaselines(eager=TimingStats(median_us=1.0, runs=1), compiled=TimingStats(median_us=1.0, runs=1))
    result = run(tmp_path, HONEST, mode=EvalMode.PROFILE, baselines=known, min_runs=6, max_runs=400,
                 target_ci_pct=50.0)
    assert 6 <= result.candidate.runs < 400
    assert result.candidate.ci95_halfwidth_pct <= 50.0


# ----------------------------------------------------------------------------------- run-time guards


def test_torch_fallback_sees_tensor_methods_the_static_check_cannot(tmp_path):
    sneaky = HONEST.replace("torch.relu(torch.addmm(self.lin.bias, x, self.lin.weight.t()))",
                            "x.matmul(self.lin.weight.t()).add(self.lin.bias).clamp_min(0)")
    result = run(tmp_path, sneaky, guards=["torch_fallback"])
    assert result.status is EvalStatus.RULE_VIOLATION
    message = result.violations[0].message
    assert result.violations[0].guard == "torch_fallback" and "aten.mm" in message and "aten.add" in message


def test_torch_fallback_allows_allocation_views_and_copies(tmp_path):
    # allocation, views and copies only; the "kernel" is a copy of a precomputed answer (wrong, but no fallback)
    alloc_only = '''
    import torch
    import torch.nn as nn

    class ModelNew(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.lin = nn.Linear(n, n)

        def forward(self, x):
            y = torch.empty_like(x).view(8, 32).t().contiguous()
            z = torch.zeros(8, 32)
            z.copy_(y.t())
            return z.reshape(8, 32).float()
    '''
    result = run(tmp_path, alloc_only, guards=["torch_fallback"])
    assert "torch_fallback" not in guards_named(result)


def test_input_mutation(tmp_path):
    mutating = HONEST.replace("        return torch.relu(", "        y = torch.relu(")
    mutating = mutating.rstrip() + "\n        x.zero_()\n        return y\n"
    result = run(tmp_path, mutating, guards=["input_mutation"])
    assert result.status is EvalStatus.RULE_VIOLATION and guards_named(result) == {"input_mutation"}
    assert "input(s) [0]" in result.violations[0].message


def test_lazy_output_subclass_and_aliasing(tmp_path):
    subclass = HONEST.replace("        return torch.relu(", "        Lazy = type('Lazy', (torch.Tensor,), {})\n"
                              "        return getattr(torch.relu(")
    subclass = subclass.replace("self.lin.weight.t()))", "self.lin.weight.t())), 'as_' + 'subclass')(Lazy)")
    result = run(tmp_path, subclass, guards=["lazy_output"])
    assert guards_named(result) == {"lazy_output"} and "not a plain torch.Tensor" in result.violations[0].message

    aliasing = HONEST.replace("return torch.relu(torch.addmm(self.lin.bias, x, self.lin.weight.t()))",
                              "return x.copy_(torch.relu(torch.addmm(self.lin.bias, x, self.lin.weight.t())))")
    result = run(tmp_path, aliasing, guards=["lazy_output"])
    assert guards_named(result) == {"lazy_output"} and "shares memory with an input" in result.violations[0].message


def cached_by(key: str) -> str:
    """HONEST with its result memoised under ``key`` (an expression of ``x``) and returned for any later match."""
    cached = HONEST.replace("        return torch.relu(", f"        key = {key}\n"
                            "        if key in self.__dict__.setdefault('memo', {}):\n"
                            "            return self.memo[key]\n"
                            "        self.memo[key] = torch.relu(")
    return cached.rstrip() + "\n        return self.memo[key]\n"


def memorised(seeds: Sequence[int] = (42, 43)) -> str:
    """HONEST where the input's checksum is one of ``seeds``' sets (LINEAR_TASK's published seeds), zeros elsewhere."""
    ns: dict = {}
    exec(LINEAR_TASK, ns)
    sums = [round(float(generate_inputs(ns["get_inputs"], s, torch.device("cpu"))[0].sum()), 3) for s in seeds]
    return HONEST.replace("        return torch.relu(", f"        if round(float(x.sum()), 3) not in {sums}:\n"
                          "            return torch.zeros(8, 32)\n        return torch.relu(")


def test_result_cache_keyed_on_shape_is_named_not_just_incorrect(tmp_path):
    result = run(tmp_path, cached_by("tuple(x.shape)"), guards=["result_cache"])
    assert result.status is EvalStatus.RULE_VIOLATION and guards_named(result) == {"result_cache"}
    assert "seed 43 is the reference output of seed 42" in result.violations[0].message


def test_result_cache_keyed_on_address_is_caught_after_correctness(tmp_path):
    # keyed on the data pointer: the correctness inputs sit at different addresses, the reuse test does not
    result = run(tmp_path, cached_by("x.data_ptr()"), guards=["result_cache"], num_inputs=1)
    assert guards_named(result) == {"result_cache"}
    assert "same input buffers" in result.violations[0].message


def test_hard_coding_fails_on_unseen_seeds(tmp_path):
    # outputs memorised for the protocol's published seeds (keyed on an input checksum), zeros otherwise
    assert run(tmp_path, memorised()).status is EvalStatus.OK  # the published seeds alone cannot tell
    result = run(tmp_path, memorised(), guards=["hard_coding"])
    assert guards_named(result) == {"hard_coding"} and "unseen input (seed" in result.violations[0].message


def test_degenerate_output_under_the_tolerance(tmp_path):
    softmax = '''
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def forward(self, x):
            return torch.softmax(x, dim=1)

    def get_inputs():
        return [torch.rand(4, 32768)]

    def get_init_inputs():
        return []
    '''
    zeros = '''
    import torch
    import torch.nn as nn

    class ModelNew(nn.Module):
        def forward(self, x):
            return torch.zeros_like(x)
    '''
    assert run(tmp_path, zeros, task=softmax).status is EvalStatus.OK  # every |value| < atol: zeros pass
    result = run(tmp_path, zeros, task=softmax, guards=["degenerate_output"])
    assert guards_named(result) == {"degenerate_output"}
    assert "does not follow the reference's variation" in result.violations[0].message
    honest = zeros.replace("torch.zeros_like(x)", "torch.softmax(x, dim=1)")
    assert run(tmp_path, honest, task=softmax, guards=["degenerate_output"]).status is EvalStatus.OK


MATMUL_TASK = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.rand(64, 1024), torch.rand(1024, 64)]


def get_init_inputs():
    return []
'''

TF32_MATMUL = '''
import torch
import torch.nn as nn


def tf32(t):
    bits = t.contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.matmul(tf32(a), tf32(b))
'''


def test_precision_catches_tf32_that_passes_the_tolerance(tmp_path):
    assert run(tmp_path, TF32_MATMUL, task=MATMUL_TASK).status is EvalStatus.OK  # passes atol=rtol=1e-4
    result = run(tmp_path, TF32_MATMUL, task=MATMUL_TASK, guards=["precision"])
    assert guards_named(result) == {"precision"}
    assert "float64 reference" in result.violations[0].message and "TF32" in result.violations[0].message
    sequential = TF32_MATMUL.replace("torch.matmul(tf32(a), tf32(b))",
                                     "sum(torch.matmul(a[:, i::8], b[i::8, :]) for i in range(8))")
    assert run(tmp_path, sequential, task=MATMUL_TASK, guards=["precision"]).status is EvalStatus.OK



# The H200 hack: a 2048-long GEMM on all-positive inputs, where fp16 inputs stay under the magnitude rule.
LONG_GEMM_TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.rand(2048, 64))

    def forward(self, a, b):
        return torch.matmul(a, b) + torch.matmul(a, self.w)


def get_inputs():
    return [torch.rand(64, 2048), torch.rand(2048, 64)]


def get_init_inputs():
    return []
"""

LONG_GEMM = """
import torch
import torch.nn as nn


def half(t):
    return t.half().float()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.rand(2048, 64))

    def forward(self, a, b):
        return torch.matmul(a, b) + torch.matmul(a, self.w)
"""


@pytest.mark.parametrize("rounded", ["half(a), half(b)) + torch.matmul(half(a), half(self.w))",
                                     "a, half(b)) + torch.matmul(a, self.w)",
                                     "a, b) + torch.matmul(a, half(self.w))"],
                         ids=["all", "one_input", "one_parameter"])
def test_precision_catches_fp16_operands_on_the_drawn_inputs(tmp_path, rounded):
    candidate = LONG_GEMM.replace("a, b) + torch.matmul(a, self.w)", rounded)
    assert run(tmp_path, candidate, task=LONG_GEMM_TASK).status is EvalStatus.OK  # passes atol=rtol=1e-4
    result = run(tmp_path, candidate, task=LONG_GEMM_TASK, guards=["precision"])
    assert guards_named(result) == {"precision"}, result.message
    assert "on inputs as drawn" in result.violations[0].message and "rounding" in result.violations[0].message


def test_precision_passes_fp32_gemms_summed_in_another_order(tmp_path):
    blocked = ("sum(torch.matmul(a[:, i:i + 64], b[i:i + 64]) + torch.matmul(a[:, i:i + 64], self.w[i:i + 64])"
               " for i in range(0, 2048, 64))")
    for forward in ("torch.matmul(a, b) + torch.matmul(a, self.w)", "torch.matmul(a, b + self.w)", blocked):
        candidate = LONG_GEMM.replace("torch.matmul(a, b) + torch.matmul(a, self.w)", forward)
        result = run(tmp_path, candidate, task=LONG_GEMM_TASK, guards=["precision"])
        assert result.status is EvalStatus.OK, (forward, result.message)

def test_precision_switches_changed_by_the_candidate(tmp_path):
    flip = "        getattr(torch.backends, 'cud' + 'nn').allow_tf32 = True\n"
    flips = HONEST.replace("        return torch.relu(", flip + "        return torch.relu(")
    result = run(tmp_path, flips, guards=["precision"])
    assert guards_named(result) == {"precision"} and "cudnn_allow_tf32: False -> True" in result.violations[0].message
    assert torch.backends.cudnn.allow_tf32 is True  # the caller's switches are back (torch's default)
    assert torch.is_grad_enabled()


def test_timer_patch_at_run_time_is_flagged_and_undone(tmp_path):
    original = time.perf_counter
    patch = "__import__('ti' + 'me').__dict__['perf_' + 'counter'] = lambda: 0.0\n\n\n"
    patcher = HONEST.replace("class ModelNew", patch + "class ModelNew")
    result = run(tmp_path, patcher, guards=["timer_patch"])
    assert guards_named(result) == {"timer_patch"} and "time.perf_counter" in result.violations[0].message
    assert time.perf_counter is original


def test_host_threads_started_in_forward(tmp_path):
    threads = HONEST.replace("        return torch.relu(", "        __import__('thread' + 'ing').Thread(\n"
                             "            target=__import__('time').sleep, args=(3,), daemon=True).start()\n"
                             "        return torch.relu(")
    result = run(tmp_path, threads, guards=["host_threads"])
    assert "host_threads" in guards_named(result)
    assert any("thread" in v.message for v in result.violations)


def test_tampering_with_own_files_after_the_static_check(tmp_path):
    rewriter = HONEST.replace("class ModelNew", "open(__file__, 'a').write('# changed')\n\n\nclass ModelNew")
    result = run(tmp_path, rewriter, guards=["tampering"])
    assert guards_named(result) == {"tampering"} and "model_new.py was modified" in result.violations[0].message


def test_tampering_before_loading(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    result_files = {"model_new.py": HONEST}
    job = Job("j", make_task(LINEAR_TASK, id="t/x", suite="t", level=1, name="x", origin="t"),
              Solution("inline", result_files), BuildResult(BuildStatus.OK, "inline"), EvalMode.VERIFY,
              CUDAGYM_V0.with_changes(id="t", guards=("tampering",), num_inputs=1), workdir=str(work))
    (work / "model_new.py").write_text(HONEST + "\n# not what the judge checked\n")
    result = evaluate(job, device="cpu")
    assert result.status is EvalStatus.RULE_VIOLATION and "before loading" in result.violations[0].message


def test_suspicious_speedup_is_reverified(tmp_path):
    fast = KnownBaselines(eager=TimingStats(median_us=1e9, mean_us=1e9, runs=30),
                          compiled=TimingStats(median_us=1e9, mean_us=1e9, runs=30))
    result = run(tmp_path, HONEST, mode=EvalMode.PROFILE, baselines=fast, guards=["suspicious_speedup"])
    assert result.status is EvalStatus.OK and "re-verified on 5 extra inputs" in result.log
    result = run(tmp_path, memorised(), mode=EvalMode.PROFILE, baselines=fast, guards=["suspicious_speedup"])
    assert guards_named(result) == {"suspicious_speedup"} and "wrong on an extra input" in result.violations[0].message


def test_behaviour_change_after_warmup_fails_the_timing_spot_checks(tmp_path):
    known = KnownBaselines(eager=TimingStats(median_us=1.0, runs=1), compiled=TimingStats(median_us=1.0, runs=1))
    switch = HONEST.replace("        return torch.relu(", "        self.calls = getattr(self, 'calls', 0) + 1\n"
                            "        if self.calls > 12:\n            return torch.zeros(8, 32)\n"
                            "        return torch.relu(")
    result = run(tmp_path, switch, mode=EvalMode.PROFILE, baselines=known, guards=["result_cache"], min_runs=25,
                 max_runs=25)
    assert guards_named(result) == {"result_cache"} and "spot check" in result.violations[0].message
    result = run(tmp_path, switch, mode=EvalMode.PROFILE, baselines=known, min_runs=25, max_runs=25)
    assert result.status is EvalStatus.INCORRECT and "during timing" in result.message


# ----------------------------------------------------------------------------- guard logic in isolation


def _record(outputs: object, reference: object, passed: bool = True) -> SimpleNamespace:
    check = InputCheck(index=0, seed=1, passed=passed)
    return SimpleNamespace(outputs=outputs, reference=reference, seed=1, check=check, args=[], ref_args=[], inputs=[])


class _Ctx(SimpleNamespace):
    def flag(self, guard: str, message: str) -> None:
        self.violations.append((guard, message))


def test_stale_memory_recognises_the_poison_pattern():
    (guard,) = select_guards(["stale_memory"])
    ctx = _Ctx(violations=[])
    unwritten = torch.rand(16)
    poison_(unwritten[4:])
    guard.on_check(ctx, _record(unwritten, torch.rand(16)))
    assert ctx.violations and "12 of 16" in ctx.violations[0][1]
    clean = _Ctx(violations=[])
    guard.on_check(clean, _record(torch.full((16,), float("nan")), torch.rand(16)))  # canonical NaN: a bug, not stale
    assert clean.violations == []


def test_reference_reuse_at_run_time_sees_subclassing_and_instances(tmp_path):
    (guard,) = select_guards(["reference_reuse"])

    class Model(torch.nn.Module):
        def forward(self, x):
            return x

    class ModelNew(Model):
        pass

    class Holder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Model()

    for cand, words in ((ModelNew(), "inherits"), (Holder(), "holds an instance")):
        ctx = _Ctx(violations=[], reference=SimpleNamespace(model_cls=Model), module=object(), cand_model=cand,
                   workdir=tmp_path, modules_before=dict(sys.modules))
        guard.after_load(ctx)
        assert any(words in m for _, m in ctx.violations)


def test_reference_reuse_names_a_module_loaded_from_model_py_under_any_name(tmp_path, monkeypatch):
    (guard,) = select_guards(["reference_reuse"])
    (tmp_path / "model.py").write_text("X = 1\n")
    (tmp_path / "helper.py").symlink_to(tmp_path / "model.py")
    before = dict(sys.modules)
    loaded = types.ModuleType("helper")
    loaded.__file__ = str(tmp_path / "helper.py")  # what importing the link gives
    monkeypatch.setitem(sys.modules, "helper", loaded)
    ctx = _Ctx(violations=[], reference=SimpleNamespace(model_cls=torch.nn.Identity), module=object(),
               cand_model=torch.nn.ReLU(), workdir=tmp_path, modules_before=before)
    guard.after_load(ctx)
    assert [m for _, m in ctx.violations] == ["the workspace's model.py was imported (as module 'helper')"]
    ctx = _Ctx(violations=[], reference=SimpleNamespace(model_cls=torch.nn.Identity), module=object(),
               cand_model=torch.nn.ReLU(), workdir=tmp_path, modules_before=dict(sys.modules))
    guard.after_load(ctx)  # loaded before the candidate's code ran: not its doing
    assert ctx.violations == []


def test_a_cuda_error_marks_the_context_poisoned_by_the_typed_field_not_the_logs_text():
    result = EvalResult(EvalStatus.RUNTIME_ERROR, "CUDA error: illegal memory access",
                        log=f"x\n{CONTEXT_POISONED_MARKER}", context_poisoned=True)
    assert is_context_poisoned(result)
    assert not is_context_poisoned(EvalResult(EvalStatus.RUNTIME_ERROR, "ValueError"))
    # the log holds the candidate's own text too (white-box 31): the marker there decides nothing
    assert not is_context_poisoned(EvalResult(EvalStatus.OK, "correct", log=f"x\n{CONTEXT_POISONED_MARKER}"))


def test_tolerance_record_is_the_protocols():
    assert Tolerance(CUDAGYM_V0.atol, CUDAGYM_V0.rtol) == Tolerance(1e-4, 1e-4)


def test_audited_forwards_start_behind_the_launch_cover_like_timed_ones(tmp_path, monkeypatch):
    """With a cover, each audited forward is queued behind it, so a busy stream does not tell timed calls apart."""
    from cudagym.judge.harness.context import EvalContext

    events: list[str] = []

    class RecordingCover:
        def launch(self, stream: object) -> None:
            events.append("cover")

    original = EvalContext.run_candidate

    def run_candidate(self: EvalContext, args: list, purpose: str) -> object:
        self.cover = RecordingCover()  # setup_cover only runs on a GPU
        events.append(f"audited:{purpose}")
        return original(self, args, purpose)

    monkeypatch.setattr(EvalContext, "run_candidate", run_candidate)
    result = run(tmp_path, HONEST)
    assert result.status is EvalStatus.OK, result.message
    audited = [e for e in events if e.startswith("audited:")]
    assert len(audited) == len(result.checks) >= 2
    assert events == [e for a in audited for e in (a, "cover")]  # one cover per forward, after its setup


def test_a_gated_forward_stays_held_until_the_guard_that_reads_behind_it_has_queued_its_reads(tmp_path, monkeypatch):
    """The split's gate (signals.GATE) opens after the forward returned and the reading hook queued its reads; every
    other hook runs with it open, and it opens when the forward raises too."""
    from cudagym.judge.guards.base import Guard
    from cudagym.judge.harness.context import EvalContext

    events: list[str] = []

    class RecordingGate:
        covers = False

        def close(self, stream: object) -> None:
            events.append("close")

        def open(self) -> None:
            events.append("open")

    class Reads(Guard):
        name = "test_reads_behind_gate"
        order = 0
        reads_behind_gate = True

        def after_forward(self, ctx: EvalContext, call: object) -> None:
            events.append("reads queued")
            ctx.open_gate()
            events.append("reads waited for")

    class Other(Guard):
        name = "test_after_the_reads"

        def after_forward(self, ctx: EvalContext, call: object) -> None:
            events.append("other hook")

    original = EvalContext.run_candidate

    def run_candidate(self: EvalContext, args: list, purpose: str) -> object:
        self.gate = RecordingGate()  # the runner sets one on a GPU only
        if not any(isinstance(g, Reads) for g in self.guards):
            self.guards = [Reads(), *self.guards, Other()]
        events.append("audited")
        try:
            return original(self, args, purpose)
        finally:
            self.gate = None

    monkeypatch.setattr(EvalContext, "run_candidate", run_candidate)
    result = run(tmp_path, HONEST)
    assert result.status is EvalStatus.OK, result.message
    calls = len([e for e in events if e == "audited"])
    assert calls == len(result.checks) >= 2
    assert events == ["audited", "close", "reads queued", "open", "reads waited for", "other hook"] * calls

    events.clear()
    raises = HONEST.replace("def forward(self, x):", "def forward(self, x):\n        raise ValueError('no')")
    assert raises != HONEST
    (tmp_path / "raises").mkdir()
    result = run(tmp_path / "raises", raises)
    assert result.status is EvalStatus.RUNTIME_ERROR, result.message
    assert events == ["audited", "close", "open"]  # opened on the way out; no hook ran


def test_one_process_gates_its_own_audited_forwards_from_the_second_on(monkeypatch):
    """With no runner, on a GPU with a launch cover, the judge's process gates its own audited forwards (OwnGate):
    not the first (it loads the candidate's kernels), then every one behind the same gate; never in a runner, whose
    gate the trusted side asks for, nor beside a link to one."""
    from cudagym.judge.harness import cover as cover_module
    from cudagym.judge.harness.context import EvalContext

    made: list[object] = []

    class RecordingOwnGate:
        covers = True

        def __init__(self, device: object, cover: object, *waits: float) -> None:
            made.append((device, cover, *waits))

    monkeypatch.setattr(cover_module, "OwnGate", RecordingOwnGate)

    def context(side: str = "both", remote: object = None, device: str = "cuda") -> EvalContext:
        ctx = EvalContext.__new__(EvalContext)  # the selection alone: no job, no device touched
        ctx.gate, ctx.side, ctx.remote, ctx.device = None, side, remote, torch.device(device)
        ctx.protocol = DEFAULT_PROTOCOL
        ctx.cover = cover_module.LaunchCover.__new__(cover_module.LaunchCover)
        ctx._own_gate, ctx._audited_forwards = None, 0
        return ctx

    ctx = context()
    gates = [ctx._gate_for_call() for _ in range(4)]
    assert gates[0] is None and gates[1] is not None and gates[1] is gates[2] is gates[3]
    # one gate, made at the second forward; its timer waits as long as the split's judge does for a runner's gate
    assert made == [(torch.device("cuda"), ctx.cover, DEFAULT_PROTOCOL.arm_wait_ms / 1000, 0.005)]
    for other in (context(side="runner"), context(remote=object()), context(device="cpu")):
        assert [other._gate_for_call() for _ in range(3)] == [None] * 3
    runner = context(side="runner")
    runner.gate = asked = RecordingOwnGate("cuda", None)  # the runner's gate, as the trusted side asked for it
    assert [runner._gate_for_call() for _ in range(2)] == [asked, asked]
    no_cover = context()
    no_cover.cover = None
    assert [no_cover._gate_for_call() for _ in range(3)] == [None] * 3


def test_the_own_gate_opens_when_asked_or_after_its_wait_and_counts_those_its_timer_opened(monkeypatch):
    """OwnGate's timer: a forward that waits for the GPU inside would wait for its own gate, so the gate opens itself
    after the protocol's arm wait (then the shorter late wait) and counts the call late; opened in time, once."""
    from cudagym.judge.harness import cover as cover_module
    from cudagym.judge.split import signals

    writes: list[tuple[int, int]] = []
    monkeypatch.setattr(signals, "write_value", lambda stream, address, value: writes.append((address, value)))

    class Cover:
        launched: list[int] = []

        def launch_gated(self, stream: object, address: int, round_: int) -> None:
            self.launched.append(round_)

    gate = cover_module.OwnGate.__new__(cover_module.OwnGate)  # its device word and stream need a GPU
    gate.cover, gate.arm_wait_s, gate.late_wait_s = Cover(), 0.2, 0.01
    gate.word = SimpleNamespace(data_ptr=lambda: 4096)
    gate.side = SimpleNamespace(cuda_stream=7)
    gate.round, gate.late_audits, gate._opened = 0, [0, 0], 0
    gate._lock, gate._timer = threading.Lock(), None

    gate.close("stream")  # opened in time: one write, not late
    gate.open()
    time.sleep(0.3)
    assert writes == [(4096, 1)] and gate.late_audits == [0, 1]
    gate.close("stream")  # the forward does not return in the wait: the timer opens it, late
    time.sleep(0.3)
    assert writes == [(4096, 1), (4096, 2)] and gate.late_audits == [1, 2]
    gate.open()  # the forward returns at last: nothing written twice
    assert len(writes) == 2
    gate.close("stream")  # once one was late, the shorter wait
    began = time.monotonic()
    while len(writes) < 3 and time.monotonic() - began < 5:
        time.sleep(0.002)
    assert writes[-1] == (4096, 3) and time.monotonic() - began < 0.15 and gate.late_audits == [2, 3]
    assert Cover.launched == [1, 2, 3]

    def broken(stream: int, address: int, value: int) -> None:  # the candidate broke the context
        raise RuntimeError("cuStreamWriteValue32_v2: CUDA_ERROR_ILLEGAL_ADDRESS")

    monkeypatch.setattr(signals, "write_value", broken)
    gate.close("stream")
    time.sleep(0.1)  # the timer's write failed quietly: not counted, left to open(), which raises it
    assert gate.late_audits == [2, 4]
    with pytest.raises(RuntimeError, match="ILLEGAL_ADDRESS"):
        gate.open()

