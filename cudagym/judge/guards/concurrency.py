"""side_stream and host_threads: work that escapes the timed region.

side_stream. CUDA events are recorded on the current stream; work the candidate queues on another stream
without making the current stream wait for it finishes after the end event, so the events undercount it.
The timer's device-wide synchronize still waits for it, so it shows in the host wall time. Three checks:

- after each audited forward, before anything synchronises: the current stream must be the one the
  forward started on (a forward that switches streams is flagged, and the stream restored); then the
  harness snapshots the outputs as soon as that stream is done, synchronises the device and compares: outputs
  that changed after the forward's stream was done were still being written by escaped work. The snapshot
  is taken twice: pieces of each output at random places, copied to the host by the copy engine (queued on the
  forward's stream before the harness waits, so they run with no host latency behind its work), and a full
  copy on the GPU, after the wait for that stream. A full copy is a kernel, which cannot start while escaped
  work holds every SM (the planted side-stream hack's kernel fills the GPU and idles first, and its full copy
  was taken after it ended, on the H100: 2026-12-07); the copy engine needs no SM;
- after timing (CUDA events timer): the host wall time minus the event time (the part of the call the
  events did not see) must stay small: its 20th percentile over the timed calls above ``max(100 us, half the
  event time)``, and more than three times the eager baseline's (when timed in the same run), is escaped work.

A side stream that the candidate joins back (``wait_stream`` / ``cudaStreamWaitEvent``) is legitimate and
passes: the events then cover it.

host_threads. Extra host threads can do work after the forward returned. Static: importing ``threading``,
``_thread``, ``multiprocessing``, ``concurrent.futures`` or ``asyncio`` in ``model_new.py``, or ``std::thread``,
``pthread_create``, ``std::async`` in C++. Run time: Python threads started by the candidate (alive after
loading or after a forward), and native threads created during a forward (new entries of
``/proc/self/task`` still alive when the forward returned, except those the CUDA driver names ``cuda*``).
"""

from __future__ import annotations

import os
import re
import secrets
import sys
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cudagym.judge.guards.base import Guard, register
from cudagym.judge.guards.source_scan import PYTHON_FILE, all_cpp, imported_modules, parse_python, strip_cpp

if TYPE_CHECKING:  # pragma: no cover
    from cudagym.judge.harness.context import EvalContext, ForwardCall

TAIL_FLOOR_US = 100.0  # escaped work below this is indistinguishable from host jitter
TAIL_FRACTION = 0.5  # of the candidate's event time
TAIL_VS_EAGER = 3.0  # times the eager baseline's tail
# The tail of a call is taken at a low quantile of the timed calls, not the median: escaped work adds to every
# call it escapes from, while a busy host adds to some calls only (on the H200, beside other judges' builds, the
# bundled Swish's median tail was 157-338 us against events of 137 us, and honest SUBMITs were flagged)
TAIL_QUANTILE = 0.2

# The pieces of each output read by the copy engine right after the forward's stream is done, and again after the
# device is: at random places (a forward cannot know which to finish first), each at most PIECE_BYTES
PIECES = 32
PIECE_BYTES = 8192

THREAD_MODULES = frozenset({"threading", "_thread", "multiprocessing", "concurrent", "asyncio"})
# Threads the CUDA driver and profiler start on their own (named by them); a candidate's thread inherits
# the interpreter's name.
LIBRARY_THREADS = ("cuda", "CUPTI", "cupti", "nvrtc")
CPP_THREADS = re.compile(r"\bstd\s*::\s*(thread|jthread|async)\b|\bpthread_create\b")


@register
class SideStream(Guard):
    """GPU work on streams the timed region does not wait for."""

    name = "side_stream"
    summary = "all GPU work must finish on (or be joined to) the current stream before forward returns"
    order = 0  # its after_forward must run before any other hook synchronises the device
    # The forward's stream is held by the gate (the runner's, or the judge's own process's) until its pieces' reads
    # are queued: escaped work cannot start before them. Opened when the forward returned, the gate left the
    # cover-aware hack `ok` through the worker (H100, session 47); held until the reads are queued, it is named there
    # and, with the own process's gate, in the judge's process too (H100, session 48)
    reads_behind_gate = True

    def __init__(self) -> None:
        # pinned host memory the pieces are read into, sized by the first audited forward (the split's first call
        # is not gated): a page-locked allocation while the gate holds the stream could wait for it
        self._landing: Any = None

    def after_forward(self, ctx: EvalContext, call: ForwardCall) -> None:
        """Outputs must be final once the forward's stream is done."""
        if not ctx.on_gpu:
            return
        import torch

        from cudagym.judge.harness.inputs import bitwise_equal, clone_tree, tensors_in, trees_bitwise_equal
        from cudagym.judge.harness.integrity import PRISTINE

        now = PRISTINE.current_stream(ctx.device)
        if now != call.stream:
            ctx.flag(self.name, f"forward returned with a different current stream ({now}); it must leave "
                     "the caller's stream current")
            torch.cuda.set_stream(call.stream)
        pieces = sampled_pieces(tensors_in(call.outputs))
        # device to host by the copy engine, queued at once behind the forward's own work on its stream, before this
        # host waits for anything: each runs as soon as that stream is done, beside whatever holds the SMs then (read
        # after the host's wait, they came a host latency late); in the split's runner the gate holds the stream
        # until they are queued (reads_behind_gate)
        early = self._read_early(pieces)
        done = PRISTINE.event()
        PRISTINE.event_record(done, call.stream)
        ctx.open_gate()  # the split's gate (its launch cover) held the stream, and every SM, until these were queued
        PRISTINE.event_synchronize(done)  # the forward's stream is idle, its pieces read; other streams may not be
        snapshot = clone_tree(call.outputs)
        PRISTINE.sync(ctx.device)
        late = [piece.cpu().view(torch.uint8) for piece in pieces]
        if not all(bitwise_equal(a, b) for a, b in zip(early, late, strict=True)) or \
                not trees_bitwise_equal(snapshot, call.outputs):
            ctx.flag(self.name, "outputs were still being written after the forward's stream finished: work "
                     "on another stream was not joined to the current stream")

    def _read_early(self, pieces: list[Any]) -> list[Any]:
        """Each piece's bytes, copied to pinned host memory on the current stream (queued, not waited for)."""
        import torch

        sizes = [piece.numel() * piece.element_size() for piece in pieces]
        if self._landing is None or self._landing.numel() < sum(sizes):
            self._landing = torch.empty(max(sum(sizes), 1), dtype=torch.uint8, pin_memory=True)
        early, at = [], 0
        for piece, size in zip(pieces, sizes, strict=True):
            landing = self._landing[at:at + size]
            landing.copy_(piece.view(torch.uint8), non_blocking=True)  # a piece is a flat slice: contiguous
            early.append(landing)
            at += size
        return early

    def after_timing(self, ctx: EvalContext) -> None:
        """Host wall time that the CUDA events did not see is escaped work."""
        if not ctx.on_gpu or ctx.timing is None or ctx.protocol.timing != "cuda_events":
            return
        from cudagym.judge.harness.stats import median, quantile

        cand = ctx.timing.samples.get("candidate")
        if cand is None or not cand.time_us:
            return
        tail = quantile([w - t for w, t in zip(cand.wall_us, cand.time_us, strict=True)], TAIL_QUANTILE)
        event = median(cand.time_us)
        limit = max(TAIL_FLOOR_US, TAIL_FRACTION * event)
        eager = ctx.timing.samples.get("eager")
        if eager is not None and eager.time_us:
            eager_tail = quantile([w - t for w, t in zip(eager.wall_us, eager.time_us, strict=True)], TAIL_QUANTILE)
            limit = max(limit, TAIL_VS_EAGER * eager_tail)
        if tail > limit:
            ctx.flag(self.name, f"each timed call took {tail:.0f} us of host time that its CUDA events did not "
                     f"see (events {event:.0f} us; allowed {limit:.0f} us): work escaped the current stream")


@register
class HostThreads(Guard):
    """Extra host threads that keep working after the forward returns."""

    name = "host_threads"
    runner_hooks = frozenset({"after_correctness", "after_timing"})  # the candidate's threads live there
    summary = "no extra host threads or processes"

    def __init__(self) -> None:
        self._python_before: set[int] = set()

    def check_sources(self, ctx: EvalContext) -> None:
        """Flag thread APIs in the sources; remember the threads alive before loading."""
        self._python_before = {t.ident for t in threading.enumerate() if t.ident is not None}
        self.flag_findings(ctx, list(_static_findings(ctx.sources)))

    def after_load(self, ctx: EvalContext) -> None:
        """Python threads the candidate started while loading."""
        self._check_python(ctx, "loading", only_candidate=False)

    def forward_scope(self, ctx: EvalContext, call: ForwardCall) -> AbstractContextManager[Any] | None:
        """Native threads created during the forward and still alive after it."""
        return self._native_scope(ctx, call)

    def after_correctness(self, ctx: EvalContext) -> None:
        """Python threads started by the candidate's forwards."""
        self._check_python(ctx, "the correctness runs", only_candidate=False)

    def after_timing(self, ctx: EvalContext) -> None:
        """Python threads running the candidate's code after timing (torch.compile starts its own)."""
        self._check_python(ctx, "timing", only_candidate=True)

    @contextmanager
    def _native_scope(self, ctx: EvalContext, call: ForwardCall) -> Iterator[None]:
        before = native_threads()
        yield
        new = [tid for tid in native_threads() - before if not _thread_name(tid).startswith(LIBRARY_THREADS)]
        if new:
            ctx.flag(self.name, f"the forward started {len(new)} native thread(s) that outlived it")

    def _check_python(self, ctx: EvalContext, stage: str, only_candidate: bool) -> None:
        new = [t for t in threading.enumerate() if t.ident not in self._python_before and t.is_alive()]
        if only_candidate:
            new = [t for t in new if _runs_candidate_code(t, ctx.workdir)]
        if new:
            names = ", ".join(t.name for t in new[:5])
            ctx.flag(self.name, f"extra Python threads are running after {stage}: {names}")


def sampled_pieces(tensors: list[Any], pieces: int = PIECES, piece_bytes: int = PIECE_BYTES,
                   devices: tuple[str, ...] = ("cuda",)) -> list[Any]:
    """Views of about ``pieces`` pieces of the contiguous tensors on ``devices``, shared out, in the order to read.

    Each tensor's last and first pieces are always among its own (two at least) and come first: escaped work that
    writes front to back (or back to front) is behind on one of them. The others lie at random places and follow
    in random order, so no order of writing keeps ahead of the reads. A tensor no larger than its share of pieces
    together is one piece. Other tensors give none (the full copy of the outputs still covers them).
    """
    tensors = [t for t in tensors if t.device.type in devices and t.is_contiguous() and t.numel() > 0]
    share = max(2, pieces // max(1, len(tensors)))
    ends, middles = [], []
    for tensor in tensors:
        flat = tensor.reshape(-1)  # a view: the tensor is contiguous
        size = max(1, piece_bytes // tensor.element_size())
        count = flat.numel()
        if count <= size * share:
            ends.append(flat)
            continue
        ends += [flat[count - size:], flat[:size]]
        middles += [flat[start:start + size] for start in
                    {secrets.randbelow(count - size + 1) for _ in range(share - 2)} - {0, count - size}]
    secrets.SystemRandom().shuffle(middles)
    return ends + middles


def native_threads() -> set[int]:
    """Thread ids of this process (Linux ``/proc/self/task``; empty elsewhere)."""
    try:
        return {int(tid) for tid in os.listdir("/proc/self/task")}
    except OSError:
        return set()


def _thread_name(tid: int) -> str:
    try:
        return Path(f"/proc/self/task/{tid}/comm").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""


def _runs_candidate_code(thread: threading.Thread, workdir: Path) -> bool:
    root = str(workdir.resolve())
    target = getattr(thread, "_target", None)
    code = getattr(target, "__code__", None)
    if code is not None and code.co_filename.startswith(root):
        return True
    frame = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        if frame.f_code.co_filename.startswith(root):
            return True
        frame = frame.f_back
    return False


def _static_findings(sources: dict[str, str]) -> Iterator[str]:
    tree = parse_python(sources.get(PYTHON_FILE, ""))
    if tree is not None:
        for module, line in imported_modules(tree):
            if module.split(".")[0] in THREAD_MODULES:
                yield f"{PYTHON_FILE}:{line} imports {module}"
    for path, first_line, text in all_cpp(sources):
        for match in CPP_THREADS.finditer(strip_cpp(text)):
            line = first_line + text.count("\n", 0, match.start())
            yield f"{path}:{line} starts a host thread ({match.group(0)})"
