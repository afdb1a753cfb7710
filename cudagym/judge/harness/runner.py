"""One evaluation, top to bottom: static checks, load, correctness, guards, timing, profile, verdict.

Each stage is one function; the guards' hooks run at fixed points between them (see
:mod:`cudagym.judge.guards.base`). Nothing the candidate does escapes :func:`evaluate`: its exceptions are
statuses, CUDA errors are statuses with the poisoned-context marker, and the harness's own failures are
``INFRA_ERROR`` with the traceback in the log.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
import secrets
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import torch

from cudagym.errors import ConfigError
from cudagym.judge.guards.base import select_guards, sided
from cudagym.judge.harness import COMPILE_FAILED_PREFIX, CONTEXT_POISONED_MARKER, CUDA_ERROR_PREFIX
from cudagym.judge.harness.claims import disputed_yardstick, late_gates_note, series_floor, series_wanted, verify_claims
from cudagym.judge.harness.context import PROFILE_REPEATS, EvalContext
from cudagym.judge.harness.correctness import compare_outputs, comparison_temporaries_bytes
from cudagym.judge.harness.failures import (
    CandidateFailure,
    TaskProblem,
    TaskTooLarge,
    exception_line,
    is_cuda_error,
    is_out_of_memory,
)
from cudagym.judge.harness.hardware import describe, l2_cache_bytes
from cudagym.judge.harness.inputs import clone_tree, nbytes, tree_digest, trees_bitwise_equal
from cudagym.judge.harness.integrity import AttributeSnapshot, TorchFlags
from cudagym.judge.harness.loading import build_models, candidate_module, load_reference, unload_reference
from cudagym.judge.harness.memory import DeviceMemoryMeter
from cudagym.judge.harness.profiling import OTHER, DeviceEvent, breakdown, busy_us, profile_calls
from cudagym.judge.harness.stats import StoppingRule, median, speedup, statistic_of, summarize
from cudagym.judge.harness.timing import Contender, CoverSizing, L2Flusher, Samples, TimingLoop, make_timer
from cudagym.judge.interface import EvalMode
from cudagym.judge.job import Job
from cudagym.judge.protocol import Protocol
from cudagym.judge.records import EvalCost, EvalResult, EvalStatus, Hardware, Precision, TimingStats, Yardstick
from cudagym.judge.split.channel import RunnerLost
from cudagym.judge.split.remote import (
    ARM_WAIT_MAX_S,
    RECALIBRATION_ROUNDS,
    RunnerLink,
)

log = logging.getLogger(__name__)

PRIMING_SEED_OFFSET = -1  # the priming run's seed: protocol.seed - 1, never a correctness seed
TIMING_SEED_OFFSET = 100_000  # timing rounds draw their inputs from secret seeds at or above this (RoundSeeds)
SPOT_CHECK_EVERY = 10  # outside SUBMIT, 1 in 10 timed rounds eager does not check (drawn at random) runs the reference
# ... and at least this many of the first min_runs rounds, drawn before timing (the candidate cannot know which): the
# timing claims are confirmed by the fastest checked call's clock, which one call's scheduler hiccup can spoil
MIN_CHECKED_ROUNDS = 3
_DRAW = secrets.SystemRandom()
TIMING_BUDGET_FRACTION = 0.6  # of the protocol's eval timeout, for the timing loop


def evaluate(job: Job, device: str | torch.device | None = None, runner: RunnerLink | None = None,
             runner_job: Job | None = None) -> EvalResult:
    """Run ``job`` on ``device`` (the current CUDA device by default; ``"cpu"`` for the CPU test path).

    With ``runner`` (the split, :mod:`cudagym.judge.split`), this process never loads the candidate: the
    runner at the other end of the link does, with ``runner_job`` (the same job, its paths the runner's).
    """
    started = time.monotonic()
    ctx = _start(job, device, runner)
    if isinstance(ctx, EvalResult):
        return ctx
    ctx.runner_job = runner_job or job
    caller_flags = TorchFlags.capture()  # restored at the end: run_job may run in a caller's process
    poisoned = False
    try:
        link = ctx.remote  # the split's arenas are device memory this process holds outside torch's allocator
        ctx.meter = DeviceMemoryMeter.start(ctx.device, None if link is None else lambda: link.arena_peak_bytes)
        with torch.no_grad(), ExitStack() as stack:
            status, message = _pipeline(ctx, stack)
    except RunnerLost as lost:  # the candidate's process died, hung or sent garbage: the candidate's failure ...
        if ctx.remote is not None and not ctx.remote.candidate_sent:  # ... once it held candidate code; before, the
            status = EvalStatus.INFRA_ERROR  # judge's own (its runner held the task's reference and nothing else)
            message = f"the judge's runner failed before any candidate code was in it: {lost}"
        else:
            status = EvalStatus.TIMEOUT if lost.timed_out else EvalStatus.CRASHED
            message = f"the candidate's process failed: {lost}"
    except CandidateFailure as failure:
        poisoned = failure.cuda and ctx.remote is None  # in the split only the runner's context is broken
        status, message = EvalStatus.RUNTIME_ERROR, _failure_message(failure)
        if "OutOfMemoryError" in failure.text:  # how much the task itself held, to tell greed from a big task
            message += f"\n(device memory: {ctx.meter.describe()}; the reference alone peaked at " \
                       f"{ctx.reference_peak_bytes / (1 << 30):.2f} GiB)"
    except TaskTooLarge as problem:
        status, message = _too_large(ctx, str(problem))
    except TaskProblem as problem:
        status, message = EvalStatus.INFRA_ERROR, f"the task is invalid: {problem}"
    except Exception as exc:  # the harness's own failure, or a CUDA error surfacing in its code
        poisoned = is_cuda_error(exc)
        if is_out_of_memory(exc):  # the judge's own copies of the task's tensors: the task does not fit
            status, message = _too_large(
                ctx, f"task {job.task.id}: the judge's copies of its tensors do not fit ({exception_line(exc)})")
        elif poisoned:
            status, message = EvalStatus.RUNTIME_ERROR, f"{CUDA_ERROR_PREFIX} {exception_line(exc)}"
        else:
            log.exception("harness failure on job %s", job.job_id)
            status, message = EvalStatus.INFRA_ERROR, f"the judge failed: {exception_line(exc)}"
            ctx.note(traceback.format_exc()[-4000:])
    finally:
        poisoned = _cleanup(ctx, poisoned)
        caller_flags.apply()
    if poisoned:
        ctx.note(CONTEXT_POISONED_MARKER)
    return _result(ctx, status, message, time.monotonic() - started, poisoned)


def _start(job: Job, device: str | torch.device | None, runner: RunnerLink | None) -> EvalContext | EvalResult:
    """The evaluation's context, or the verdict when it cannot start (no GPU, unknown guards, ...)."""
    if device is None and not torch.cuda.is_available():
        return EvalResult(EvalStatus.NO_GPU, "this worker has no CUDA device", build=job.build,
                          protocol_id=job.protocol.id, hardware=Hardware(), precision=job.protocol.precision)
    try:
        guards = select_guards(job.protocol.guards)
        ctx = EvalContext(job, _device(device), sided(guards, "trusted") if runner else guards,
                          Path(job.workdir or os.getcwd()))
        if runner is not None:
            ctx.remote, ctx.side, runner.device = runner, "trusted", ctx.device
            runner.on_violation = ctx.flag
        return ctx
    except ConfigError as exc:
        return EvalResult(EvalStatus.INFRA_ERROR, str(exc), build=job.build, protocol_id=job.protocol.id,
                          precision=job.protocol.precision)
    except Exception as exc:  # CUDA unusable before anything ran: the worker's problem, not the agent's
        return EvalResult(EvalStatus.INFRA_ERROR, f"the judge could not start: {exception_line(exc)}",
                          build=job.build, protocol_id=job.protocol.id, log=traceback.format_exc()[-4000:],
                          precision=job.protocol.precision)


# ------------------------------------------------------------------------------------------ the stages


def _device(device: str | torch.device | None) -> torch.device:
    """The job's device: the current CUDA device unless told otherwise (an index is always filled in)."""
    if device is None or str(device) == "cuda":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device(device)


def _pipeline(ctx: EvalContext, stack: ExitStack) -> tuple[EvalStatus, str]:
    if not ctx.job.build.ok:
        return EvalStatus.BUILD_FAILED, ctx.job.build.message or f"build {ctx.job.build.status.value}"
    _prepare(ctx)
    for guard in ctx.guards:
        guard.check_sources(ctx)
    if ctx.violations:
        return _violation(ctx)
    with ctx.clock.phase("load"):
        _load(ctx, stack)
        for guard in ctx.guards:
            guard.after_load(ctx)
    ctx.meter.end_phase("load")  # each phase's peak is in the log; cached blocks go back between phases
    if ctx.violations:
        return _violation(ctx)
    with ctx.clock.phase("check"):
        verdict = _checked(ctx)
    ctx.meter.end_phase("check")  # the checks' cached blocks are not the timing loop's sizes
    if verdict is not None or ctx.job.mode is EvalMode.VERIFY:
        return verdict or _spot_verdict(ctx) or (EvalStatus.OK, f"correct on all {len(ctx.checks)} inputs")
    with ctx.clock.phase("timing"):
        _timing(ctx)
    ctx.meter.end_phase("timing")
    with ctx.clock.phase("profile"):
        _post_timing_check(ctx)
        ctx.forget_kernel_events()  # profile what the candidate does after many calls, not what it did first
        if ctx.remote is not None:
            ctx.flag_changes.extend(ctx.remote.flag_changes)
            verify_claims(ctx)
        for guard in ctx.guards:
            guard.after_timing(ctx)
        if ctx.remote is not None:
            remote: Any = ctx.cand_model
            remote.hook("after_timing")
        _profile(ctx)
    ctx.meter.end_phase("profile")
    if ctx.violations:
        return _violation(ctx)
    return _spot_verdict(ctx) or (EvalStatus.OK, _timing_message(ctx))


def _spot_verdict(ctx: EvalContext) -> tuple[EvalStatus, str] | None:
    """INCORRECT when outputs checked after the correctness runs (timed, audited, profiled) were wrong."""
    if ctx.spot_failures:
        return EvalStatus.INCORRECT, "outputs during timing did not match the reference: " + ctx.spot_failures[0]
    if ctx.profiled_failures:
        return EvalStatus.INCORRECT, ("outputs of the profiled forwards did not match the reference: "
                                      + ctx.profiled_failures[0])
    return None


def _checked(ctx: EvalContext) -> tuple[EvalStatus, str] | None:
    """Correctness and the guards after it: the failing verdict, or None when the candidate passed."""
    _correctness(ctx)
    failed = [c for c in ctx.checks if not c.passed]
    if ctx.violations:
        return _violation(ctx)
    if failed and all(c.index >= SCALED_INDEX for c in failed):
        _unseen_inputs(ctx)
        if ctx.violations:
            return _violation(ctx)
    if failed:
        return EvalStatus.INCORRECT, f"{len(failed)} of {len(ctx.checks)} inputs did not match the reference; " \
            f"input {failed[0].index} (seed {failed[0].seed}): {failed[0].message}"
    for guard in ctx.guards:
        guard.after_correctness(ctx)
    if ctx.remote is not None:
        remote: Any = ctx.cand_model
        remote.hook("after_correctness")
    return _violation(ctx) if ctx.violations else None


def _unseen_inputs(ctx: EvalContext) -> None:
    """Only the scaled input sets failed: the guards that probe unseen inputs at the task's scale ask first.

    A scaled set has an unseen seed and another scale at once; answers memorised for the published seeds fail it
    as INCORRECT, and the guard that names them (``hard_coding``) ran only after every check passed.
    """
    for guard in ctx.guards:
        if guard.probes_unseen_inputs:
            guard.after_correctness(ctx)


def _prepare(ctx: EvalContext) -> None:
    if ctx.on_gpu:
        torch.cuda.set_device(ctx.device)
    # torch._dynamo replaces torch.manual_seed when first imported: import it before any snapshot so that
    # is not mistaken for the candidate's doing.
    importlib.import_module("torch._dynamo")
    ctx.flags.apply()
    ctx.note(f"precision: torch.backends.cuda.matmul.allow_tf32={ctx.flags.matmul_allow_tf32}, "
             f"torch.backends.cudnn.allow_tf32={ctx.flags.cudnn_allow_tf32} (protocol {ctx.protocol.id})")
    ctx.note(f"guards: {', '.join(g.name for g in ctx.guards)}")
    ctx.sources = dict(ctx.job.solution.files)
    if ctx.on_gpu and ctx.protocol.launch_cover_us > 0 and ctx.protocol.timing == "cuda_events":
        ctx.setup_cover()  # before any candidate code: the timed and the audited forwards share it


def _load(ctx: EvalContext, stack: ExitStack) -> None:
    ctx.reference = load_reference(ctx.job.task)
    stack.callback(unload_reference, ctx.reference)
    if ctx.remote is not None:
        _load_remote(ctx)
        return
    ctx.module = stack.enter_context(candidate_module(ctx.job.build, ctx.workdir, lambda: _take_snapshot(ctx)))
    train = ctx.protocol.extra.get("module_mode", "eval") == "train"
    ctx.ref_model, ctx.cand_model = build_models(ctx.reference, ctx.module, ctx.device, ctx.protocol.seed, train)


def _take_snapshot(ctx: EvalContext) -> None:
    """Record the judge's functions and the loaded modules: after the format loader, before candidate code."""
    ctx.snapshot = AttributeSnapshot()
    ctx.modules_before = dict(sys.modules)


def _load_remote(ctx: EvalContext) -> None:
    """The split: the reference here, primed; the candidate loaded in the runner, called through a proxy."""
    from cudagym.judge.guards.outputs import reference_aliasing
    from cudagym.judge.harness.loading import build_reference
    from cudagym.judge.split.remote import RemoteModel, untransferable

    assert ctx.reference is not None and ctx.remote is not None
    marks = [time.perf_counter()]
    train = ctx.protocol.extra.get("module_mode", "eval") == "train"
    ctx.ref_model = build_reference(ctx.reference, ctx.device, ctx.protocol.seed, train)
    if ctx.on_gpu and ctx.protocol.timing == "cuda_events":  # the GPU's clock, held by this process
        ctx.remote.bracket = True
        # allocated before any input set: carved out of a freed input-sized block, it left the H200's 2 GiB
        # task one more set's worth reserved (memory_probe: 120 MiB used of a 2 GiB segment)
        ctx.remote.flusher = _flusher(ctx)
    ctx.remote.arm_wait_s = arm_wait_s(ctx.protocol)
    inputs, prime = _prime(ctx)
    ctx.reference_aliases = reference_aliasing(prime, inputs, ctx.ref_model)
    model = RemoteModel(ctx.remote, prime)
    other = untransferable(model.container)
    if other:  # its value would be the candidate's process's word: no candidate could be judged on it
        raise TaskProblem(f"task {ctx.job.task.id}: the reference returns a value of type {other} beside its "
                          "tensors; the judge takes only tensors (in tuples, lists and dicts) from the candidate's "
                          "process")
    ctx.cand_model = model  # type: ignore[assignment]
    ctx.poison_results(prime)
    del prime
    marks.append(time.perf_counter())
    ctx.remote.hand(ctx.runner_job)
    if ctx.remote.bracket and ctx.job.mode is not EvalMode.VERIFY and _reads_the_heap(ctx, model):
        # before the runner times anything; room for the reference's own need beside its input set
        ctx.remote.setup_heap(model.out_slots, model.out_bytes, max(ctx.reference_peak_bytes - ctx.io_bytes[0], 0))
        ctx.note(f"{HEAP_NOTE}: {ctx.remote.heap.size if ctx.remote.heap is not None else 0} bytes")
    marks.append(time.perf_counter())
    if ctx.job.mode is not EvalMode.VERIFY:  # before any candidate code is in the runner: an empty call's cost
        model.calibrate(inputs, between=_calibration_between(ctx, inputs))
        model.calibrate_series(inputs)  # and an empty series' (_series_check)
    del inputs
    marks.append(time.perf_counter())
    if ctx.job.mode is not EvalMode.VERIFY and ctx.protocol.runner_reference_runs:
        cached = ctx.job.baselines.yardstick
        source = ctx.protocol.extra.get("yardstick", "cached")
        if cached.measured and (source == "clean" or (source == "cached" and not _retimes(ctx))):
            # the clean job's, beside the baselines this job looks up (or, a probe's, in every job)
            _cached_yardstick(ctx, model, cached)
        else:
            _time_reference_in_runner(ctx, model, recalibrate=True)
    marks.append(time.perf_counter())
    ctx.others_at_candidate_load = ctx.meter.others_bytes(ctx.remote.arena_bytes())
    ctx.note(f"{ARENAS_NOTE}: {ctx.remote.arena_bytes()} bytes")
    stages = ctx.remote.start({"device": str(ctx.device), "output_dtype": str(ctx.output_dtype).removeprefix(
        "torch."), "reference_aliases": ctx.reference_aliases})
    marks.append(time.perf_counter())
    spent = [b - a for a, b in zip(marks, marks[1:], strict=False)]
    ctx.note(LOAD_NOTE.format(*spent) + (f" (the runner's account: {stages})" if stages else ""))


def _reads_the_heap(ctx: EvalContext, model: Any) -> bool:
    """Whether bracketed calls' outputs are read from the heap shared with the runner (else the runner copies them).

    The default; ``extra["delivery"] = "copy"`` is a probe's comparison. A task with more outputs a call than the
    heap's words hold is delivered by copy, noted.
    """
    from cudagym.judge.split.heap import MAX_OUTPUTS

    if ctx.protocol.extra.get("delivery", "heap") != "heap":
        return False
    if len(model.out_slots) > MAX_OUTPUTS:
        ctx.note(f"{HEAP_NOTE}: off, {len(model.out_slots)} outputs a call (at most {MAX_OUTPUTS} are read so)")
        return False
    return True


HEAP_NOTE = "outputs read from the heap shared with the runner"


def _calibration_between(ctx: EvalContext, inputs: list[Any]) -> Callable[[], None] | None:
    """What runs before each empty call of a calibration (``None``: nothing).

    A baseline round on the CPU path where baselines are retimed, as they will run between the timed calls. On the
    H200 a baseline round between empty calls made an empty request cost 5.4 ms against 1.4 ms for a timed
    one, so a forged timer passed; there the calibration runs back to back.
    """
    return _baseline_round(ctx, inputs) if _retimes(ctx) and not ctx.on_gpu else None


def arm_wait_s(protocol: Protocol) -> float:
    """How long a bracketed call may take to be queued in the runner before the judge gives the go anyway.

    ``protocol.extra["arm_wait_ms"]`` (a probe's knob) where given, else :attr:`Protocol.arm_wait_ms`; within
    1 ms and ``ARM_WAIT_MAX_S``. A runner that queues its call sooner gets the go sooner.
    """
    ms = float(protocol.extra.get("arm_wait_ms", protocol.arm_wait_ms))  # a number: the protocol checked it
    return min(max(ms / 1000.0, 0.001), ARM_WAIT_MAX_S)


BESIDE_WORDS = "timed around it"  # the yardstick note's words for eager timed with it (yardstick_beside_eager)
REFERENCE_BUDGET_S = 3.0  # the reference's timed calls in the runner stop after this long (once 5 are in)
REFERENCE_WARMUP_MAX = 5  # untimed calls first, in one request (the first cuDNN or cuBLAS call sets up its handles)
RUNNER_REFERENCE_NOTE = "speedups against the reference in the candidate's runner"
REFERENCE_WARM_NOTE = "the reference's warm-up in the runner"


def _time_reference_in_runner(ctx: EvalContext, model: Any, recalibrate: bool = False) -> None:
    """The reference's time in the runner that will time the candidate, taken before it loads any candidate code.

    On an input set of its own, from an unpublished seed drawn here: the reference's outputs (and intermediates)
    that the runner's memory may still hold when the candidate loads answer none of the sets it is checked on.
    With ``recalibrate``, a second round of empty calls follows on that set, still before the candidate loads
    (:meth:`~cudagym.judge.split.remote.RemoteModel.calibrate`: the cheaper round stands), so one round taken in
    a transient on the GPU does not set the empty call's cost for the whole job.
    """
    protocol = ctx.protocol
    inputs = ctx.make_inputs(TIMING_SEED_OFFSET + secrets.randbelow(2**30))
    warmup = min(protocol.warmup_runs, REFERENCE_WARMUP_MAX)
    beside = yardstick_beside_eager(protocol)
    before = _eager_here(ctx, inputs) if beside else []
    try:
        samples = model.time_reference(inputs, protocol.runner_reference_runs, warmup, REFERENCE_BUDGET_S,
                                       enough=_reference_enough(protocol), batch=reference_batch(protocol),
                                       cover=_reference_cover(ctx))
    except CandidateFailure as exc:  # no candidate code is in the runner yet: the reference's (or the judge's) doing
        last = next((line.strip() for line in reversed(exc.text.splitlines()) if line.strip()), "")
        ctx.note(f"{RUNNER_REFERENCE_NOTE}: not taken, the reference failed in the runner ({last[:300]})")
        return
    ctx.runner_reference = summarize(samples)
    if beside:
        ctx.eager_beside_yardstick = summarize(before + _eager_here(ctx, inputs))
    warm = ctx.remote.reference_warm_us if ctx.remote is not None else []
    if len(warm) == 2 and min(warm) >= 0:
        ctx.note(f"{REFERENCE_WARM_NOTE}: {warmup} untimed call(s) in one request, the reference built there in "
                 f"{warm[0] / 1000:.1f} ms, its calls {warm[1] / 1000:.1f} ms")
    batched = ctx.remote.reference_batched if ctx.remote is not None else 0
    if batched:
        cover_us = ctx.remote.reference_cover_us if ctx.remote is not None else 0.0
        how = (f"its L2 flush and a {cover_us:.0f} us launch cover sized to its host time, as eager's here"
               if cover_us else "its L2 flush, no launch cover on this path")
        ctx.note(f"{RUNNER_REFERENCE_NOTE}: {batched} of its {len(samples)} timed calls timed in the runner's own "
                 f"loop, {reference_batch(protocol)} a request ({how}), the rest one a request")
    if recalibrate:
        _recalibrate(ctx, model, inputs)


def _recalibrate(ctx: EvalContext, model: Any, inputs: list[Any]) -> None:
    """The second round of empty calls and series, before the candidate loads (the cheaper round stands)."""
    model.calibrate(inputs, rounds=RECALIBRATION_ROUNDS, between=_calibration_between(ctx, inputs))
    model.calibrate_series(inputs, rounds=SERIES_RECALIBRATION_ROUNDS)


def yardstick_beside_eager(protocol: Protocol) -> bool:
    """:attr:`Protocol.yardstick_beside_eager`, or ``extra["yardstick_beside_eager"]`` (a probe's) where given."""
    return bool(protocol.extra.get("yardstick_beside_eager", protocol.yardstick_beside_eager))


BESIDE_BUDGET_S = REFERENCE_BUDGET_S / 2  # each of eager's two blocks around the runner's reference stops after this


def _eager_here(ctx: EvalContext, inputs: list[Any]) -> list[float]:
    """Eager's timed calls in this process on the yardstick's input set, as the timing loop times a baseline.

    Half the protocol's ``min_runs`` (at least 5) after a few untimed ones, each behind the L2 flush and a launch
    cover sized to its host time where the protocol has covers, within :data:`BESIDE_BUDGET_S`.
    """
    protocol, ref = ctx.protocol, ctx.ref_model
    assert ref is not None
    sized = ctx.cover is not None and protocol.launch_cover_max_us > 0
    runs = max(protocol.min_runs // 2, 5)
    loop = TimingLoop(
        contenders=[Contender("eager", lambda args: ref(*args), baseline=True)],
        make_inputs=lambda _: inputs,
        timer=make_timer(protocol.timing, ctx.device, ctx.cover),
        flusher=_flusher(ctx),
        rule=StoppingRule(runs, runs, 0.0, protocol.statistic),
        warmup_runs=min(protocol.warmup_runs, REFERENCE_WARMUP_MAX),
        warmup_s=0.0,
        interleave=True,
        budget_s=BESIDE_BUDGET_S,
        may_poison=ctx.may_poison,
        cover_sizing=CoverSizing(protocol.launch_cover_us, protocol.launch_cover_max_us) if sized else None,
        baselines_share_inputs=not ctx.reference_writes_inputs,
        retake_limit=runs if sized and protocol.retake_leaked_baselines else 0,
    )
    return loop.run().samples["eager"].time_us


def _cached_yardstick(ctx: EvalContext, model: Any, cached: Yardstick) -> None:
    """The yardstick from the baseline cache: the reference's time in the runner of the clean job that timed them.

    A job that looks its baselines up (PROFILE) is judged against times that job took, the eager one in the
    judge's process and this one in a runner; the second calibration round still follows, on a set of its own.
    Under the probe setting ``yardstick=clean`` a SUBMIT takes it too, beside the baselines it times again: with
    ``yardstick_beside_eager`` the scale is then the clean job's two times, one constant per task.
    """
    ctx.cached_yardstick = cached
    ctx.runner_reference = cached.time
    if yardstick_beside_eager(ctx.protocol):  # the clean job's eager beside it, where it took one
        ctx.eager_beside_yardstick = cached.eager_beside
    ctx.note(f"{RUNNER_REFERENCE_NOTE}: the reference's time in a runner from the baseline cache, taken by the clean "
             f"job that timed the baselines ({cached.time.median_us:.1f} us, median of {cached.time.runs}; "
             f"{cached.late_calls} of its {cached.calls} calls one a request not queued before the go)")
    _recalibrate(ctx, model, ctx.make_inputs(TIMING_SEED_OFFSET + secrets.randbelow(2**30)))


def reference_batch(protocol: Protocol) -> int:
    """How many of the runner's reference calls one request times; 0: one a request.

    :attr:`Protocol.runner_reference_batch`, or ``protocol.extra["runner_reference_batch"]`` (a probe's setting)
    where given.
    """
    return int(protocol.extra.get("runner_reference_batch", protocol.runner_reference_batch))


def _reference_cover(ctx: EvalContext) -> Callable[[list[float]], float | None] | None:
    """How long a launch cover goes before each of the runner's batched reference calls; ``None`` on the CPU path.

    Given the host times its single calls took to queue, the cover's length, or ``None`` where they outlast the
    longest cover allowed. Sized as the baselines' are here (:class:`~cudagym.judge.harness.timing.CoverSizing`,
    within the protocol's ``launch_cover_us`` and ``launch_cover_max_us``), so the batched calls, like the single
    ones queued in full before their go, are timed at their device work.
    """
    protocol = ctx.protocol
    if not (ctx.on_gpu and protocol.launch_cover_us > 0 and protocol.timing == "cuda_events"):
        return None
    sizing = CoverSizing(protocol.launch_cover_us, max(protocol.launch_cover_max_us, protocol.launch_cover_us))
    return lambda enqueued: None if sizing.outlasted(enqueued) else sizing.size(enqueued)


def _reference_enough(protocol: Protocol) -> Callable[[list[float]], bool] | None:
    """When the runner's reference samples may stop before ``runner_reference_runs``.

    Under a protocol with a precision target: once ``min_runs`` are in and the median's 95% interval is within
    it, looked at each time the samples pass another multiple of 10 (not only on one: batched calls come ten at a
    time after two single ones, 12, 22, ..., and a call whose host outlasted its cover is dropped, so a count
    divisible by 10 may never come; on the H200 the batched yardstick ran about 180 calls where single requests
    stopped near 30). Without a target, never.
    """
    if protocol.target_ci_pct <= 0 or protocol.min_runs >= protocol.runner_reference_runs:
        return None
    looked = [0]  # the multiple of 10 last looked at

    def enough(kept: list[float]) -> bool:
        tens = len(kept) // 10
        if len(kept) < protocol.min_runs or tens <= looked[0]:
            return False
        looked[0] = tens
        return summarize(kept).ci95_halfwidth_pct <= protocol.target_ci_pct

    return enough


def _against_runner_reference(ctx: EvalContext) -> None:
    """Scale the speedups by how the candidate's process runs the reference against how this one does.

    The same code can run at other speeds in two processes of one GPU (where their tensors lie in device
    memory; a call that waits for the GPU inside, behind its host): the reference's median in the runner, over
    eager's median here, moves the baselines into the candidate's process (``Protocol.runner_reference_runs``).
    Under ``Protocol.late_reference_floor`` it may raise them only where the reference's calls there were queued
    before their go and its claims agree with the judge's clock around them (:func:`disputed_yardstick`).
    """
    if not ctx.protocol.runner_reference_runs or not ctx.timed.get("candidate", TimingStats()).measured:
        return
    own, eager = ctx.runner_reference, ctx.timed.get("eager", TimingStats())
    beside = ctx.eager_beside_yardstick.measured and ctx.eager_beside_yardstick.median_us > 0
    if beside:  # the scale from two times taken together; eager's time beside the candidate keeps their drift
        eager = ctx.eager_beside_yardstick
    if ctx.remote is None:
        ctx.note(f"{RUNNER_REFERENCE_NOTE}: not taken, the candidate ran in the judge's process (no runner)")
        return
    if not (own.measured and eager.measured and own.median_us > 0 and eager.median_us > 0):
        if not any(n.startswith(f"{RUNNER_REFERENCE_NOTE}: not taken") for n in ctx.notes):  # said once
            ctx.note(f"{RUNNER_REFERENCE_NOTE}: not taken, the reference has no time in the runner")
        return
    factor = own.median_us / eager.median_us
    cached = ctx.cached_yardstick
    late, calls = _reference_calls(ctx.remote.unqueued, cached)
    if ctx.protocol.late_reference_floor and calls and late * 2 >= calls and factor > 1.0:
        ctx.note(f"{RUNNER_REFERENCE_NOTE}: {late} of its {calls} calls there were not queued before the go (the "
                 f"forward waits for the GPU inside), so its time holds host time in both processes; the speedups "
                 f"stay against this process's times (x{factor:.3f} there would raise them)")
        factor = 1.0
    if cached is not None:
        disputed = cached.disputed
    elif ctx.protocol.late_reference_floor:
        disputed = disputed_yardstick(ctx.remote.on_time_shown().get("reference", []), ctx.remote.on_time_path_us)
    else:
        disputed = ""
    ctx.runner_reference_disputed = disputed  # kept with the yardstick: a job that takes it from the cache reads it
    if disputed and factor > 1.0:
        ctx.note(f"{RUNNER_REFERENCE_NOTE}: {disputed}, so which clock read it right is unknown; the speedups stay "
                 f"against this process's times (x{factor:.3f} there would raise them)")
        factor = 1.0
    before = (ctx.speedup_vs_eager, ctx.speedup_vs_compile)
    ctx.speedup_vs_eager *= factor
    ctx.speedup_vs_compile *= factor
    ctx.baseline_scale = factor  # the reward's tier is computed from the times: it must take the same factor
    ctx.note(f"{RUNNER_REFERENCE_NOTE}: the reference took {own.median_us:.1f} us there (median of {own.runs}, "
             f"95% interval +-{own.ci95_halfwidth_pct:.1f}%, timed before "
             f"{'any candidate loaded, in a clean job' if cached is not None else 'the candidate loaded'}) "
             f"against eager's "
             f"{eager.median_us:.1f} us here ({BESIDE_WORDS if beside else 'beside the candidate'}, x{factor:.3f}): "
             f"{ctx.speedup_vs_eager:.3f}x vs eager, {ctx.speedup_vs_compile:.3f}x vs torch.compile (against this "
             f"process's times alone: {before[0]:.3f}x, {before[1]:.3f}x)")


# the split's load phase, part by part (benchmarks/bench_vec.py reads it back)
ARENAS_NOTE = "arenas shared with the runner as the candidate loaded"  # one input and one output set, the signals
LOAD_NOTE = ("load: reference built and primed {:.2f} s, runner ready {:.2f} s, calibration {:.2f} s, the reference "
             "timed in the runner {:.2f} s, candidate loaded in the runner {:.2f} s")


def _retimes(ctx: EvalContext) -> bool:
    """Whether this job times the baselines again, beside the candidate (or only looks them up)."""
    return ctx.job.mode is EvalMode.SUBMIT or not ctx.job.baselines.known


def _baseline_round(ctx: EvalContext, inputs: list[Any]) -> Callable[[], None]:
    """What a baseline's turn in an interleaved timing round does on the CPU path: an eager forward.

    There, timed requests that follow the trusted process's own work cost more than requests sent back to
    back; calibrating between such turns puts that cost into the calibration instead of a false shortfall.
    """

    def turn() -> None:
        outputs = ctx.run_reference(inputs)
        ctx.poison_results(outputs)
        del outputs

    return turn


def _prime(ctx: EvalContext) -> tuple[list[Any], Any]:
    """The priming reference run on a seed no check uses: its input set and outputs, the task's facts noted."""
    inputs = ctx.make_inputs(ctx.protocol.seed + PRIMING_SEED_OFFSET)
    # Does the reference write to its inputs? Found once, here, by the inputs' digest before and after the run
    # (no check then needs a third copy to tell the candidate's writes from the task's own). A fresh draw to
    # compare with held a second input set beside R: on the H200 15 KernelBench L1 tasks peaked one input set
    # (up to 16 GiB) over the split's bound in this phase alone.
    before = tree_digest(inputs)
    prime = ctx.run_reference(inputs)
    _primed(ctx, inputs, prime, written=tree_digest(inputs) != before)
    return inputs, prime


def _primed(ctx: EvalContext, inputs: list[Any], prime: Any, written: bool) -> None:
    ctx.io_bytes = (nbytes(inputs), nbytes(prime))
    ctx.temporaries_bytes = comparison_temporaries_bytes(prime)
    ctx.reference_peak_bytes = ctx.meter.peak_bytes()  # the models and one reference run: what the task needs
    ctx.reference_writes_inputs = written
    ctx.output_dtype = ctx.first_output_dtype(prime)
    ctx.primed = True
    if ctx.protocol.flat_reference_note:
        _note_flat_references(ctx, prime)


def _note_flat_references(ctx: EvalContext, outputs: Any) -> None:
    """A note for each reference output whose spread is within the tolerance: a constant would pass it."""
    from cudagym.judge.harness.inputs import tensors_in
    from cudagym.judge.harness.memory import moments

    for i, ref in enumerate(tensors_in(outputs)):
        if not ref.is_floating_point() or ref.numel() < 2:
            continue
        found = moments(ref.detach())
        tol = ctx.tolerance.for_reference(ref)
        if found.std <= tol.atol + tol.rtol * abs(found.mean):
            ctx.note(f"flat reference: output {i} barely varies (mean {found.mean:.6g}, std {found.std:.3g}, within "
                     "the tolerance): a constant near its mean passes this task's checks")


def _correctness(ctx: EvalContext) -> None:
    # Priming: one reference run on a seed no check uses, its outputs poisoned and freed, so even the
    # first candidate call finds poison (not answers) in recycled memory.
    if not ctx.primed:
        inputs, prime = _prime(ctx)
        del inputs
        ctx.poison_results(prime)
        del prime
    for index, seed in enumerate(ctx.protocol.input_seeds()):
        ctx.checks.append(ctx.verify_seed(seed, index, "correctness"))
    if all(c.passed for c in ctx.checks):
        _scaled_checks(ctx)


SCALED_INDEX = 500  # the scaled input sets' indices in the result start here


def _scaled_checks(ctx: EvalContext) -> None:
    """The protocol's extra input sets at other scales (unpublished seeds), where the task leaves room."""
    for k, factor in enumerate(ctx.protocol.scaled_inputs):
        seed = secrets.randbelow(2**31 - 1)
        usable = _scaled_reference_finite(ctx, seed, factor)
        if usable is None:
            ctx.note(f"scaled inputs x{factor:g}: skipped (no signed floating-point input: scaling would change the "
                     "problem)")
            return
        if not usable:
            ctx.note(f"scaled inputs x{factor:g}: skipped (the reference is not finite there)")
            continue
        check = ctx.verify_seed(seed, SCALED_INDEX + k, "scaled_inputs", scale=factor)
        if not check.passed:
            check = dataclasses.replace(check, message=f"inputs scaled x{factor:g}: {check.message}")
        ctx.checks.append(check)


def _scaled_reference_finite(ctx: EvalContext, seed: int, factor: float) -> bool | None:
    """Whether the reference is finite on the set of ``seed`` scaled by ``factor`` (None: nothing to scale).

    A function of its own so that the probe set dies with it: a loop variable left holding one of its tensors
    kept a whole input set alive through the check that follows (the 2 GiB GPU test's extra set).
    """
    from cudagym.judge.harness.context import signed_float_tensors
    from cudagym.judge.harness.correctness import nonfinite_count

    probe = ctx.inputs_at(seed)
    signed = signed_float_tensors(probe)
    if not signed:
        return None
    for tensor in signed:
        tensor.mul_(factor)
    del signed, tensor
    reference = ctx.run_reference(probe)
    finite = nonfinite_count(reference) == 0
    ctx.poison_results(reference)
    return finite


class RoundSeeds:
    """Each timing round's input seed (the warm-ups' too, at negative rounds): secret, drawn on its own.

    Not a secret base plus the round: one set's values give its seed away to a search of the seed space (on the GPU
    the inputs come from Philox, a few instructions a seed: 2**30 seeds are a GPU's second), and a base plus the
    round would then give away every later round's inputs, whose answers a forward could compute during the
    untimed warm-up and hand back at once in the timed calls, correct and timed honestly by every clock. A round
    asked again (the baselines' turn in it) gets its own seed again.
    """

    def __init__(self) -> None:
        self._seeds: dict[int, int] = {}

    def __call__(self, round_: int) -> int:
        """The seed of ``round_``."""
        if round_ not in self._seeds:
            self._seeds[round_] = TIMING_SEED_OFFSET + secrets.randbelow(2**30)
        return self._seeds[round_]


def _flusher(ctx: EvalContext) -> L2Flusher:
    """The job's L2 flush buffer: the split's bracket's where it holds one (one buffer, not two), else a new one."""
    held = ctx.remote.flusher if ctx.remote is not None else None
    flusher = held if held is not None else L2Flusher(ctx.device, l2_cache_bytes(ctx.device), ctx.protocol.l2_flush)
    ctx.flush_bytes = flusher.nbytes  # one of the memory bound's small buffers
    return flusher


def _timing(ctx: EvalContext) -> None:
    protocol, job = ctx.protocol, ctx.job
    retime = _retimes(ctx)
    # unpublished: the candidate cannot draw the timed inputs itself (task code runs in its process) and
    # compute their answers ahead of the timed calls, nor tell which round it is in
    round_seed = RoundSeeds()
    # The flush buffer lives through the loop: allocated first, on an emptied cache, so it is never carved out
    # of a free input-sized block (which no input set could then use: one more set's worth reserved).
    ctx.meter.release(0)
    flusher = _flusher(ctx)
    contenders = [_candidate_contender(ctx)]
    if retime:
        contenders.extend(_baseline_contenders(ctx))
    sized = ctx.cover is not None and protocol.launch_cover_max_us > 0
    loop = TimingLoop(
        contenders=contenders,
        make_inputs=lambda r: ctx.make_inputs(round_seed(r)),
        timer=make_timer(protocol.timing, ctx.device, ctx.cover),
        flusher=flusher,
        rule=StoppingRule(protocol.min_runs, protocol.max_runs, protocol.target_ci_pct, protocol.statistic),
        warmup_runs=protocol.warmup_runs,
        warmup_s=protocol.warmup_ms / 1000.0,
        interleave=protocol.interleave,
        budget_s=_timing_budget_s(ctx),
        may_poison=ctx.may_poison,
        on_round=SpotCheck(ctx),
        cover_sizing=CoverSizing(protocol.launch_cover_us, protocol.launch_cover_max_us) if sized else None,
        baselines_share_inputs=not ctx.reference_writes_inputs,
        # One contender's cached blocks can be split to serve the next one's other sizes, which then finds no
        # block for its largest: on the H200 L2/65 (a 4.45 GiB conv output; eager, then torch.compile, timed in
        # blocks) held 3.6 GiB over the bound in its timing phase, about one more such output (the likely
        # cause: its allocator history is not yet recorded). Interleaved rounds cannot release so: a cudaMalloc
        # would fall inside the next contender's timed call.
        between_contenders=ctx.meter.release,
        retake_limit=protocol.max_runs if sized and protocol.retake_leaked_baselines else 0,
    )
    ctx.timing = loop.run()
    _series_check(ctx)
    if sized:
        covers = "".join(f", {name} {us:.0f} us" for name, us in ctx.timing.cover_us.items())
        ctx.note(f"{COVER_NOTE}: candidate {protocol.launch_cover_us:g} us{covers}")
        for name, us in ctx.timing.outlasted_us.items():
            ctx.note(f"{OUTLASTED_NOTE}: {name}'s host takes {us:.0f} us to queue a call, longer than the "
                     f"{protocol.launch_cover_max_us:g} us cover: its times include host time")
        if ctx.timing.retaken:
            counts = ", ".join(f"{name} {n}" for name, n in ctx.timing.retaken.items())
            ctx.note(f"{RETAKEN_NOTE} ({counts}): the host outlasted the cover, so the GPU waited for it")
    ctx.timed = {name: summarize(s.time_us) for name, s in ctx.timing.samples.items()}
    if retime and not job.baselines.known and ctx.on_gpu:  # the times the cache will keep: say what ran
        _note_baseline_kernels(ctx, [c for c in contenders if c.baseline])
    if not retime:
        ctx.timed["eager"], ctx.timed["compiled"] = job.baselines.eager, job.baselines.compiled
        ctx.note("baselines: cached eager and torch.compile times (not re-timed in PROFILE mode)")
    else:
        _no_slower_than_cached(ctx)  # each baseline the cache has (a task's torch.compile may have none)
    cand = ctx.timed["candidate"]
    ctx.speedup_vs_eager = speedup(ctx.timed.get("eager", TimingStats()), cand, protocol.statistic)
    ctx.speedup_vs_compile = speedup(ctx.timed.get("compiled", TimingStats()), cand, protocol.statistic)
    _against_runner_reference(ctx)
    ctx.note(f"timing: {ctx.timing.rounds} rounds ({ctx.timing.stop_reason}), timer {loop.timer.name}, "
             f"L2 flush {'on' if loop.flusher.enabled else 'off'}, "
             f"{'interleaved' if protocol.interleave else 'sequential'}, statistic {protocol.statistic}")
    paired = paired_speedup(ctx.timing.samples, "eager") if retime and protocol.interleave else None
    if paired is not None:  # a diagnostic beside the reward's ratio of medians: drift between rounds cancels here
        ctx.paired = paired
        ctx.note(f"{PAIRED_NOTE} (median of {paired[1]} per-round ratios): {paired[0]:.4f}x")


SERIES_ROUNDS = 3  # series of the candidate's calls back to back, when its claims are too short for one call's clock
# outside SUBMIT, the calls of each series whose outputs are compared (drawn after the series): the reading is the
# calls' 20th percentile, so skipping the work of 7 calls in 32 would move it; 12 drawn miss all 7 2.3% of the time
SERIES_SPOT = 12
SERIES_RECALIBRATION_ROUNDS = 3


def _series_check(ctx: EvalContext) -> None:
    """Series of the candidate's calls back to back where one call's clock is too coarse for its claims.

    Each call of a series has an input set of its own (fresh seeds, unpublished), so no cache can answer it;
    its outputs are compared with the reference's (every call in SUBMIT, :data:`SERIES_SPOT` drawn after the
    series elsewhere), so a series that skipped work is INCORRECT. What the series showed per call floors each
    timed call's count (:func:`~cudagym.judge.harness.claims.series_floor`).
    """
    link, model, timing = ctx.remote, ctx.cand_model, ctx.timing
    if link is None or timing is None or link.series_calls < 2 or "candidate" not in timing.samples:
        return
    samples = timing.samples["candidate"]
    on_gpu = bool(getattr(model, "bracketed", False))
    if not series_wanted(samples.time_us, on_gpu):
        return
    remote: Any = model
    calls = link.series_calls
    readings, late = _read_series(ctx, remote, calls)  # a failure there ends the job: no arena to give back
    remote.end_series()
    if len(readings) < SERIES_ROUNDS:
        return  # a series' outputs were wrong: the spot failure decides
    floor, note = series_floor(samples.time_us, readings, calls, on_gpu)
    rounds = link.series_rounds_us
    note += (f"; a chained empty call held {median(link.series_gap_us):.2f} us beyond its own time (the cheapest of "
             f"{len(rounds)} calibrations: " + ", ".join(f"{r:.2f}" for r in rounds) + ")")
    if late:
        note += f"; {late} series not queued in full before its go (the runner's host time is in its reading)"
    ctx.note(note)
    if floor > 0:
        samples.time_us[:] = [max(t, floor) for t in samples.time_us]


def series_seeds(count: int) -> list[int]:
    """The seeds of ``count`` input sets of a series: each one secret and drawn on its own.

    Not a base plus the call's index: one set's values give away its seed to a search of the seed space (2**30 seeds,
    a GPU's seconds for torch's generators), and a base plus an index would then give away every later set of the
    job's series, which the candidate could answer ahead (in its calibration, whose time counts for nothing) before
    the chain placed them.
    """
    return [TIMING_SEED_OFFSET + secrets.randbelow(2**30) for _ in range(count)]


def _read_series(ctx: EvalContext, remote: Any, calls: int) -> tuple[list[float], int]:
    """The series of :func:`_series_check`: each one's reading per call, and how many were late.

    Fewer readings than :data:`SERIES_ROUNDS` where a series' outputs were wrong (a spot failure says so).
    """
    readings: list[float] = []
    late = 0
    for number in range(SERIES_ROUNDS):
        sets = [ctx.make_inputs(seed) for seed in series_seeds(calls)]
        if number == 0:  # an empty series now too: where the host was busier at the first, the cheaper stands
            remote.calibrate_series(sets[0], rounds=SERIES_RECALIBRATION_ROUNDS, loaded=True)
        reading = remote.series(sets)  # the runner's failures arrive as the candidate's (CandidateFailure)
        failure = _checked_series(ctx, remote, sets, reading.outputs, f"series {number}")
        if failure:
            ctx.spot_failures.append(failure)
            return readings, late
        readings.append(reading.per_call_us)
        late += reading.late
    return readings, late


def _checked_series(ctx: EvalContext, remote: Any, sets: list[list[Any]], outputs: list[Any], name: str) -> str:
    """One series' calls held to the timed rounds' rules; ``""``, or what the first that broke one did (``name``'s).

    The candidate can tell a series' calls from the timed ones (the request differs), so each rule a timed round
    is held to holds here too: every call's copy of its inputs is read-only (as :meth:`SpotCheck.call` checks;
    a forward that wrote over them in a series only went unseen), the outputs of every call in SUBMIT and of
    :data:`SERIES_SPOT` drawn after the series elsewhere are compared with the reference's, and one of those drawn
    calls is held to the float64 precision rule (as one timed round is, :meth:`SpotCheck._precision`): a forward
    that rounded its operands to TF32 or fp16 in series only passed the tolerance on long dot products, and the
    series' reading, which floors forged claims, was then that arithmetic's time.
    """
    calls = len(sets)
    if not ctx.reference_writes_inputs:
        for k in range(calls):
            if not trees_bitwise_equal(remote.series_inputs_seen(k), sets[k]):
                return f"{name}, call {k} of {calls} back to back: the candidate changed its inputs"
    drawn = list(range(calls)) if ctx.job.mode is EvalMode.SUBMIT else \
        sorted(secrets.SystemRandom().sample(range(calls), min(SERIES_SPOT, calls)))
    precise = secrets.choice(drawn)
    for k in drawn:
        reference = ctx.run_reference(clone_tree(sets[k]) if ctx.reference_writes_inputs else sets[k])
        check = compare_outputs(reference, outputs[k], ctx.tolerance, index=k)
        if check.passed and k == precise:
            _precision_rule(ctx, sets[k], outputs[k], reference, f"of {name}, call {k} of {calls} back to back")
        ctx.poison_results(reference)
        if not check.passed:
            return f"{name}, call {k} of {calls} back to back: {check.message}"
    return ""


def _note_baseline_kernels(ctx: EvalContext, baselines: list[Contender]) -> None:
    """One note per baseline: its main kernels in one profiled call (its cuDNN plan is part of its time).

    The note also sets how long they kept the GPU busy beside their summed durations (overlapping kernels).
    """
    args = ctx.make_inputs(ctx.protocol.seed)
    for contender in baselines:
        events = _profiled_call(ctx, contender, args)
        rows = [k for k in breakdown(events, 1, limit=BASELINE_KERNEL_ROWS) if k.name != OTHER]
        named = "; ".join(f"{k.name[:120]} {k.time_us:.1f} us x{k.calls}" for k in rows)
        overlap = (f" (busy {busy_us(events):.1f} us of {sum(e.duration_us for e in events):.1f} us summed)"
                   if events else "")
        ctx.note(f"{BASELINE_KERNELS_NOTE}: {contender.name}: {named or 'none recorded'}{overlap}")


def _profiled_call(ctx: EvalContext, contender: Contender, args: list[Any]) -> list[DeviceEvent]:
    outputs: list[Any] = []
    events = profile_calls(lambda: outputs.append(contender.forward(args)), ctx.device, 1)
    ctx.poison_results(outputs)  # freed results hold poison, never answers
    return events


BASELINE_KERNELS_NOTE = "baseline kernels"  # the first timing of a task's baselines: which kernels they ran
BASELINE_KERNEL_ROWS = 3
PAIRED_NOTE = "paired speedup vs eager"
COVER_NOTE = "launch covers (baselines' sized to their host enqueue time)"
OUTLASTED_NOTE = "cover outlasted"  # a baseline timed with host time in it, which the split's candidate never is
RETAKEN_NOTE = "baselines: rounds retaken"  # a baseline's host hiccup, beyond its sized cover, left out


def paired_speedup(samples: dict[str, Samples], baseline: str) -> tuple[float, int] | None:
    """Median over interleaved rounds of ``baseline`` time / candidate time, and how many rounds; None if untimed."""
    base, cand = samples.get(baseline), samples.get("candidate")
    if base is None or cand is None or not base.time_us or len(base.time_us) != len(cand.time_us):
        return None
    ratios = [b / c for b, c in zip(base.time_us, cand.time_us, strict=True) if c > 0]
    return (median(ratios), len(ratios)) if ratios else None


def _candidate_contender(ctx: EvalContext) -> Contender:
    model = ctx.cand_model
    assert model is not None
    if ctx.remote is not None:  # timed in the runner, on its own stream; the claim is checked (verify_claims)
        remote: Any = model  # its copy of the inputs is the runner's arena: the loop hands it the round's set
        return Contender("candidate", remote, measure=remote.timed, seen=remote.inputs_seen)
    return Contender("candidate", lambda args: ctx.call_candidate(lambda: model(*args), "timing"))


def _no_slower_than_cached(ctx: EvalContext) -> None:
    """A baseline re-timed beside the candidate counts no slower than its clean cached time.

    The cached times come from jobs that ran no candidate code; a fresh time above them may be the
    candidate's doing (work left running on the GPU while the baselines were timed), so it cannot raise
    the speedup.
    """
    cached = {"eager": ctx.job.baselines.eager, "compiled": ctx.job.baselines.compiled}
    statistic = ctx.protocol.statistic
    for name, clean in cached.items():
        fresh = ctx.timed.get(name)
        if fresh is None or not clean.measured or not fresh.measured:
            continue
        if statistic_of(fresh, statistic) > statistic_of(clean, statistic):
            ctx.timed[name] = clean
            ctx.note(f"baselines: {name} re-timed at {statistic_of(fresh, statistic):.1f} us, slower than its clean "
                     f"cached {statistic_of(clean, statistic):.1f} us; the cached time counts")


def _baseline_contenders(ctx: EvalContext) -> list[Contender]:
    ref = ctx.ref_model
    assert ref is not None
    found = [Contender("eager", lambda args: ref(*args), baseline=True)]
    compiled = torch.compile(ref)  # default mode; compiles on its first call, below
    try:
        with warnings.catch_warnings(), ctx.clock.phase("compile"):  # fp32 baselines: the protocol's choice
            warnings.filterwarnings("ignore", message="TensorFloat32 tensor cores", category=UserWarning)
            compiled(*ctx.make_inputs(secrets.randbelow(2**30)))
        ctx.meter.end_phase("compile")  # its own peak (with the L2 flush buffer); its blocks go back
        # inductor's generated code can hold more than eager (L1/87 on the H200: an 8 GiB intermediate beside
        # its 8 GiB output), and the timing loop runs it: part of what the task itself needs
        ctx.compiled_peak_bytes = ctx.meter.phase_peaks.get("compile", 0)
    except Exception as exc:
        if is_cuda_error(exc):
            raise
        if is_out_of_memory(exc):
            raise TaskTooLarge(f"task {ctx.job.task.id}: the torch.compile baseline does not fit in device memory "
                               f"({exception_line(exc)})") from exc
        ctx.compile_error = exception_line(exc)
        ctx.note(f"torch.compile baseline failed, not timed: {ctx.compile_error}\n"
                 f"{traceback.format_exc()[-3000:]}")
        return found
    found.append(Contender("compiled", lambda args: compiled(*args), baseline=True))
    return found


class SpotCheck:
    """The timing loop's round hook: the candidate's timed outputs against the reference's on the same inputs.

    With eager timed in the round, its outputs are the reference's (compared as soon as eager returns, then
    freed). Otherwise (eager timed in a block of its own, or cached) the reference runs at the end of the round:
    in SUBMIT every round, since a timed call whose outputs nobody compares could return a wrong answer at once
    and pull the candidate's statistic down (the ``cuda-agent`` preset's mean of 10 calls fell a tenth for each);
    elsewhere the first round, :data:`MIN_CHECKED_ROUNDS` of the protocol's ``min_runs`` drawn before timing, and
    then one in :data:`SPOT_CHECK_EVERY`, drawn after the round's call, so the candidate cannot know which.
    """

    def __init__(self, ctx: EvalContext) -> None:
        self.ctx = ctx
        self.outputs: Any = None  # the candidate's outputs of the current round
        self.inputs: list[Any] | None = None
        self.compared = False
        self.precision_done = False
        # the precision rule runs on the first checked round from this one on: drawn now, unknown to the candidate
        rounds = max(1, ctx.protocol.min_runs)
        self.precision_round = secrets.randbelow(rounds)
        self.drawn_rounds = {0, self.precision_round, *_DRAW.sample(range(rounds), min(rounds, MIN_CHECKED_ROUNDS))}

    def call(self, index: int, name: str, inputs: list[Any], args: list[Any], outputs: Any) -> None:
        """Keep the candidate's outputs; compare eager's with them."""
        if name == "candidate":
            self.outputs, self.inputs, self.compared = outputs, inputs, False
            # (exempt, as in input_mutation, where the task's reference writes to its own inputs)
            if not self.ctx.reference_writes_inputs and not trees_bitwise_equal(args, inputs):
                self.ctx.spot_failures.append(f"timed round {index}: the candidate changed its inputs")
        elif name == "eager" and self.inputs is not None:
            self._compare(index, outputs)

    def done_with_first(self, index: int) -> bool:
        """Once eager's outputs were compared with the candidate's, the round needs the candidate's no more."""
        if not self.compared:
            return False
        self.outputs = None
        return True

    def end(self, index: int) -> None:
        """Restore torch's switches if the candidate changed them; the every-tenth reference run; forget the round."""
        ctx = self.ctx
        flags_now = TorchFlags.capture()
        if flags_now != ctx.flags:  # the candidate changed torch's switches: restore before the next round
            ctx.flag_changes.extend(ctx.flags.differences(flags_now))
            ctx.flags.apply()
        checked = (ctx.job.mode is EvalMode.SUBMIT or index in self.drawn_rounds
                   or secrets.randbelow(SPOT_CHECK_EVERY) == 0)
        if self.inputs is not None and not self.compared and checked:
            # the round's set itself where the reference leaves its inputs alone (no second set on the device)
            reference = ctx.run_reference(clone_tree(self.inputs) if ctx.reference_writes_inputs else self.inputs)
            self._compare(index, reference)
            ctx.poison_results(reference)  # freed results hold poison, never answers
        self.outputs, self.inputs = None, None

    def _compare(self, index: int, reference: Any) -> None:
        self.compared = True
        if self.ctx.remote is not None:  # this round's call is one whose clock may confirm the runner's claims
            self.ctx.remote.mark_checked()
        check = compare_outputs(reference, self.outputs, self.ctx.tolerance, index=index)
        if not check.passed:
            self.ctx.spot_failures.append(f"timed round {index}: {check.message}")
        elif not self.precision_done and self.inputs is not None and index >= self.precision_round:
            self._precision(index, reference)

    def _precision(self, index: int, reference: Any) -> None:
        """Once per evaluation, in a round drawn at random: the float64 error rule on the timed outputs."""
        self.precision_done = True
        assert self.inputs is not None
        _precision_rule(self.ctx, self.inputs, self.outputs, reference, f"of timed round {index}")


def _precision_rule(ctx: EvalContext, inputs: list[Any], outputs: Any, reference: Any, label: str) -> None:
    """The precision guard's float64 error rule on one call's outputs, where the protocol runs that guard."""
    from cudagym.judge.guards.precision import Precision

    for guard in ctx.guards:
        inner = getattr(guard, "inner", guard)
        if isinstance(inner, Precision):
            inner.check_timed(ctx, inputs, outputs, reference, label)


def _post_timing_check(ctx: EvalContext) -> None:
    """One more audited check on a fresh seed: behaviour that changed after many calls shows here."""
    seed = secrets.randbelow(2**31 - 1)
    check = ctx.verify_seed(seed, -1, "post_timing")
    if not check.passed:
        ctx.spot_failures.append(f"audited check after timing (seed {seed}): {check.message}")


def _profile(ctx: EvalContext) -> None:
    profile = ctx.kernel_profile()  # on the CPU too: the profiled forwards' outputs are checked either way
    if ctx.on_gpu:
        ctx.kernels = breakdown(list(profile.events), PROFILE_REPEATS)
        ctx.kernel_busy_us = profile.busy_per_forward_us


# ------------------------------------------------------------------------------------------ the verdict


def _violation(ctx: EvalContext) -> tuple[EvalStatus, str]:
    names = ", ".join(dict.fromkeys(v.guard for v in ctx.violations))
    details = "; ".join(f"[{v.guard}] {v.message}" for v in ctx.violations)
    return EvalStatus.RULE_VIOLATION, f"rule violation ({names}): {details}"


def _failure_message(failure: CandidateFailure) -> str:
    if failure.cuda:
        text = failure.text if failure.text.startswith(CUDA_ERROR_PREFIX) else f"{CUDA_ERROR_PREFIX} {failure.text}"
        return f"{text} (during {failure.stage}; the CUDA context of this worker is poisoned)"
    return f"{failure.stage} failed:\n{failure.text}"


def _timing_message(ctx: EvalContext) -> str:
    cand = ctx.timed.get("candidate")
    if cand is None:
        return "correct"
    parts = [f"correct; candidate {cand.median_us:.1f} us (median of {cand.runs})"]
    if ctx.speedup_vs_eager:
        parts.append(f"{ctx.speedup_vs_eager:.3f}x vs eager")
    if ctx.speedup_vs_compile:
        parts.append(f"{ctx.speedup_vs_compile:.3f}x vs torch.compile")
    message = ", ".join(parts)
    if ctx.compile_error:  # last, so a reader (and render_eval) finds the reason after the prefix
        message += f"; {COMPILE_FAILED_PREFIX}{ctx.compile_error}"
    elif not ctx.timed.get("compiled", TimingStats()).measured:
        message += "; torch.compile baseline not timed"
    return message


def _timing_budget_s(ctx: EvalContext) -> float:
    return max(5.0, TIMING_BUDGET_FRACTION * ctx.protocol.eval_timeout_s - ctx.elapsed_s())


def _cleanup(ctx: EvalContext, poisoned: bool) -> bool:
    """Undo what the candidate changed in this process, so the next job starts clean; whether its context is gone."""
    if ctx.snapshot is not None:
        restored = ctx.snapshot.restore()
        if restored:
            ctx.note(f"restored replaced functions: {', '.join(restored)}")
    ctx.release_models()
    if ctx.on_gpu and not poisoned:
        try:
            torch.cuda.synchronize(ctx.device)
            torch.cuda.empty_cache()
        except Exception as exc:  # a sticky error surfacing only now: the context is gone
            ctx.note(f"the CUDA context failed at clean-up ({exception_line(exc)})")
            return True
    return poisoned


def _result(ctx: EvalContext, status: EvalStatus, message: str, wall_s: float, poisoned: bool = False) -> EvalResult:
    if ctx.meter.phase_peaks:
        ctx.note(ctx.meter.describe_phases())
    gates = _gate_keeper(ctx)
    note = late_gates_note(gates.late_audits, gates.arm_wait_s, gates.late_wait_s) if gates is not None else ""
    if note:
        ctx.note(note)
    try:
        hardware = describe(ctx.device)
    except Exception:  # a broken context cannot describe itself; the verdict must still come back
        hardware = Hardware(gpu="unknown", torch=torch.__version__)
    return EvalResult(
        status=status,
        message=message,
        build=ctx.job.build,
        checks=tuple(ctx.checks),
        violations=tuple(ctx.violations),
        candidate=ctx.timed.get("candidate", TimingStats()),
        eager=ctx.timed.get("eager", TimingStats()),
        compiled=ctx.timed.get("compiled", TimingStats()),
        speedup_vs_eager=ctx.speedup_vs_eager,
        speedup_vs_compile=ctx.speedup_vs_compile,
        kernels=ctx.kernels,
        kernel_busy_us=ctx.kernel_busy_us,
        protocol_id=ctx.protocol.id,
        hardware=hardware,
        wall_time_s=wall_s,
        log="\n".join(ctx.notes),
        precision=Precision(ctx.flags.matmul_allow_tf32, ctx.flags.cudnn_allow_tf32,
                            ctx.flags.float32_matmul_precision),
        cost=_cost(ctx),
        compile_failure=ctx.compile_error,
        context_poisoned=poisoned,
        paired_speedup_vs_eager=ctx.paired[0] if ctx.paired else 0.0,
        paired_rounds=ctx.paired[1] if ctx.paired else 0,
        runner_reference=ctx.runner_reference,
        runner_reference_disputed=ctx.runner_reference_disputed,
        baseline_scale=ctx.baseline_scale,
        eager_beside_yardstick=ctx.eager_beside_yardstick,
        notes=tuple(ctx.notes),
    )


def _cost(ctx: EvalContext) -> EvalCost:
    clock = ctx.clock
    link = ctx.remote
    return EvalCost(peak_device_memory_bytes=ctx.meter.peak_bytes(),
                    peak_allocated_bytes=ctx.meter.peak_allocated_bytes(),
                    device_memory_total_bytes=ctx.meter.total_bytes,
                    runner_peak_device_memory_bytes=link.runner_peak_bytes if link is not None else 0,
                    arena_bytes=link.arena_peak_bytes if link is not None else 0,
                    heap_bytes=link.heap.size if link is not None and link.heap is not None else 0,
                    reference_peak_bytes=ctx.reference_peak_bytes, compiled_peak_bytes=ctx.compiled_peak_bytes,
                    input_set_bytes=ctx.io_bytes[0],
                    output_set_bytes=ctx.io_bytes[1],
                    small_buffers_bytes=ctx.flush_bytes + ctx.temporaries_bytes,
                    load_s=clock.get("load"), check_s=clock.get("check"), timing_s=clock.get("timing"),
                    compile_s=clock.get("compile"), profile_s=clock.get("profile"),
                    **_late_calls(link.unqueued if link is not None else {}, ctx.cached_yardstick),
                    **_audited_calls(_gate_keeper(ctx)))


def _gate_keeper(ctx: EvalContext) -> Any:
    """What gated the audited forwards and counted the late ones (``None``: nothing did).

    The runner's link, else this process's own gate; either has ``late_audits``, ``arm_wait_s`` and ``late_wait_s``.
    """
    return ctx.remote if ctx.remote is not None else ctx.own_gate


def _audited_calls(keeper: Any) -> dict[str, int]:
    late, gated = keeper.late_audits if keeper is not None else (0, 0)
    return {"late_audited_calls": late, "audited_calls": gated}


def _late_calls(unqueued: dict[str, list[int]], cached: Yardstick | None = None) -> dict[str, int]:
    """The split's late timed calls and all of them, the candidate's and the reference's (EvalCost's fields).

    The reference's are the yardstick's: where it came from the cache, the clean job's calls behind it.
    """
    late, timed = unqueued.get("timed", [0, 0])
    late_reference, reference = _reference_calls(unqueued, cached)
    return {"late_calls": late, "timed_calls": timed, "late_reference_calls": late_reference,
            "reference_calls": reference}


def _reference_calls(unqueued: dict[str, list[int]], cached: Yardstick | None) -> tuple[int, int]:
    """The yardstick's late calls and all its calls one a request: this job's, or the clean job's where cached."""
    if cached is not None:
        return cached.late_calls, cached.calls
    late, calls = unqueued.get("reference", [0, 0])
    return late, calls


def _too_large(ctx: EvalContext, why: str) -> tuple[EvalStatus, str]:
    """The verdict where this process ran out of device memory: the task's (reward 0), or the candidate's.

    In the split the candidate's runner shares the GPU: a runner that grew beyond what a candidate may hold
    (:func:`~cudagym.judge.harness.memory.memory_taken_beyond_bound`) since its code loaded took the memory the
    judge needed, so a wrong answer could otherwise end as ``task_too_large`` (not the agent's fault) instead of -1.
    """
    taken = _memory_taken_by_runner(ctx)
    if taken:
        ctx.meter.release(0)
        return EvalStatus.RUNTIME_ERROR, f"{taken}, and the judge then ran out of device memory: {why}"
    return EvalStatus.TASK_TOO_LARGE, _too_large_message(ctx, why)


def _memory_taken_by_runner(ctx: EvalContext) -> str:
    """Why the runner is to blame for this process's lack of device memory, or ``""`` where it is not."""
    from cudagym.judge.harness.memory import GIB, TAKEN_MARGIN_BYTES, memory_taken_beyond_bound

    before = ctx.others_at_candidate_load
    if ctx.remote is None or before is None:
        return ""
    now = ctx.meter.others_bytes(ctx.remote.arena_bytes())
    if now is None:
        return ""
    reference = max(ctx.reference_peak_bytes, ctx.compiled_peak_bytes)
    outputs = ctx.remote.arenas["outputs"].size if "outputs" in ctx.remote.arenas else 0
    if not memory_taken_beyond_bound(now - before, reference, outputs):
        return ""
    return (f"the candidate's process took {(now - before) / GIB:.2f} GiB of device memory after its code loaded, more "
            f"than a candidate may hold beside the judge (the reference's own need {reference / GIB:.2f} GiB, one "
            f"output set {outputs / GIB:.2f} GiB and {TAKEN_MARGIN_BYTES / GIB:.0f} GiB to spare)")


def _too_large_message(ctx: EvalContext, why: str) -> str:
    ctx.meter.release(0)  # the failed allocation's neighbours: give them back before the next job
    return (f"the task does not fit in this GPU's memory with the judge's bound (the reference's own needs plus "
            f"one more input set and its outputs): {why}; {ctx.meter.describe()}")
