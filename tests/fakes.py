"""Test doubles for the env's CPU tests: a Judge with configurable results and a call log."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from cudagym.judge.interface import EvalMode, Judge
from cudagym.judge.protocol import DEFAULT_PROTOCOL, Protocol, get_protocol
from cudagym.judge.records import (
    BuildResult,
    BuildStatus,
    Diagnostic,
    EvalResult,
    EvalStatus,
    Hardware,
    InputCheck,
    KernelResources,
    KernelTime,
    Severity,
    TimingStats,
)
from cudagym.solution import Solution
from cudagym.task import Task

H200 = "NVIDIA H200"


def timing(median_us: float, runs: int = 30) -> TimingStats:
    """A measured timing with the given median (mean equal, spread 1%)."""
    return TimingStats(median_us=median_us, mean_us=median_us, min_us=median_us * 0.99,
                       max_us=median_us * 1.01, iqr_us=median_us * 0.01, ci95_halfwidth_pct=0.4, runs=runs)


def ok_build(fmt: str = "extension") -> BuildResult:
    """A successful build with one kernel and a warning."""
    return BuildResult(
        BuildStatus.OK, fmt, wall_time_s=1.5, artifact_key="k",
        diagnostics=(Diagnostic(Severity.WARNING, "variable \"unused\" was declared but never referenced",
                                "kernels/relu.cu", 7, 9, "nvcc"),),
        kernels=(KernelResources("relu_kernel", registers=16, shared_mem_bytes=0, constant_mem_bytes=360),),
    )


def failed_build(fmt: str = "extension") -> BuildResult:
    """A build that failed with one located error."""
    return BuildResult(
        BuildStatus.COMPILE_ERROR, fmt, message="nvcc exited with status 1",
        diagnostics=(Diagnostic(Severity.ERROR, 'identifier "x" is undefined', "kernels/relu.cu", 12, 5, "nvcc"),),
        log="kernels/relu.cu(12): error: identifier \"x\" is undefined",
    )


def timed_result(candidate_us: float, eager_us: float = 100.0, compile_us: float = 90.0,
                 build: BuildResult | None = None, protocol_id: str = DEFAULT_PROTOCOL.id) -> EvalResult:
    """A correct, timed verdict."""
    return EvalResult(
        status=EvalStatus.OK, build=build or ok_build(),
        checks=tuple(InputCheck(i, 42 + i, True, 1e-7, 1e-6, 0, 4096) for i in range(5)),
        candidate=timing(candidate_us), eager=timing(eager_us), compiled=timing(compile_us),
        speedup_vs_eager=eager_us / candidate_us, speedup_vs_compile=compile_us / candidate_us,
        kernels=(KernelTime("relu_kernel", candidate_us, 1, 1.0),),
        protocol_id=protocol_id, hardware=Hardware(gpu=H200),
    )


def host_bound_result(candidate_us: float = 14084.3, candidate_ci: float = 13.0, reference_us: float = 17488.8,
                      reference_ci: float = 15.4) -> EvalResult:
    """A correct verdict timed behind its host, against the runner's yardstick: by default kernelbench-v0.8's
    ``L3/34_VanillaRNNHidden`` with its reference as the candidate (H100, session 44; eager 29,891.3 us here)."""
    eager_us = 29891.3
    scale = reference_us / eager_us
    return dataclasses.replace(
        timed_result(candidate_us, eager_us, 24620.0), baseline_scale=scale,
        speedup_vs_eager=reference_us / candidate_us, speedup_vs_compile=24620.0 * scale / candidate_us,
        candidate=TimingStats(median_us=candidate_us, mean_us=candidate_us, runs=100, ci95_halfwidth_pct=candidate_ci),
        runner_reference=TimingStats(median_us=reference_us, mean_us=reference_us, runs=92,
                                     ci95_halfwidth_pct=reference_ci))


def incorrect_result(build: BuildResult | None = None) -> EvalResult:
    """A verdict with one mismatching input."""
    checks = (InputCheck(0, 42, True, 1e-7, 1e-6, 0, 4096),
              InputCheck(1, 43, False, 0.5, 1.0, 12, 4096, (0, 17), "12 of 4096 elements differ"))
    return EvalResult(status=EvalStatus.INCORRECT, build=build or ok_build(), checks=checks,
                      message="output 0 differs", hardware=Hardware(gpu=H200))


@dataclass
class FakeJudge(Judge):
    """A judge that answers from configuration and logs every call.

    Attributes:
        gpu: ``hardware().gpu``; ``"none"`` makes a judge without a GPU.
        protocol: The protocol it reports.
        build_fn: ``(task, solution) -> BuildResult``; by default OK when ``model_new.py`` exists.
        eval_fn: ``(task, solution, mode) -> EvalResult`` for a built solution; by default correct and
            timed (candidate 90 us, eager 100 us, compile 90 us: tier 2).
        calls: ``(method, task id, mode)`` of every call.
        closed: How many times ``close()`` ran.
    """

    gpu: str = H200
    protocol: Protocol = field(default_factory=lambda: get_protocol(None))
    build_fn: Callable[[Task, Solution], BuildResult] | None = None
    eval_fn: Callable[[Task, Solution, EvalMode], EvalResult] | None = None
    calls: list[tuple[str, str, str]] = field(default_factory=list)
    closed: int = 0

    def build(self, task: Task, solution: Solution) -> BuildResult:
        self.calls.append(("build", task.id, ""))
        if self.build_fn is not None:
            return self.build_fn(task, solution)
        if "model_new.py" not in solution.files:
            return BuildResult(BuildStatus.INVALID, solution.format, message="model_new.py is missing")
        return ok_build(solution.format)

    def evaluate(self, task: Task, solution: Solution, mode: EvalMode = EvalMode.PROFILE) -> EvalResult:
        self.calls.append(("evaluate", task.id, mode.value))
        build = self.build(task, solution)
        if not build.ok:
            return EvalResult(status=EvalStatus.BUILD_FAILED, build=build, protocol_id=self.protocol.id,
                              hardware=self.hardware())
        if self.eval_fn is not None:
            return self.eval_fn(task, solution, mode)
        result = timed_result(90.0, protocol_id=self.protocol.id)
        if mode is EvalMode.VERIFY:  # verify checks but does not time
            return EvalResult(status=EvalStatus.OK, build=result.build, checks=result.checks,
                              protocol_id=self.protocol.id, hardware=self.hardware())
        return result

    def submit(self, task: Task, solution: Solution, mode: EvalMode = EvalMode.PROFILE, *,
               job_id: str | None = None) -> Future[EvalResult]:
        future: Future[EvalResult] = Future()
        future.set_result(self.evaluate(task, solution, mode))
        return future

    def hardware(self) -> Hardware:
        return Hardware(gpu=self.gpu, compute_capability="9.0" if self.gpu != "none" else "")

    def close(self) -> None:
        self.closed += 1

    def evaluations(self, mode: str | None = None) -> list[tuple[str, str, str]]:
        """The logged evaluate calls (of one mode when given)."""
        return [c for c in self.calls if c[0] == "evaluate" and (mode is None or c[2] == mode)]
