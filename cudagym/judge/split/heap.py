"""Outputs read where the candidate left them: the heap a trusted process shares with its runner (GPU path).

A bracketed call's time is the trusted clock from its go to its done, less what an empty call costs there
(:func:`cudagym.judge.split.remote.on_time_charge`). When the runner delivered outputs by copying them into the
output arena, that copy was in both and cancelled out, but a runner writes its own rules: one that computed
straight into the arena's slot and skipped the copy saved the copy's time from a reading that had the copy's
cost taken off it (on a memory-bound task, where the copy costs what the kernel does, about all of the kernel's
time: a forged claim then stood). No step the runner performs can be forgiven so: whatever it is, a forward can
do its work there instead.

So the runner performs none. The trusted process allocates a heap (a CUDA VMM arena, :mod:`.arena`) and exports
it; the runner maps it and routes its torch allocations there while it answers requests (a
``torch.cuda.MemPool`` over a small allocator, ``heap.c``, that hands out the heap's spans; its first bytes, the
reserve, serve as the runner's output arena). Outputs a forward makes are then already in memory the trusted
process can read. After each call the runner writes, on the call's
stream before its done, one word per output: where it lies in the heap (in units of :data:`HEAP_ALIGN`). The
trusted stream, once it has seen the done, copies each output from there itself (:func:`gather`): checked
against the heap's bounds, with nothing but the offset taken from the runner. An empty call costs what an honest
one does beyond its forward (the words), and writing in place saves nothing: nobody copies.

An output that is not a contiguous tensor in the heap (made on another thread, by another allocator, in a CUDA
graph's own pool, a view of something else) is copied by the runner into a region of the heap kept for that
(:func:`reserve_layout`), inside the call's own time: the candidate's choice, and its cost.

The trusted side resets every word to :data:`INVALID` before it gives the go, so a runner must write each call's
words in that call; an offset that is missing or out of bounds makes that call's outputs the candidate's failure.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from cudagym.judge.split.arena import Slot
from cudagym.judge.split.signals import SIGNAL_BYTES

HEAP_ALIGN = 512  # bytes: every offset a word carries is a multiple of this (torch's blocks are 512-aligned)
INVALID = 0xFFFFFFFF  # a word the runner has not written in this call
MAX_OUTPUTS = 256  # output tensors one call can deliver through the heap (a task with more delivers by copy)
DESCRIPTORS = 1024  # byte offset of the words in the signals arena (after GO, DONE, ARMED, GATE)
MAX_CALLS = 64  # calls of one request with words of their own (a series' most: runner.SERIES_MAX_CALLS)
DESCRIPTOR_BYTES = MAX_CALLS * MAX_OUTPUTS * 4
assert DESCRIPTORS + DESCRIPTOR_BYTES <= SIGNAL_BYTES, "the signals arena holds every call's words"
HEAP_MIN_BYTES = 1 << 30  # the least heap beside the reserve: the forward's own allocations go here too
GATHER_CHUNK = 1 << 22  # elements copied by one gather kernel (its index vector is this long)
ALLOC_FN, FREE_FN = "cudagym_heap_alloc", "cudagym_heap_free"  # heap.c's entry points torch calls


class HeapError(RuntimeError):
    """The heap's allocator could not be built or loaded."""


def descriptor_word(call: int, output: int) -> int:
    """Index, in the signals arena seen as 32-bit words, of the word for output ``output`` of call ``call``."""
    if not (0 <= call < MAX_CALLS and 0 <= output < MAX_OUTPUTS):
        raise ValueError(f"no descriptor word for call {call}, output {output}")
    return DESCRIPTORS // 4 + call * MAX_OUTPUTS + output


def _aligned(n: int, to: int = HEAP_ALIGN) -> int:
    return -(-n // to) * to


def reserve_layout(slots: list[Slot]) -> tuple[list[int], int]:
    """Where the runner copies outputs that are not in the heap (offsets from the heap's start) and the bytes."""
    offsets, at = [], 0
    for slot in slots:
        offsets.append(at)
        at += _aligned(slot.nbytes)
    return offsets, at


def heap_bytes(output_bytes: int, reserve_bytes: int, need_bytes: int = 0) -> int:
    """The heap for a task whose one output set takes ``output_bytes``: the reserve, then the allocator's room.

    The reserve is also the runner's output arena (the audited calls' copies), so it takes the place of that
    arena. The room holds ``need_bytes`` (what the reference needs beside its input set: its weights, intermediates
    and outputs, which the runner's timed reference calls allocate there) or one output set, whichever is more, and
    half an output set beside, or :data:`HEAP_MIN_BYTES`. What a forward allocates beyond it comes from
    ``cuMemAlloc`` in the runner, as all of it did before (an output made there is copied into the reserve, in its
    call's time), so the heap adds at most its unused room to the device's load.
    """
    room = max(need_bytes, output_bytes) + output_bytes // 2
    return reserve_bytes + max(HEAP_MIN_BYTES, _aligned(room))


SPAN_ALIGN = 2 << 20  # the heap's reserve and sizes round up to this (the VMM allocation's granularity)


def heap_sizes(slots: list[Slot], output_bytes: int, need_bytes: int = 0) -> tuple[int, tuple[int, int]]:
    """The reserve for outputs ``slots``, then the heaps to try in turn: :func:`heap_bytes`, else one output set."""
    reserve = _aligned(reserve_layout(slots)[1], SPAN_ALIGN)
    one_set = reserve + _aligned(max(output_bytes, 1), SPAN_ALIGN)
    return reserve, (heap_bytes(output_bytes, reserve, need_bytes), one_set)


# ----------------------------------------------------------------------------------------------- the allocator


def _source() -> bytes:
    return (resources.files("cudagym.judge.split") / "heap.c").read_bytes()


def library_path(folder: Path | None = None) -> Path:
    """The heap's allocator built for this host (a shared library), built once and kept by its source's hash.

    Kept under ``folder`` (default: ``heap/`` in the user cache folder, else a temporary folder).

    Raises:
        HeapError: No C compiler (``$CC``, ``cc`` or ``gcc``), or it failed.
    """
    source = _source()
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or ""
    if not compiler:
        raise HeapError("the judge builds a small allocator for the GPU runner's shared heap and needs a C compiler "
                        "for it: expected cc or gcc on PATH, or $CC (the CUDA toolkit's nvcc needs one as well)")
    digest = hashlib.sha256(source + b"\0" + compiler.encode()).hexdigest()[:16]
    candidates = [folder] if folder is not None else [_cache_folder(), Path(tempfile.gettempdir()) / "cudagym-heap"]
    problem = ""
    for where in candidates:
        target = where / f"heap-{digest}.so"
        if target.is_file():
            return target
        try:
            where.mkdir(parents=True, exist_ok=True)
            return _build(compiler, source, target)
        except OSError as exc:
            problem = f"{where}: {exc.strerror or exc}"
    raise HeapError(f"could not write the heap's allocator ({problem})")


def _cache_folder() -> Path:
    from cudagym.paths import user_cache_dir

    return user_cache_dir() / "heap"


def _build(compiler: str, source: bytes, target: Path) -> Path:
    with tempfile.TemporaryDirectory(dir=target.parent) as work:
        src = Path(work) / "heap.c"
        src.write_bytes(source)
        built = Path(work) / target.name
        try:
            done = subprocess.run([compiler, "-O2", "-std=c11", "-D_GNU_SOURCE", "-shared", "-fPIC", "-o", str(built),
                                   str(src), "-ldl", "-lpthread"], capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise HeapError(f"could not run the C compiler {compiler} for the heap's allocator: {exc}") from None
        if done.returncode != 0:
            raise HeapError(f"the C compiler {compiler} failed on the heap's allocator: {done.stderr.strip()[-1500:]}")
        os.replace(built, target)  # atomic: two workers building at once both leave a whole library
    return target


_BUILT: dict[str, Path] = {}  # library_path's answers in this process, by folder ("" the default)


def library_fd(folder: Path | None = None) -> int:
    """A read-only descriptor of :func:`library_path` (passed to the runner, which loads it through ``/proc``).

    The path is looked up once per process and folder; a library removed since is built again.
    """
    key = str(folder or "")
    path = _BUILT.get(key)
    if path is None or not path.is_file():
        path = _BUILT[key] = library_path(folder)
    return os.open(path, os.O_RDONLY | os.O_CLOEXEC)


class Allocator:
    """The allocator library loaded in this process: its bookkeeping, without torch (what the tests drive)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        import ctypes

        try:
            self.lib = ctypes.CDLL(str(path))
        except OSError as exc:
            raise HeapError(f"could not load the heap's allocator: {exc}") from None
        self.path = str(path)
        self.lib.cudagym_heap_init.argtypes = [ctypes.c_uint64, ctypes.c_uint64]
        self.lib.cudagym_heap_init.restype = ctypes.c_int
        self.lib.cudagym_heap_alloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
        self.lib.cudagym_heap_alloc.restype = ctypes.c_void_p
        self.lib.cudagym_heap_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        self.lib.cudagym_heap_free.restype = None
        self.lib.cudagym_heap_stats.argtypes = [ctypes.POINTER(ctypes.c_uint64)]
        self.lib.cudagym_heap_stats.restype = None
        self._stats = (ctypes.c_uint64 * 6)()

    def init(self, base: int, size: int) -> None:
        """Hand it the heap ``[base, base + size)`` (once)."""
        if self.lib.cudagym_heap_init(base, size) != 0:
            raise HeapError(f"the heap's allocator refused the range {base:#x} + {size} (given one already?)")

    def alloc(self, size: int) -> int:
        """A span of at least ``size`` bytes (0: none)."""
        return int(self.lib.cudagym_heap_alloc(size, 0, None) or 0)

    def free(self, ptr: int) -> None:
        """Give a span back."""
        self.lib.cudagym_heap_free(ptr, 0, 0, None)

    def stats(self) -> dict[str, int]:
        """Bytes in use, their peak, bytes and segments taken outside the heap, failed allocations, free spans."""
        self.lib.cudagym_heap_stats(self._stats)
        keys = ("in_use", "peak", "outside_bytes", "outside_segments", "failed", "free_spans")
        return dict(zip(keys, (int(v) for v in self._stats), strict=True))


# ----------------------------------------------------------------------------------------------- the runner's side


def heap_offset(tensor: Any, slot: Slot, base: int, size: int, device: torch.device) -> int | None:
    """Where ``tensor`` lies in the heap ``[base, base + size)`` as output ``slot`` (bytes), or ``None`` if not there.

    Only a dense, contiguous tensor of the slot's shape and dtype on the heap's device, starting on a
    :data:`HEAP_ALIGN` boundary, wholly inside the heap, is read in place.
    """
    if not isinstance(tensor, torch.Tensor) or tensor.layout != torch.strided or tensor.is_meta:
        return None
    if tensor.device != device or tuple(tensor.shape) != slot.shape:
        return None
    if str(tensor.dtype).removeprefix("torch.") != slot.dtype:
        return None
    if not tensor.is_contiguous() or tensor.is_conj() or tensor.is_neg():
        return None
    offset = tensor.data_ptr() - base
    if offset < 0 or offset % HEAP_ALIGN or offset + slot.nbytes > size:
        return None
    return offset


class RunnerHeap:
    """The runner's view of the heap: its arena, the allocator over it and the torch pool that uses that.

    Args:
        arena: The heap as the runner mapped it.
        library: A path to the allocator library (``/proc/self/fd/N`` of the descriptor the judge passed).
        reserve_bytes: The heap's first bytes, kept for outputs the runner must copy (:func:`reserve_layout`).
    """

    def __init__(self, arena: Any, library: str, reserve_bytes: int) -> None:
        if not 0 <= reserve_bytes <= arena.size or reserve_bytes % HEAP_ALIGN:
            raise HeapError(f"a reserve of {reserve_bytes} bytes does not fit a heap of {arena.size}")
        self.arena = arena
        self.base = arena.tensor.data_ptr()
        self.size = arena.size
        self.device = arena.tensor.device
        self.reserve_bytes = reserve_bytes
        self.allocator = Allocator(library)
        self.allocator.init(self.base + reserve_bytes, self.size - reserve_bytes)
        try:
            pluggable = torch.cuda.memory.CUDAPluggableAllocator(library, ALLOC_FN, FREE_FN)
            self.pool = torch.cuda.MemPool(pluggable.allocator())
        except (AttributeError, RuntimeError, TypeError) as exc:
            raise HeapError(f"this torch cannot route allocations to a memory pool of its own ({exc}); the GPU "
                            "runner needs torch.cuda.MemPool with a pluggable allocator (torch 2.6 or later)") from None
        self.copied = 0  # outputs the runner copied into the reserve (not in the heap as made)
        self.routing = False  # whether the routing thread's allocations go to the heap now
        self.thread = threading.get_ident()  # the thread that routes (the runner's main thread)
        self._index = self.device.index if self.device.index is not None else torch.cuda.current_device()
        _guard_captures(self)

    @contextlib.contextmanager
    def routed(self) -> Iterator[None]:
        """This thread's CUDA allocations come from the heap while inside (not while it captures a CUDA graph)."""
        if self.routing:  # already inside
            yield
            return
        self.route(True)
        try:
            yield
        finally:
            if self.routing:
                self.route(False)

    def route(self, on: bool) -> None:
        """Start or stop routing this thread's allocations to the heap (what :meth:`routed` does)."""
        if on and not self.routing:
            torch._C._cuda_beginAllocateCurrentThreadToPool(self._index, self.pool.id)
            self.routing, self.thread = True, threading.get_ident()
        elif not on and self.routing:
            torch._C._cuda_endAllocateToPool(self._index, self.pool.id)
            torch._C._cuda_releasePool(self._index, self.pool.id)
            self.routing = False

    def offset_of(self, tensor: Any, slot: Slot) -> int | None:
        """:func:`heap_offset` in this heap."""
        return heap_offset(tensor, slot, self.base, self.size, self.device)

    def reserve_view(self, offset: int, slot: Slot) -> torch.Tensor:
        """The reserve's place for an output ``slot`` at ``offset`` (from :func:`reserve_layout`), as a tensor."""
        end = offset + slot.nbytes
        if offset < 0 or end > self.reserve_bytes:
            raise HeapError(f"output of {slot.nbytes} bytes at {offset} lies beyond the reserve")
        return self.arena.tensor[offset:end].view(getattr(torch, slot.dtype)).view(slot.shape)


_CAPTURED_HEAP: list[Any] = [None]  # the heap a capture leaves (the runner's)


def _guard_captures(heap: Any) -> None:
    """Stop routing to the heap while a CUDA graph is captured, and route again once it is.

    torch's allocator serves an allocation from the first pool whose filter takes it, in the order the pools
    began: the heap's, begun for the whole request, would take a capture's allocations from the graph's private
    pool, and their blocks, once freed, could be handed to tensors the graph then overwrites at each replay. So
    ``torch.cuda.CUDAGraph`` (``torch.cuda.graph``, ``make_graphed_callables`` and torch.compile's CUDA graphs all
    capture through it) leaves the heap while it captures: a graph's outputs lie in its own pool, and the runner
    copies them into the heap's reserve in their call's time.

    The class is patched once per process; the patch serves the heap given last (a runner has one; a process that
    made several, as the GPU tests do, guards the newest, and a heap made before it is left alone).
    """
    graph_class = torch.cuda.CUDAGraph
    _CAPTURED_HEAP[0] = heap
    if graph_class.__dict__.get("_cudagym_guarded"):
        return
    begin, end = graph_class.capture_begin, graph_class.capture_end

    def capture_begin(self: Any, *args: Any, **kwargs: Any) -> Any:
        held = _CAPTURED_HEAP[0]
        # another thread's capture is its own
        resume = held is not None and held.routing and threading.get_ident() == held.thread
        if resume:
            held.route(False)
        try:
            result = begin(self, *args, **kwargs)
        except BaseException:
            if resume:
                held.route(True)
            raise
        self.__dict__["_cudagym_resume"] = held if resume else None
        return result

    def capture_end(self: Any) -> Any:
        try:
            return end(self)
        finally:
            held = self.__dict__.pop("_cudagym_resume", None)
            if held is not None and threading.get_ident() == held.thread:
                held.route(True)

    graph_class.capture_begin = capture_begin  # type: ignore[method-assign]
    graph_class.capture_end = capture_end  # type: ignore[method-assign]
    graph_class._cudagym_guarded = True  # type: ignore[attr-defined]


# ----------------------------------------------------------------------------------------------- the trusted side

_ARANGE: dict[str, torch.Tensor] = {}
_WIDTHS = ((8, torch.int64), (4, torch.int32), (2, torch.int16), (1, torch.uint8))


def _arange(n: int, device: torch.device) -> torch.Tensor:
    key = str(device)
    have = _ARANGE.get(key)
    if have is None or have.numel() < n:
        have = _ARANGE[key] = torch.arange(max(n, 1), dtype=torch.int64, device=device)
    return have[:n]


def gather(heap: torch.Tensor, words: torch.Tensor, call: int,
           slots: list[Slot]) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Copy call ``call``'s outputs out of ``heap`` from where its words say (queued: no host wait).

    ``heap`` is the flat ``uint8`` heap, ``words`` the signals arena as ``int32``. Returns the outputs as tensors of
    this process (``slots``' shapes and dtypes) and a boolean scalar on the device: whether every word was written
    and in bounds (where one was not, its output holds the heap's first bytes and is not the candidate's answer).

    Raises:
        ValueError: An output is larger than the heap (the judge sizes the heap for one output set and more).
    """
    device = heap.device
    valid = torch.ones((), dtype=torch.bool, device=device)
    outs = []
    for i, slot in enumerate(slots):
        n = slot.nbytes
        dst = torch.empty(n, dtype=torch.uint8, device=device)
        if n > heap.numel():
            raise ValueError(f"an output of {n} bytes cannot lie in a heap of {heap.numel()}")
        if n:
            width, wide = next((w, d) for w, d in _WIDTHS if n % w == 0)
            count, limit = n // width, heap.numel() // width
            unit = words[descriptor_word(call, i)].to(torch.int64) & INVALID
            start = unit * (HEAP_ALIGN // width)
            ok = (unit != INVALID) & (start + count <= limit)
            valid = valid & ok
            start = torch.where(ok, start, torch.zeros_like(start))  # never an index beyond the heap
            src, out = heap[:limit * width].view(wide), dst.view(wide)
            for c0 in range(0, count, GATHER_CHUNK):
                m = min(GATHER_CHUNK, count - c0)
                torch.index_select(src, 0, _arange(m, device) + (start + c0), out=out[c0:c0 + m])
        outs.append(dst.view(getattr(torch, slot.dtype)).view(slot.shape))
    return outs, valid


def undelivered(call: int) -> str:
    """Why call ``call``'s outputs were not read (its word unwritten in the call, or pointing outside the heap)."""
    return (f"the runner did not say where call {call}'s outputs lie in the shared heap (a word not written in "
            "that call, or one pointing outside the heap): no outputs were delivered")


def reset_words(words: torch.Tensor, calls: int) -> None:
    """Mark the words of the first ``calls`` calls unwritten (queued on the current stream)."""
    first = descriptor_word(0, 0)
    words[first:first + calls * MAX_OUTPUTS].fill_(-1)
