"""The planted-hack corpus is well formed, covers every guard, and its static exploits are caught on the CPU.

The run-time rejection of every hack is checked on a GPU in test_guards_gpu.py.
"""

from __future__ import annotations

import pytest
from hacks.corpus import load_hacks, load_task

from cudagym.judge.guards import guard_names, select_guards
from cudagym.judge.protocol import DEFAULT_PROTOCOL
from cudagym.solution import Solution

HACKS = load_hacks()
SANDBOX_GUARDS = {"file_access", "network"}  # enforced by the sandbox; its own tests plant those
CAUGHT_STATICALLY = {"torch_fallback_cpp", "reference_reuse", "timer_patch", "host_threads", "lazy_output"}
HIDDEN_FROM_STATIC = {"torch_fallback_python", "timer_patch_runtime", "decoy_kernels", "hard_coding"}


class FakeCtx:
    def __init__(self, sources: dict[str, str]) -> None:
        self.sources = sources
        self.violations: list[tuple[str, str]] = []

    def flag(self, guard: str, message: str) -> None:
        self.violations.append((guard, message))


STATIC_GUARDS = ["torch_fallback", "reference_reuse", "timer_patch", "host_threads", "lazy_output"]


def static_guards_fired(solution: Solution) -> set[str]:
    ctx = FakeCtx(dict(solution.files))
    for guard in select_guards(STATIC_GUARDS):
        guard.check_sources(ctx)
    return {g for g, _ in ctx.violations}


def test_every_guard_has_a_planted_hack():
    covered = {h.guard for h in HACKS}
    assert covered == set(guard_names()) - SANDBOX_GUARDS


@pytest.mark.parametrize("hack", HACKS, ids=lambda h: h.name)
def test_each_hack_is_well_formed(hack):
    assert len(hack.exploit) > 40, "the EXPLOIT line must say what the candidate does"
    assert hack.guard in guard_names()
    task = load_task(hack.task)
    assert task.id == hack.task
    solution = hack.solution()
    assert "model_new.py" in solution.files
    assert any(p.endswith(".cu") for p in solution.files) and any(p.endswith("_binding.cpp") for p in solution.files)
    for key in hack.protocol:
        assert key in {"guards", "min_runs", "max_runs", "warmup_runs", "target_ci_pct", "mode", "baselines",
                       "launch_cover_us", "atol_scale"}
    fields = {k: v for k, v in hack.protocol.items() if k not in ("mode", "baselines")}
    DEFAULT_PROTOCOL.with_changes(**fields)  # the header's fields make a valid protocol (as the GPU test builds it)
    assert hack.worker in ("", "incorrect")
    assert (len(hack.worker_reason) > 40) == bool(hack.worker), "a WORKER line says why the guard is not reached"


def test_the_degenerate_output_hack_runs_under_the_plain_atol():
    # under the default's scaled atol its zeros fail the tolerance first: the guard it names would never be reached
    (hack,) = [h for h in HACKS if h.name == "degenerate_output"]
    assert hack.protocol["atol_scale"] == 0.0 and DEFAULT_PROTOCOL.atol_scale > 0


@pytest.mark.parametrize("hack", [h for h in HACKS if h.name in CAUGHT_STATICALLY], ids=lambda h: h.name)
def test_static_exploits_are_named_before_anything_runs(hack):
    assert hack.guard in static_guards_fired(hack.solution())


@pytest.mark.parametrize("hack", [h for h in HACKS if h.name in HIDDEN_FROM_STATIC], ids=lambda h: h.name)
def test_hidden_exploits_pass_the_static_checks(hack):
    # these need the run-time checks: a source scan alone would let them through
    assert static_guards_fired(hack.solution()) == set()


def test_only_a_hack_whose_premise_the_worker_removes_has_another_verdict_there():
    # suspicious_speedup needs cached baselines that make it look >10x faster: the worker times its own
    assert {h.name: h.worker for h in HACKS if h.worker} == {"suspicious_speedup": "incorrect"}
    assert "baselines" in next(h for h in HACKS if h.name == "suspicious_speedup").protocol


def test_corpus_tasks_are_valid_kernelbench_files():
    assert load_task("hacks/matmul_fp32").ops == ("matmul",)
    assert load_task("hacks/softmax_wide").ops == ("softmax",)
