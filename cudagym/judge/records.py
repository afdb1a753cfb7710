"""Typed, frozen, JSON-serialisable result records of the judge.

Units are in field names (``time_us``, ``shared_mem_bytes``). Errors are a status plus a message string,
never exception objects; a value that was not measured is zero with a flag saying so, never ``None``.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import typing
from dataclasses import dataclass, field
from typing import Any, TypeVar

R = TypeVar("R")


class BuildStatus(str, enum.Enum):
    """Outcome of building a solution."""

    OK = "ok"
    COMPILE_ERROR = "compile_error"  # the compiler rejected the code
    INVALID = "invalid"  # the solution's layout is wrong (missing or unexpected files)
    TIMEOUT = "timeout"  # the compiler ran past the protocol's build timeout
    OUTPUT_LIMIT = "output_limit"  # the build wrote more than its cap (a compile bomb)
    TOOL_ERROR = "tool_error"  # infrastructure: nvcc or torch headers missing; not the agent's fault


class EvalStatus(str, enum.Enum):
    """Outcome of evaluating a solution on a GPU."""

    OK = "ok"  # built, ran and matched the reference on every input
    BUILD_FAILED = "build_failed"
    INCORRECT = "incorrect"  # ran, but an output did not match the reference
    RUNTIME_ERROR = "runtime_error"  # raised while loading or running (Python or CUDA error)
    CRASHED = "crashed"  # the worker process died (segfault, illegal address, exit, OOM kill)
    TIMEOUT = "timeout"  # a job ran past the protocol's timeout (hung kernel or host loop)
    RULE_VIOLATION = "rule_violation"  # a reward-hacking guard fired
    NO_GPU = "no_gpu"  # this judge has no GPU; only the build ran
    TASK_TOO_LARGE = "task_too_large"  # the task's own inputs, reference or baselines do not fit in device memory
    INFRA_ERROR = "infra_error"  # the judge itself failed; not the agent's fault


class Severity(str, enum.Enum):
    """Compiler diagnostic severity."""

    ERROR = "error"
    WARNING = "warning"
    NOTE = "note"


@dataclass(frozen=True)
class Diagnostic:
    """One compiler message, located in the agent's file where possible."""

    severity: Severity
    message: str
    file: str = ""
    line: int = 0
    column: int = 0
    tool: str = ""  # nvcc, ptxas, nvrtc, c++, python


@dataclass(frozen=True)
class KernelResources:
    """ptxas's resource report for one compiled kernel."""

    kernel: str
    registers: int = 0
    shared_mem_bytes: int = 0
    constant_mem_bytes: int = 0
    stack_frame_bytes: int = 0
    spill_stores_bytes: int = 0
    spill_loads_bytes: int = 0


@dataclass(frozen=True)
class Isolation:
    """What confined the processes behind a result (hosts differ; nothing is assumed).

    Attributes:
        sandbox: The sandbox and its version (``bubblewrap 0.8.0``), or ``off`` when the user opted out.
        network_isolated: No network but a private loopback.
        filesystem_isolated: A private file-system view: only the job's own folder writable, no host files.
        pid_namespace: The host's other processes are invisible.
        limits: Resource limits applied, in words (``"address space 6 GiB"``).
        notes: Anything the user should know (an explicit opt-out).
    """

    sandbox: str = ""
    network_isolated: bool = False
    filesystem_isolated: bool = False
    pid_namespace: bool = False
    limits: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def confined(self) -> bool:
        """True when a sandbox with a private view and no network ran the process."""
        return self.network_isolated and self.filesystem_isolated


@dataclass(frozen=True)
class BuildResult:
    """What the build stage produced for one solution."""

    status: BuildStatus
    format: str
    message: str = ""
    diagnostics: tuple[Diagnostic, ...] = ()
    kernels: tuple[KernelResources, ...] = ()
    log: str = ""  # compiler output, capped
    wall_time_s: float = 0.0
    cached: bool = False  # every artifact came from the build cache
    artifact_key: str = ""  # content key of the built artifact; the GPU worker loads it by this key
    artifact_path: str = ""  # where the built artifact lies on the build host
    isolation: Isolation = field(default_factory=Isolation)  # what confined the compilers

    @property
    def ok(self) -> bool:
        """True when the solution built."""
        return self.status is BuildStatus.OK


@dataclass(frozen=True)
class InputCheck:
    """Correctness on one input set."""

    index: int
    seed: int
    passed: bool
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    mismatch_count: int = 0
    numel: int = 0
    first_mismatch_index: tuple[int, ...] = ()
    message: str = ""


@dataclass(frozen=True)
class TimingStats:
    """Timing of one implementation; ``runs == 0`` means not timed."""

    median_us: float = 0.0
    mean_us: float = 0.0
    min_us: float = 0.0
    max_us: float = 0.0
    iqr_us: float = 0.0
    ci95_halfwidth_pct: float = 0.0  # half-width of the median's 95% confidence interval, % of the median
    runs: int = 0

    @property
    def measured(self) -> bool:
        """True when this implementation was timed."""
        return self.runs > 0


@dataclass(frozen=True)
class Yardstick:
    """The reference timed in a runner before any candidate code loaded there: the speedups' yardstick.

    Attributes:
        time: Its timed calls there.
        late_calls: Of the calls timed one a request, those not queued before the judge's go (their times hold
            host time).
        calls: The calls timed one a request.
        disputed: Why the judge's clock disputes its on-time claims ("" where it agrees).
        eager_beside: Eager timed in the judge's process around it, half before and half after (unmeasured
            where the protocol takes none: ``Protocol.yardstick_beside_eager``).
    """

    time: TimingStats = field(default_factory=TimingStats)
    late_calls: int = 0
    calls: int = 0
    disputed: str = ""
    eager_beside: TimingStats = field(default_factory=TimingStats)

    @property
    def measured(self) -> bool:
        """True when the reference was timed in a runner."""
        return self.time.measured


@dataclass(frozen=True)
class KernelTime:
    """One GPU kernel's share of a forward pass, from the profiler."""

    name: str
    time_us: float  # per forward pass
    calls: int  # per forward pass
    share: float  # of the forward's total kernel time, 0..1


@dataclass(frozen=True)
class Violation:
    """A reward-hacking guard that fired."""

    guard: str
    message: str


@dataclass(frozen=True)
class Hardware:
    """Where a result was measured."""

    gpu: str = "none"
    compute_capability: str = ""
    driver: str = ""
    cuda: str = ""
    torch: str = ""
    l2_cache_bytes: int = 0


@dataclass(frozen=True)
class Precision:
    """Torch's precision switches that the baselines and the candidate ran under (the same for both)."""

    matmul_allow_tf32: bool = False  # torch.backends.cuda.matmul.allow_tf32
    cudnn_allow_tf32: bool = False  # torch.backends.cudnn.allow_tf32 (convolutions)
    float32_matmul_precision: str = "highest"  # torch.get_float32_matmul_precision()


@dataclass(frozen=True)
class EvalCost:
    """What one evaluation cost: peak device memory and wall time per phase (0 where a phase did not run).

    ``peak_device_memory_bytes`` is what the judging process held on the job's device at most: its caching
    allocator's peak reservation during the job (``torch.cuda.max_memory_reserved`` after emptying the cache
    and resetting the peak at its start), plus, in the trust split, the arenas it shares with the runner
    (``arena_bytes``, allocated outside torch's allocator). ``runner_peak_device_memory_bytes`` is the runner's
    own allocator peak, as the runner reports it (0 without a split). CUDA contexts (a few hundred MB per
    process) are in neither. The bounds (README, "Device memory is bounded"), R the larger of
    ``reference_peak`` and ``compiled_peak`` (the task's own need, eager or compiled): one process
    ``peak <= R + input_set + output_set``; in the split ``peak <= R + input_set + 2 * output_set`` (with a shared
    heap, ``R + input_set + output_set + heap``: its reserve is the output arena) and the runner's ``runner_peak
    <=`` the candidate's own need ``+ input_set + output_set``; each plus small buffers (the L2 flush, the chunked
    comparisons' temporaries: ``small_buffers_bytes``).
    """

    peak_device_memory_bytes: int = 0
    # the same peak counting live allocations only: the reserved peak less the allocator's cached, unused blocks
    # (which it gives back before it fails an allocation); 0 where not measured
    peak_allocated_bytes: int = 0
    device_memory_total_bytes: int = 0
    runner_peak_device_memory_bytes: int = 0  # the split's runner: its own allocator's peak (what it reported)
    arena_bytes: int = 0  # the split's shared arenas (input set, output set, signals) and heap, part of the peak above
    # the heap shared with the runner (cudagym.judge.split.heap; GPU path), part of arena_bytes: its reserve is the
    # output arena, the rest room for the runner's allocations (0 without one)
    heap_bytes: int = 0
    reference_peak_bytes: int = 0  # the peak once both models were built and the reference ran once, alone
    compiled_peak_bytes: int = 0  # torch.compile's warm-up: the compiled reference's run on one input set, alone
    input_set_bytes: int = 0  # one input set of the task
    output_set_bytes: int = 0  # the reference's outputs for one input set
    # the bounds' small buffers (0: not recorded): the L2 flush buffer and the most a chunked comparison of the
    # outputs holds beside them (cudagym.judge.harness.correctness.comparison_temporaries_bytes)
    small_buffers_bytes: int = 0
    load_s: float = 0.0  # the reference and the candidate module loaded, both models built
    check_s: float = 0.0  # correctness on the protocol's inputs, and the guards' extra checks
    timing_s: float = 0.0  # the timing loop, with torch.compile's compile and warm-up
    compile_s: float = 0.0  # torch.compile's first call (compiling the baseline), part of timing_s
    profile_s: float = 0.0  # the post-timing check and the per-kernel profile
    # the split's timed calls that the runner had not queued when the judge gave its go (a forward that waits for
    # the GPU inside): each timed by the judge's GPU bracket, not the runner's claim; of all such calls (warm-ups in)
    late_calls: int = 0  # the candidate's
    timed_calls: int = 0
    late_reference_calls: int = 0  # the yardstick's: the reference in a runner before any candidate loaded there
    reference_calls: int = 0
    # the split's audited forwards on the GPU gated in the runner (all but the candidate's first call), each behind
    # a gate the runner opens once its forward returned (and the side-stream check queued its reads): those whose
    # gate the judge opened itself after its arm wait (the forward was still on its host), of all of them
    late_audited_calls: int = 0
    audited_calls: int = 0


@dataclass(frozen=True)
class EvalResult:
    """The judge's verdict on one solution: build, correctness, guards and timing."""

    status: EvalStatus
    message: str = ""
    build: BuildResult = field(default_factory=lambda: BuildResult(BuildStatus.INVALID, ""))
    checks: tuple[InputCheck, ...] = ()
    violations: tuple[Violation, ...] = ()
    candidate: TimingStats = field(default_factory=TimingStats)
    eager: TimingStats = field(default_factory=TimingStats)
    compiled: TimingStats = field(default_factory=TimingStats)  # torch.compile baseline
    speedup_vs_eager: float = 0.0  # eager median / candidate median; 0 when not timed
    speedup_vs_compile: float = 0.0
    kernels: tuple[KernelTime, ...] = ()
    # the profiled forward's busy GPU time (its kernels' intervals' union: overlapping kernels once); 0 unprofiled
    kernel_busy_us: float = 0.0
    protocol_id: str = ""
    hardware: Hardware = field(default_factory=Hardware)
    wall_time_s: float = 0.0
    log: str = ""  # the candidate's stdout/stderr, capped
    isolation: Isolation = field(default_factory=Isolation)  # what confined the worker that ran the candidate
    precision: Precision = field(default_factory=Precision)
    cost: EvalCost = field(default_factory=EvalCost)
    # Facts the harness states as fields (readers fall back to the text forms of older harnesses):
    compile_failure: str = ""  # why the torch.compile baseline has no time (its exception line); "" otherwise
    context_poisoned: bool = False  # the candidate left the worker's CUDA context unusable: replace the process
    paired_speedup_vs_eager: float = 0.0  # median over interleaved rounds of eager / candidate; 0 when not timed
    paired_rounds: int = 0  # rounds behind paired_speedup_vs_eager
    # the reference timed in the candidate's runner before it loaded the candidate (a protocol's
    # runner_reference_runs): the speedups' yardstick; unmeasured under protocols without it
    runner_reference: TimingStats = field(default_factory=TimingStats)
    # why the judge's clock disputed that yardstick's on-time claims ("" where it agreed or none were on time)
    runner_reference_disputed: str = ""
    # what the judge multiplied eager's and torch.compile's times by to move them into the candidate's process (the
    # yardstick over eager's time here, or 1 where it was not taken or not trusted): the speedups above include it,
    # and the reward's tier (cudagym.reward.score) takes it too
    baseline_scale: float = 1.0
    # eager timed in the judge's process around that yardstick (Protocol.yardstick_beside_eager): the scale is then
    # the yardstick over it, two times taken together, and eager's time beside the candidate keeps its own drift
    eager_beside_yardstick: TimingStats = field(default_factory=TimingStats)
    notes: tuple[str, ...] = ()  # the harness's own notes (timing method, covers, ...), apart from ``log``

    @property
    def compiled_ok(self) -> bool:
        """True when the solution built."""
        return self.build.ok

    @property
    def correct(self) -> bool:
        """True when every input matched and no guard fired."""
        return self.status is EvalStatus.OK

    @property
    def timed(self) -> bool:
        """True when candidate and eager were both timed."""
        return self.candidate.measured and self.eager.measured

    @property
    def yardstick(self) -> Yardstick:
        """The reference's time in the candidate's runner with what decides its use (unmeasured where not taken)."""
        return Yardstick(self.runner_reference, self.cost.late_reference_calls, self.cost.reference_calls,
                         self.runner_reference_disputed, self.eager_beside_yardstick)


# ----------------------------------------------------------------------------------------------------
# Reading the facts above, from the field or (harnesses that still write text) from the text
# ----------------------------------------------------------------------------------------------------

_PAIRED = re.compile(r"paired speedup vs eager \(median of (\d+) per-round ratios\): ([0-9.]+)x")


def compile_failure(result: EvalResult) -> str:
    """Why the torch.compile baseline of ``result`` was not timed (``""`` when it was, or no reason is known)."""
    if result.compile_failure:
        return result.compile_failure
    from cudagym.judge.harness import COMPILE_FAILED_PREFIX  # a constant; the package imports no torch

    return result.message.partition(COMPILE_FAILED_PREFIX)[2].strip()


def context_poisoned(result: EvalResult) -> bool:
    """Whether ``result`` says its worker's CUDA context can no longer be trusted."""
    if result.context_poisoned:
        return True
    from cudagym.judge.harness import CONTEXT_POISONED_MARKER

    return CONTEXT_POISONED_MARKER in result.log or any(CONTEXT_POISONED_MARKER in n for n in result.notes)


def paired_speedup(result: EvalResult) -> tuple[float, int]:
    """The paired speedup vs eager and its number of rounds; ``(0.0, 0)`` when not measured."""
    if result.paired_rounds:
        return result.paired_speedup_vs_eager, result.paired_rounds
    for text in (*result.notes, result.log):
        found = _PAIRED.search(text)
        if found:
            return float(found.group(2)), int(found.group(1))
    return 0.0, 0


def to_dict(record: Any) -> Any:
    """JSON-serialisable form of a record (enums as their values, tuples as lists)."""
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        return {f.name: to_dict(getattr(record, f.name)) for f in dataclasses.fields(record)}
    if isinstance(record, enum.Enum):
        return record.value
    if isinstance(record, (list, tuple)):
        return [to_dict(x) for x in record]
    if isinstance(record, dict):
        return {str(k): to_dict(v) for k, v in record.items()}
    return record


def from_dict(cls: type[R], data: Any) -> R:
    """Inverse of :func:`to_dict` for the record classes of this module."""
    return typing.cast(R, _decode(cls, data))


def _decode(tp: Any, data: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin is tuple:
        (item_tp, _ellipsis) = typing.get_args(tp)
        return tuple(_decode(item_tp, x) for x in data)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(data)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        hints = typing.get_type_hints(tp)
        return tp(**{k: _decode(hints[k], v) for k, v in data.items() if k in hints})
    return data


def no_gpu_verdict(build: BuildResult, *, protocol_id: str, hardware: Hardware | None = None, reason: str = "",
                   wall_time_s: float = 0.0) -> EvalResult:
    """The one verdict of a judge without a GPU: the build ran, nothing was checked or timed.

    ``NO_GPU`` is not the agent's fault, so it is never scored; the build is attached for its diagnostics.
    """
    why = f": {reason}" if reason else ""
    built = "built" if build.ok else f"the build failed ({build.status.value})"
    return EvalResult(EvalStatus.NO_GPU, f"{built}, but not checked or timed: this judge has no GPU{why}", build=build,
                      protocol_id=protocol_id, hardware=hardware or Hardware(), wall_time_s=wall_time_s)
