"""decoy_kernels: the candidate's own kernels (or the libraries it may call) must do the forward's GPU work.

A decoy solution compiles a kernel that never runs, or runs a trivial one, while torch does the work out of
sight of the dispatcher audit (a CUDA graph captured from torch ops, a torch.compile'd function). The
profiler sees every kernel. Each kernel of a profiled forward is classed by name:

- *torch*: torch's own kernels (``at::native::``, ``c10::``, ``at_cuda_detail``, inductor's ``triton_*``);
- *library*: cuBLAS / cuBLASLt / CUTLASS GEMMs and cuDNN convolutions (allowed when the candidate calls them
  from its C++: they dispatch no torch operator);
- *moves*: memory copies, memsets and torch's fill and copy kernels (allocation and layout; neutral);
- *own*: everything else.

Violation when own + library kernels account for less than half of the forward's GPU time without the
moves, or when the build compiled kernels and none of the forward's kernels is own or library. Checked on
the profile taken after timing (after the candidate's many calls) and on its retake where the fit below takes one,
or after correctness in VERIFY mode.

The profiled forwards must also be the ones that were timed: their outputs are checked like timed ones (a wrong
answer while profiled is INCORRECT), and after timing (CUDA events) they may not keep the GPU busy for more than
:data:`PROFILE_OVER_TIMED_MAX` times the timed median plus :data:`PROFILE_OVER_TIMED_SLACK_US` per forward, in a
profile and in its retake: a forward that runs slower kernels while a profiler watches than when timed was timed
doing other work. (A timed call is bracketed around its kernels and runs on a flushed L2, so an honest one is never
faster than its kernels. Busy time is the union of the kernels' intervals: overlapping kernels, on several streams
or on one, count once.)

Library kernels count as the candidate's only where its sources name a vendor library (cuBLAS, cuBLASLt,
CUTLASS/CuTe, cuDNN, cuFFT, or CuPy, whose matmul is cuBLAS's); otherwise they came from torch (a
``matmul`` in a forward that stepped out of the dispatcher audit) and count as torch's. A kernel the build
compiled (its name, demangled, in the build's kernel list) is the candidate's whatever it is called.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING

from cudagym.judge.guards.base import Guard, register

if TYPE_CHECKING:  # pragma: no cover
    from cudagym.judge.harness.context import EvalContext
    from cudagym.judge.harness.profiling import DeviceEvent, KernelProfile

MIN_OWN_SHARE = 0.5
PROFILE_OVER_TIMED_MAX = 1.5  # the profiled forward's busy GPU time over the timed median, at most
PROFILE_OVER_TIMED_SLACK_US = 10.0

# torch's kernels all live in at::/c10:: namespaces; inductor names its generated kernels triton_*.
TORCH_KERNELS = re.compile(r"\bat::|\bc10::|at_cuda_detail|^triton_")
LIBRARY_KERNELS = re.compile(r"cublas|cutlass|gemm|gemv|nvjet|xmma|sm\d+_|ampere_|hopper_|volta_|turing_"
                             r"|cudnn|conv|winograd|fft|implicit_|splitKreduce|dot_kernel|scal_kernel",
                             re.IGNORECASE)
MOVE_KERNELS = re.compile(r"^Memcpy|^Memset|FillFunctor|fill_kernel|copy_kernel|CopyFunctor|direct_copy")
# what a source names when it calls a vendor library itself (C++ headers and calls, CuPy from Python)
LIBRARY_CALLS = re.compile(r"cublas|cutlass|\bcute\b|cudnn|cufft|\bcupy\b", re.IGNORECASE)


def classify(name: str) -> str:
    """``moves``, ``torch``, ``library`` or ``own`` for a kernel name from the profiler."""
    if MOVE_KERNELS.search(name):
        return "moves"
    if TORCH_KERNELS.search(name):
        return "torch"
    if LIBRARY_KERNELS.search(name):
        return "library"
    return "own"


@register
class DecoyKernels(Guard):
    """Kernels that are compiled but do not do the work."""

    name = "decoy_kernels"
    summary = "your kernels (or cuBLAS/cuDNN called from them) must do most of the forward's GPU time"
    order = 85

    def after_correctness(self, ctx: EvalContext) -> None:
        """Kernel mix of the forward, profiled after the correctness runs (VERIFY; else after timing)."""
        from cudagym.judge.interface import EvalMode

        if ctx.job.mode is EvalMode.VERIFY:  # PROFILE/SUBMIT profile once, after timing
            self._check(ctx, "after the correctness runs")

    def after_timing(self, ctx: EvalContext) -> None:
        """Kernel mix of the forward, profiled after timing, and whether those kernels fit the timed calls."""
        self._check(ctx, "after timing")
        if not ctx.on_gpu or ctx.protocol.timing != "cuda_events":
            return
        cand = ctx.timed.get("candidate")
        if cand is None or not cand.measured:
            return
        first = ctx.kernel_profile()
        note, problem = judge_profile_fit(first, cand.median_us)
        if problem:  # once more: another process's work sharing the GPU slows one profile, not a decoy's retake too
            ctx.forget_kernel_events()
            # the retake is held to the kernel mix as well: a forward that counts its profiles could show its own
            # kernels to the first and torch's (fast enough to fit) to the second
            self._check(ctx, "after timing, in the profile's retake")
            note, problem = judge_profile_fit(ctx.kernel_profile(), cand.median_us)
            note += (f" (a retake: the first profile kept it busy {first.busy_per_forward_us:.1f} us, "
                     f"{first.busy_per_forward_us / cand.median_us:.3f}x)")
        ctx.note(f"decoy_kernels: {note}")
        if problem:
            ctx.flag(self.name, problem)

    def _check(self, ctx: EvalContext, when: str) -> None:
        if not ctx.on_gpu:
            return
        built = [k.kernel for k in ctx.job.build.kernels]
        message = judge_kernel_mix(ctx.kernel_events(), built_kernels=len(built),
                                   libraries_called=calls_libraries(ctx.job.solution.files.values()),
                                   own_names=kernel_identifiers(built))
        if message:
            ctx.flag(self.name, f"{message} ({when})")


def calls_libraries(sources: Iterable[str]) -> bool:
    """Whether any of the candidate's files names a vendor library it could call itself."""
    return any(LIBRARY_CALLS.search(text) for text in sources)


def kernel_identifiers(names: Iterable[str]) -> set[str]:
    """The function names of compiled kernels, as a profiler's demangled name spells them.

    The build lists them demangled (``(anonymous namespace)::gemm_gelu_kernel(float const*, int)`` ->
    ``gemm_gelu_kernel``), mangled (``_Z12swish_kernelPKfPfx`` -> ``swish_kernel``) or as ``extern "C"``
    names (as is). Names under 3 characters are left out: too short to mean anything alone.
    """
    found = set()
    for name in names:
        ident = _mangled_name(name) if name.startswith("_Z") else _demangled_name(name)
        if len(ident) >= 3:
            found.add(ident)
    return found


def _mangled_name(name: str) -> str:
    nested = name.startswith("_ZN")
    rest, last = name[3:] if nested else name[2:], ""
    while (m := re.match(r"(\d+)", rest)) is not None:
        size = int(m.group(1))
        last, rest = rest[m.end():m.end() + size], rest[m.end() + size:]
        if not nested:
            break
    return last


def _demangled_name(name: str) -> str:
    text = name.replace("(anonymous namespace)", "").split("(", 1)[0]
    while (shorter := re.sub(r"<[^<>]*>", "", text)) != text:  # template arguments, innermost first
        text = shorter
    words = text.split("::")[-1].split()
    return words[-1] if words else ""


def judge_kernel_mix(events: list[DeviceEvent], built_kernels: int, libraries_called: bool = True,
                     own_names: Collection[str] = ()) -> str:
    """Why a forward's kernels are a decoy (``""`` when they are not).

    ``libraries_called``: whether the candidate's sources name a vendor library (else library kernels are
    torch's); ``own_names``: the compiled kernels' function names (a kernel so named is the candidate's).
    """
    time_by_class = {"own": 0.0, "library": 0.0, "torch": 0.0, "moves": 0.0}
    torch_names: dict[str, float] = {}
    own_pattern = re.compile("|".join(rf"\b{re.escape(n)}\b" for n in sorted(own_names))) if own_names else None
    from cudagym.judge.harness.profiling import OTHER

    for event in events:
        kind = "moves" if event.is_memory_op else classify(event.name)
        if event.name == OTHER:
            kind = "torch"  # the smallest rows of a long profile, summed: not shown to be the candidate's
        if kind == "library" and own_pattern is not None and own_pattern.search(event.name):
            kind = "own"
        elif kind == "library" and not libraries_called:
            kind = "torch"  # cuBLAS or cuDNN that the candidate's sources never call: torch called it
        time_by_class[kind] += event.duration_us
        if kind == "torch":
            torch_names[event.name] = torch_names.get(event.name, 0.0) + event.duration_us
    work = time_by_class["own"] + time_by_class["library"] + time_by_class["torch"]
    if work <= 0:
        return ""  # nothing but copies: no compute to attribute
    share = (time_by_class["own"] + time_by_class["library"]) / work
    top = sorted(torch_names, key=lambda n: torch_names[n], reverse=True)[:3]
    shown = "; ".join(name[:120] for name in top)
    if built_kernels and time_by_class["own"] == 0 and time_by_class["library"] == 0:
        return f"none of the {built_kernels} compiled kernel(s) ran; torch's kernels did the work ({shown})"
    if share < MIN_OWN_SHARE:
        library = "" if libraries_called else " (cuBLAS/cuDNN kernels count as torch's: your sources call neither)"
        return (f"your kernels and cuBLAS/cuDNN did only {100 * share:.0f}% of the forward's GPU time; torch's "
                f"kernels did the rest ({shown}){library}")
    return ""


def judge_profile_fit(profile: KernelProfile, timed_median_us: float) -> tuple[str, str]:
    """What the profiled forwards' busy GPU time per forward is next to the timed median, and why it cannot be one.

    Returns a note (always) and a problem (``""`` unless the GPU was busy for more than
    :data:`PROFILE_OVER_TIMED_MAX` times the timed median plus :data:`PROFILE_OVER_TIMED_SLACK_US` per profiled
    forward). Busy time is the union of the kernels' intervals, so kernels that overlap (on several streams, or
    on one) count once.
    """
    if profile.repeats <= 0 or timed_median_us <= 0:
        return "no profile or timing to set side by side", ""
    busy, summed = profile.busy_per_forward_us, profile.summed_per_forward_us
    ratio = busy / timed_median_us
    streams = len({e.stream for e in profile.events})
    note = (f"the profiled forward kept the GPU busy {busy:.1f} us, {ratio:.3f}x its timed median "
            f"({timed_median_us:.1f} us), on {streams} stream(s); its kernels summed {summed:.1f} us")
    if busy > PROFILE_OVER_TIMED_MAX * timed_median_us + PROFILE_OVER_TIMED_SLACK_US:
        return note, (f"the profiled forward kept the GPU busy {busy:.1f} us but its timed median is "
                      f"{timed_median_us:.1f} us (at most {PROFILE_OVER_TIMED_MAX:g}x + "
                      f"{PROFILE_OVER_TIMED_SLACK_US:g} us, in two profiles): the timed calls ran other work than "
                      f"the profiled ones")
    return note, ""
