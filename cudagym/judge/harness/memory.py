"""Bounded device memory: chunked elementwise passes, the job's peak-memory meter, and what a task needs.

The bound (README, "Device memory is bounded"). With R the reference's own need (its weights, one input set,
its outputs and intermediates: the peak after the priming run, ``EvalCost.reference_peak_bytes``; or the
compile warm-up's, ``compiled_peak_bytes``, where torch.compile's generated code holds more), S one
input set and O one output set, ε the small buffers (the L2 flush buffer of twice the L2, the chunked passes'
temporaries of a few x 64 MB, the allocator's 2 MiB rounding):

- one process (no split; R then the larger of the reference's and the candidate's own needs):
  ``peak <= R + S + O + ε``;
- the split's trusted process, its arenas included: ``peak <= R + S + 2 O + ε``;
- the split's runner: ``peak <= C + S + O + ε``, C the candidate's own need on inputs it reads from the arena;
- the device: the two processes' peaks and one CUDA context per process (measured by the GPU test).

Device allocations alive at once, at each phase's peak, in the split (T the trusted process, N the runner):

=====================  ===========================================================  =====================
phase                  alive at the peak                                            beyond R (T) / C (N)
=====================  ===========================================================  =====================
priming (T)            models, the priming set, the reference's intermediates and   T: none (the set's
                       outputs; the set's digest before and after the run tells    digest, chunked;
                       whether the reference writes its inputs (before: a fresh     before: + S, 15
                       draw compared with it, a second set beside R)                KernelBench L1 tasks)
calibration (T, N)     T: the arenas (S + O), no copy of the empty calls' outputs   T: S + O; N: O
                       (before: one per call, two alive at once across the loop,
                       the split's whole excess on the H200 with the L2 flush
                       buffer below); N: zeros of the outputs' shapes, released
                       before the candidate loads
reference timed (N)    where the protocol takes the yardstick in the runner         N: its own R (the
                       (``runner_reference_runs``): the reference's model and one   inputs are the
                       run on the arena's views, its outputs copied into the        arena's views),
                       output arena; model and cache released before the            released before the
                       candidate loads                                              candidate loads
check (T)              the set (the reference's input), the candidate's outputs     T: S + 2 O
                       copied out of the output arena (O), the reference's run,
                       the arenas. No trusted copy of the inputs: the input arena
                       is the candidate's copy (before: + S)
check (N)              the candidate's run on the arena's views; the side_stream    N: O (guard only)
                       guard's snapshot of its outputs
extra checks (T)       scaled sets and hard_coding, as a check (a scaled set is     T: S + 2 O
                       first probed with the reference alone, in a function of
                       its own so the probe dies before the check; before: a
                       loop variable kept one of its tensors, + S, the 2 GiB
                       GPU test's whole excess in both processes)
result_cache (T)       the second set and the candidate's outputs; the first set    T: S + 2 O
                       is dropped before the reference runs (before: + S; then a
                       refill loop's variable kept it, + S, in one process)
float64 probe (T)      a float64 copy of the reference, its inputs, outputs and     about 2 R more: gated
                       intermediates, beside a check's tensors                      (below)
compile warm-up (T)    a fresh set and the compiled reference's run                 T: S (the arenas)
timed round (T)        the round's set (the baselines' input: they share it when    T: S + 2 O
                       the reference does not write its inputs; before: a copy
                       each), the candidate's outputs, one baseline's run, the
                       arenas; the L2 flush buffer, allocated on an emptied cache
                       before the loop, in the split before the first input set
                       (before: carved out of a free input-sized block, which
                       then held one more set's worth reserved)
timed round (N)        the candidate's run on the arena's views, the L2 flush       N: ε
spot check (T)         the round's set (the reference runs on it where it leaves    T: S + 2 O
                       its inputs alone), the candidate's outputs, the reference
profile (N)            the runner's own draw of a set and the candidate's runs      N: S
=====================  ===========================================================  =====================

Without the split the candidate's copy is a clone in the one process (S) and its outputs are its own (O):
R + S + O. Every other input set is generated when it is used and freed after; reference outputs never
outlive their comparison; comparisons, bitwise equality, poison counts and reductions walk tensors in chunks
of :data:`CHUNK_ELEMENTS`, so their temporaries are a few hundred MB whatever the output's size (a comparison:
about three 64 MB pieces and a mask at once; before in-place steps and boolean-mask-free maxima, eight, with
int64 indices twice a piece: the ~0.6 GiB beside the sets that the H200 measured).

A Python name left bound to a tensor (a loop variable after its loop, a local of a long function) keeps its
whole input set alive: the harness drops sets in functions that return before the next set is drawn. Each
phase's peak (load, check, compile warm-up, timing, profile) is in the result's log
(:meth:`DeviceMemoryMeter.end_phase`); ``benchmarks/memory_probe.py`` lists every live block at the peak with
the frames that allocated it (:mod:`cudagym.judge.harness.memhistory`).

The float64 precision probe is the one exception: a float64 reference needs about twice R. It runs only
where the device has twice the evaluation's peak so far free (``room_for``) and is skipped with a note
otherwise; its peak is in ``EvalCost.peak_device_memory_bytes`` like any other.

A KernelBench v0.2 level-1 task can have a 7 GiB input and output (``L1/36_RMSNorm_``); before this
bound the harness held every copy at once and ran out of an H200's 140 GiB on it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from cudagym.judge.harness.memhistory import record_from_env
from cudagym.judge.split.trace import trace

# Elements per chunk of an elementwise pass: 16M elements, 64 MB of fp32 per temporary.
CHUNK_ELEMENTS = 1 << 24

GIB = float(1 << 30)


def flat_chunks(*tensors: torch.Tensor, chunk: int | None = None) -> Iterator[tuple[int, list[torch.Tensor]]]:
    """Matching flat pieces of same-shaped tensors: ``(offset, [piece of each])`` in row-major order.

    Contiguous tensors are viewed flat and cut every ``chunk`` elements (no copy). Otherwise they are cut
    along their first dimension into runs of whole rows of about ``chunk`` elements (each piece is then a
    copy of that run only, never of the whole tensor).

    Args:
        tensors: Tensors of one shape.
        chunk: Elements per piece (at least 1; default :data:`CHUNK_ELEMENTS`, read at each call).
    """
    chunk = chunk or CHUNK_ELEMENTS
    first = tensors[0]
    numel = first.numel()
    if numel == 0:
        return
    if first.dim() == 0 or all(t.is_contiguous() for t in tensors):
        flats = [t.reshape(-1) for t in tensors]
        for start in range(0, numel, chunk):
            yield start, [f[start:start + chunk] for f in flats]
        return
    rows = first.shape[0]
    row = numel // rows
    step = max(1, chunk // max(row, 1))
    for start in range(0, rows, step):
        yield start * row, [t[start:start + step].reshape(-1) for t in tensors]


def count_where_not_finite(tensor: torch.Tensor) -> int:
    """NaN and Inf elements of a floating-point or complex tensor, counted chunk by chunk (0 for others)."""
    if not (tensor.is_floating_point() or tensor.is_complex()):
        return 0
    return sum(int((~torch.isfinite(piece)).sum().item()) for _, (piece,) in flat_chunks(tensor))


def count_equal(tensor: torch.Tensor, value: int | float) -> int:
    """Elements of ``tensor`` equal to ``value``, counted chunk by chunk (no full-size boolean temporary)."""
    return sum(int((piece == value).sum().item()) for _, (piece,) in flat_chunks(tensor))


def any_negative(tensor: torch.Tensor) -> bool:
    """Whether any element of ``tensor`` is below zero, chunk by chunk (stops at the first chunk with one)."""
    return any(bool((piece < 0).any()) for _, (piece,) in flat_chunks(tensor))


def chunked_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """``torch.equal`` of two same-shaped tensors, chunk by chunk (no full-size temporary)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() <= CHUNK_ELEMENTS:  # one piece: torch.equal's own temporary is small
        return bool(torch.equal(a, b))
    return all(bool(torch.equal(x, y)) for _, (x, y) in flat_chunks(a, b))


def float64_copy(piece: torch.Tensor) -> torch.Tensor:
    """A float64 copy of ``piece`` (always a copy: a float64 piece's ``.double()`` is itself), to work on in place."""
    return piece.to(torch.float64, copy=True)


@dataclass(frozen=True)
class Moments:
    """Mean and standard deviation (unbiased) of a tensor, and its largest magnitude, in float64."""

    mean: float
    std: float
    peak: float


def moments(tensor: torch.Tensor) -> Moments:
    """Two chunked passes in float64: the mean and largest magnitude, then the spread about the mean."""
    n = tensor.numel()
    total, peak = 0.0, 0.0
    for _, (piece,) in flat_chunks(tensor):
        x = float64_copy(piece)  # one float64 piece at a time: its magnitudes are taken in place, after its sum
        total += float(x.sum().item())
        peak = max(peak, float(x.abs_().max().item()))
        del x  # before the next piece's copy is made
    mean = total / n if n else 0.0
    squares = sum(float(float64_copy(piece).sub_(mean).pow_(2).sum().item()) for _, (piece,) in flat_chunks(tensor))
    return Moments(mean, (squares / (n - 1)) ** 0.5 if n > 1 else 0.0, peak)


def rms_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    """RMS of ``a - b`` in float64, chunk by chunk."""
    n = a.numel()
    if n == 0:
        return 0.0
    squares = sum(float(float64_copy(x).sub_(y).pow_(2).sum().item()) for _, (x, y) in flat_chunks(a, b))
    return (squares / n) ** 0.5


@dataclass
class DeviceMemoryMeter:
    """The job's peak device memory: the allocator's cache emptied and its peak reset when the job starts.

    The peak is ``torch.cuda.max_memory_reserved`` (what the job held through torch's allocator, which
    bounds what it allocated) plus what ``outside`` reports: device memory this process holds outside that
    allocator (the split's arenas, CUDA VMM allocations torch does not see), at its most. On the CPU test
    path it reads 0. The allocated peak (``torch.cuda.max_memory_allocated``, the same ``outside`` added) is what
    the job's live tensors needed at most: the reserved peak less the cache's unused blocks, which the allocator
    gives back and retries before it fails an allocation (a freed block that no later size fits counts in the
    reserved peak, not in this one).
    """

    device: torch.device
    total_bytes: int = 0
    outside: Callable[[], int] | None = None
    phase_peaks: dict[str, int] = field(default_factory=dict)  # torch's reserved peak per ended phase
    phase_allocated: dict[str, int] = field(default_factory=dict)  # torch's allocated peak per ended phase
    _ended_peak: int = 0  # the largest of those: torch's own counter restarts at each phase's end
    _ended_allocated: int = 0

    @classmethod
    def start(cls, device: torch.device, outside: Callable[[], int] | None = None) -> DeviceMemoryMeter:
        """Empty the cache and reset the peak on ``device`` (nothing on the CPU)."""
        if device.type != "cuda":
            return cls(device, outside=outside)
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        return cls(device, int(torch.cuda.get_device_properties(device).total_memory), outside)

    def peak_bytes(self) -> int:
        """Peak bytes held on the device since :meth:`start` (0 on the CPU or when unreadable)."""
        return self._peak(torch.cuda.max_memory_reserved, self._ended_peak)

    def peak_allocated_bytes(self) -> int:
        """Peak bytes of live allocations since :meth:`start`, ``outside`` included (0 on the CPU or unreadable)."""
        return self._peak(torch.cuda.max_memory_allocated, self._ended_allocated)

    def _peak(self, counter: Callable[[torch.device], int], ended: int) -> int:
        """The larger of torch's ``counter`` now and the ended phases' peak, plus what is held outside torch."""
        if self.device.type != "cuda":
            return 0
        try:
            now = int(counter(self.device))
        except Exception:  # a poisoned context cannot answer; the verdict must still come back
            now = 0
        return max(now, ended) + (self.outside() if self.outside is not None else 0)

    def end_phase(self, name: str, min_cached_bytes: int = 1 << 30) -> None:
        """Phase ``name`` is over: keep its peak, give cached blocks back (:meth:`release`), restart the count.

        Each phase's peak is torch's reserved bytes at their most during it (the arenas, outside torch, are
        the same in every phase); :meth:`peak_bytes` stays the evaluation's.
        """
        if self.device.type != "cuda":
            return
        try:
            peak = int(torch.cuda.max_memory_reserved(self.device))
            allocated = int(torch.cuda.max_memory_allocated(self.device))
            self.release(min_cached_bytes)
            torch.cuda.reset_peak_memory_stats(self.device)  # the next phase's peak starts from what is held now
        except Exception:  # a poisoned context: the verdict must still come back
            return
        self.phase_peaks[name] = max(self.phase_peaks.get(name, 0), peak)
        self.phase_allocated[name] = max(self.phase_allocated.get(name, 0), allocated)
        self._ended_peak = max(self._ended_peak, peak)
        self._ended_allocated = max(self._ended_allocated, allocated)

    def describe_phases(self) -> str:
        """``device memory by phase ...: load X GiB, check Y GiB, ...`` for the log (``""`` when none ended)."""
        if not self.phase_peaks:
            return ""
        beside = f"; arenas {self.outside() / GIB:.2f} GiB beside" if self.outside is not None else ""
        return (f"device memory by phase (peak reserved by this process's torch allocator, and allocated where "
                f"less{beside}): " + ", ".join(
                    f"{name} {peak / GIB:.2f} GiB" + _allocated_part(self.phase_allocated.get(name, peak), peak)
                    for name, peak in self.phase_peaks.items()))

    def room_for(self, nbytes: int) -> bool:
        """Whether ``nbytes`` more could be allocated now: free device memory plus the cache's free blocks."""
        if self.device.type != "cuda":
            return True
        free, _total = torch.cuda.mem_get_info(self.device)
        cached = torch.cuda.memory_reserved(self.device) - torch.cuda.memory_allocated(self.device)
        return nbytes <= free + cached

    def release(self, min_cached_bytes: int = 1 << 30) -> None:
        """Give cached blocks back between phases, so one phase's leftovers do not fragment the next.

        Only when the cache holds at least ``min_cached_bytes`` unused: small tasks keep their blocks (and skip
        the ``cudaMalloc`` calls of getting them back).
        """
        if self.device.type != "cuda":
            return
        if torch.cuda.memory_reserved(self.device) - torch.cuda.memory_allocated(self.device) >= min_cached_bytes:
            torch.cuda.empty_cache()

    def describe(self) -> str:
        """``peak X GiB of Y GiB`` for messages."""
        return f"peak {self.peak_bytes() / GIB:.2f} GiB of {self.total_bytes / GIB:.2f} GiB"

    def others_bytes(self, outside_now: int) -> int | None:
        """Device memory in use by every other process on this GPU now (None on the CPU or when unreadable).

        The device's own count (``cudaMemGetInfo``) less what this process holds through torch's allocator and
        ``outside_now`` beside it; this process's CUDA context stays in, a constant that cancels in a difference.
        """
        if self.device.type != "cuda":
            return None
        try:
            free, total = torch.cuda.mem_get_info(self.device)
            return int(total - free - torch.cuda.memory_reserved(self.device) - outside_now)
        except RuntimeError:
            return None


TAKEN_MARGIN_BYTES = 2 << 30  # beyond R + O: a spare runner's CUDA context starting meanwhile, allocator rounding


def memory_taken_beyond_bound(growth_bytes: int, reference_bytes: int, output_bytes: int) -> bool:
    """Whether other processes grew by more than a candidate's runner may hold: R + O and a margin.

    ``growth_bytes``: what the other processes on the GPU held more than when the candidate's code loaded in its
    runner. The runner may add its own need (a candidate doing the reference's work needs about the reference's
    ``reference_bytes``, R) and one output set (``output_bytes``, O); the margin holds a spare runner's CUDA
    context starting meanwhile (about 0.5 GiB on the H200) and the allocators' rounding. More than that, and a
    device the judge then ran out of was filled by the candidate, not by the task.
    """
    return growth_bytes > reference_bytes + output_bytes + TAKEN_MARGIN_BYTES


def _allocated_part(allocated: int, reserved: int) -> str:
    """`` (x.xx allocated)`` when the allocated peak is at least 0.01 GiB under the reserved one, else ``""``."""
    return f" ({allocated / GIB:.2f} allocated)" if reserved - allocated >= GIB // 100 else ""


@dataclass
class PhaseClock:
    """Wall time per phase of one evaluation, in seconds (a phase may be entered more than once)."""

    seconds: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Add the time spent in the ``with`` body to ``name``."""
        began = time.monotonic()
        trace("phase", name=name, begins=True)
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.monotonic() - began
            trace("phase", name=name, begins=False, seconds=time.monotonic() - began)

    def get(self, name: str) -> float:
        """Seconds spent in ``name`` (0.0 when it never ran)."""
        return self.seconds.get(name, 0.0)


# Probe mode only (benchmarks/memory_probe.py): a process started with CUDAGYM_MEMORY_HISTORY set records its
# CUDA allocations from the harness's import on (a runner: after it entered its sandbox). Unset: nothing.
record_from_env()
