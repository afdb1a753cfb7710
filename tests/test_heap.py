"""The shared heap's parts that need no GPU: the allocator's bookkeeping, where an output lies, the trusted gather.

The allocator is the real library, built by the real compiler step and driven through ctypes over an address
range that is never dereferenced (it only does arithmetic on it). The gather is the trusted side's real code on
host tensors standing for the heap and the signals arena. Through the worker on the GPU:
``tests/test_whitebox_gpu.py`` (white-box 36) and ``tests/test_split_gpu.py``.
"""

from __future__ import annotations

import os

import pytest
import torch

from cudagym.judge.split.arena import Slot
from cudagym.judge.split.heap import (
    HEAP_ALIGN,
    INVALID,
    MAX_OUTPUTS,
    Allocator,
    HeapError,
    descriptor_word,
    gather,
    heap_bytes,
    heap_offset,
    library_path,
    reserve_layout,
    reset_words,
)

BASE = 0x7F00_0000_0000  # an address range for the allocator's arithmetic (never touched)
MIB = 1 << 20


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(library_path(tmp_path_factory.mktemp("heap")))


def fresh(library: str, tmp_path, size: int = 64 * MIB) -> Allocator:
    """A fresh copy of the library (its state is per loaded copy), given [BASE, BASE + size)."""
    copy = tmp_path / f"heap-{os.urandom(4).hex()}.so"
    copy.write_bytes(open(library, "rb").read())
    allocator = Allocator(copy)
    allocator.init(BASE, size)
    return allocator


# --------------------------------------------------------------------------------------------- the allocator

def test_the_library_is_built_once_and_kept(tmp_path) -> None:
    first = library_path(tmp_path)
    stamp = first.stat().st_mtime_ns
    assert library_path(tmp_path) == first and first.stat().st_mtime_ns == stamp


def test_no_compiler_is_a_clear_error(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # neither cc nor gcc
    monkeypatch.delenv("CC", raising=False)
    with pytest.raises(HeapError, match="needs a C compiler"):
        library_path(tmp_path / "none")


def test_a_failing_compiler_says_so(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("CC", "/bin/false")
    with pytest.raises(HeapError, match="failed on the heap's allocator"):
        library_path(tmp_path / "false")


def test_spans_are_aligned_first_fit_and_inside_the_heap(library: str, tmp_path) -> None:
    heap = fresh(library, tmp_path)
    a, b, c = heap.alloc(1), heap.alloc(2 * MIB + 3), heap.alloc(HEAP_ALIGN)
    assert a == BASE and b == BASE + HEAP_ALIGN and c == BASE + HEAP_ALIGN + 2 * MIB + HEAP_ALIGN
    assert all(p % HEAP_ALIGN == 0 for p in (a, b, c))
    heap.free(b)
    assert heap.alloc(MIB) == b  # the first span that fits, at the lowest address
    stats = heap.stats()
    assert stats["in_use"] == 2 * HEAP_ALIGN + MIB and stats["peak"] >= stats["in_use"]


def test_freed_neighbours_merge_back_into_one_span(library: str, tmp_path) -> None:
    heap = fresh(library, tmp_path, size=8 * MIB)
    spans = [heap.alloc(MIB) for _ in range(8)]
    assert heap.alloc(1) == 0 or heap.stats()["outside_segments"] == 0  # full (no driver here: nothing outside)
    for p in (spans[1], spans[3], spans[2], spans[0], spans[7], spans[5], spans[6], spans[4]):
        heap.free(p)
    stats = heap.stats()
    assert stats["in_use"] == 0 and stats["free_spans"] == 1
    assert heap.alloc(8 * MIB) == BASE  # the whole heap in one piece again


def test_a_full_heap_without_a_driver_allocates_nothing(library: str, tmp_path) -> None:
    heap = fresh(library, tmp_path, size=4 * MIB)
    assert heap.alloc(4 * MIB) == BASE
    assert heap.alloc(HEAP_ALIGN) == 0  # this machine has no libcuda: no segment outside either
    assert heap.stats()["failed"] == 1


def test_unknown_pointers_are_ignored_and_the_range_is_given_once(library: str, tmp_path) -> None:
    heap = fresh(library, tmp_path, size=4 * MIB)
    p = heap.alloc(MIB)
    heap.free(p + HEAP_ALIGN)  # not a span it handed out
    heap.free(0)
    assert heap.stats()["in_use"] == MIB
    with pytest.raises(HeapError, match="refused"):
        heap.init(BASE, 4 * MIB)


def test_a_range_too_small_for_one_span_is_refused(library: str, tmp_path) -> None:
    copy = tmp_path / "small.so"
    copy.write_bytes(open(library, "rb").read())
    with pytest.raises(HeapError, match="refused"):
        Allocator(copy).init(BASE + 1, HEAP_ALIGN)  # aligned up, nothing is left


# --------------------------------------------------------------------------------------------- where an output lies

def heap_and_slot(nbytes: int = 4096) -> tuple[torch.Tensor, Slot]:
    heap = torch.zeros(nbytes * 4, dtype=torch.uint8)
    return heap, Slot(0, (nbytes // 4,), "float32")


def test_a_contiguous_output_in_the_heap_is_read_in_place() -> None:
    heap, slot = heap_and_slot()
    out = heap[HEAP_ALIGN * 2:HEAP_ALIGN * 2 + slot.nbytes].view(torch.float32)
    assert heap_offset(out, slot, heap.data_ptr(), heap.numel(), heap.device) == HEAP_ALIGN * 2


@pytest.mark.parametrize("case", ["outside", "misaligned", "strided", "dtype", "shape", "past_the_end", "negated",
                                  "meta", "not_a_tensor"])
def test_outputs_the_judge_cannot_read_in_place_are_copied(case: str) -> None:
    heap, slot = heap_and_slot()
    base, size = heap.data_ptr(), heap.numel()
    inside = heap[:slot.nbytes].view(torch.float32)
    tensor = {
        "outside": torch.zeros(slot.shape),
        "misaligned": heap[4:4 + slot.nbytes].view(torch.float32),
        "strided": heap[:2 * slot.nbytes].view(torch.float32)[::2],
        "dtype": heap[:slot.nbytes // 2].view(torch.float16),
        "shape": inside.view(2, -1),
        "past_the_end": heap[size - slot.nbytes:].view(torch.float32),
        "negated": inside._neg_view(),
        "meta": torch.empty(slot.shape, device="meta"),
        "not_a_tensor": [inside],
    }[case]
    if case == "past_the_end":
        assert heap_offset(tensor, slot, base, size, heap.device) == size - slot.nbytes  # ends where the heap does
        size -= 1  # now its last byte lies one past the heap
    assert heap_offset(tensor, slot, base, size, heap.device) is None


def test_the_reserve_lays_outputs_out_on_the_heaps_alignment() -> None:
    slots = [Slot(0, (3,), "float16"), Slot(0, (1000,), "float32"), Slot(0, (0,), "float32")]
    offsets, total = reserve_layout(slots)
    assert offsets == [0, HEAP_ALIGN, HEAP_ALIGN + 4096] and total == HEAP_ALIGN + 4096
    assert heap_bytes(3 * HEAP_ALIGN, total) == total + (1 << 30)  # the least room
    assert heap_bytes(4 << 30, total) == total + (6 << 30)  # one output set and half another
    assert heap_bytes(4 << 30, total, 10 << 30) == total + (12 << 30)  # the reference's need, and half a set


def test_heap_sizes_round_the_reserve_and_offer_one_output_set_second() -> None:
    from cudagym.judge.split.heap import SPAN_ALIGN, heap_sizes

    slots = [Slot(0, (3,), "float16"), Slot(0, (1 << 20,), "float32")]  # 6 bytes and 4 MiB
    reserve, (full, one_set) = heap_sizes(slots, (4 << 20) + 6, need_bytes=8 << 30)
    assert reserve % SPAN_ALIGN == 0 and reserve >= reserve_layout(slots)[1] and reserve == 6 << 20
    assert full == heap_bytes((4 << 20) + 6, reserve, 8 << 30)
    assert one_set == reserve + (6 << 20)  # one output set, rounded up to the span
    assert heap_sizes([], 0)[1][1] == SPAN_ALIGN  # no outputs: still a span to map


# --------------------------------------------------------------------------------------------- the trusted gather

def words_for(calls: int) -> torch.Tensor:
    words = torch.zeros(descriptor_word(calls, 0) if calls < 64 else descriptor_word(63, MAX_OUTPUTS - 1) + 1,
                        dtype=torch.int32)
    reset_words(words, calls)
    return words


@pytest.mark.parametrize("dtype,shape", [(torch.float32, (33, 7)), (torch.float16, (5,)), (torch.uint8, (13,)),
                                         (torch.int64, (2, 3)), (torch.bool, (9,)), (torch.complex64, (4,)),
                                         (torch.float32, ())])
def test_outputs_come_back_from_where_the_words_say(dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    heap = torch.zeros(1 << 16, dtype=torch.uint8)
    value = (torch.randn(shape) * 10).to(dtype) if dtype != torch.bool else torch.rand(shape) > 0.5
    slot = Slot(0, tuple(shape), str(dtype).removeprefix("torch."))
    at = 7 * HEAP_ALIGN
    heap[at:at + slot.nbytes] = value.reshape(-1).view(torch.uint8)
    words = words_for(2)
    words[descriptor_word(1, 0)] = at // HEAP_ALIGN  # call 1's first output
    outs, valid = gather(heap, words, 1, [slot])
    assert bool(valid) and outs[0].dtype == dtype and tuple(outs[0].shape) == tuple(shape)
    assert torch.equal(outs[0], value)
    heap.zero_()
    assert torch.equal(outs[0], value)  # a copy of this process's own


def test_many_outputs_and_chunks(monkeypatch) -> None:
    import cudagym.judge.split.heap as heap_module

    monkeypatch.setattr(heap_module, "GATHER_CHUNK", 5)  # several gather kernels per output
    heap = torch.zeros(1 << 15, dtype=torch.uint8)
    slots = [Slot(0, (n,), "float32") for n in (1, 17, 64)]
    words, values, at = words_for(1), [], HEAP_ALIGN
    for i, slot in enumerate(slots):
        value = torch.randn(slot.shape)
        heap[at:at + slot.nbytes] = value.view(torch.uint8)
        words[descriptor_word(0, i)] = at // HEAP_ALIGN
        values.append(value)
        at += 4 * HEAP_ALIGN
    outs, valid = gather(heap, words, 0, slots)
    assert bool(valid) and all(torch.equal(o, v) for o, v in zip(outs, values, strict=True))


@pytest.mark.parametrize("word", ["unwritten", "past_the_end", "straddles_the_end", "huge"])
def test_a_word_that_is_missing_or_out_of_bounds_fails_the_call(word: str) -> None:
    heap = torch.full((8 * HEAP_ALIGN,), 7, dtype=torch.uint8)
    slot = Slot(0, (HEAP_ALIGN // 4 * 2,), "float32")  # two units long
    words = words_for(1)
    words[descriptor_word(0, 0)] = {"unwritten": -1, "past_the_end": 8, "straddles_the_end": 7,
                                    "huge": 0x7FFFFFFF}[word]
    if word == "unwritten":
        assert int(words[descriptor_word(0, 0)]) & INVALID == INVALID
    outs, valid = gather(heap, words, 0, [slot])  # no index beyond the heap is ever read
    assert not bool(valid)
    assert tuple(outs[0].shape) == slot.shape


def test_an_output_larger_than_the_heap_is_the_judges_error() -> None:
    with pytest.raises(ValueError, match="cannot lie in a heap"):
        gather(torch.zeros(HEAP_ALIGN, dtype=torch.uint8), words_for(1), 0, [Slot(0, (HEAP_ALIGN,), "float32")])


def test_reset_marks_every_word_of_the_request_unwritten() -> None:
    words = torch.zeros(descriptor_word(3, 0) + 8, dtype=torch.int32)
    reset_words(words, 3)
    first = descriptor_word(0, 0)
    assert bool((words[first:descriptor_word(3, 0)] == -1).all()) and int(words[first - 1]) == 0
    assert int(words[descriptor_word(3, 0)]) == 0
    with pytest.raises(ValueError):
        descriptor_word(64, 0)


# ----------------------------------------------------------------------------------- the reserve as output arena

def test_a_view_of_an_arena_shares_its_memory_and_is_not_shared_on_its_own() -> None:
    from cudagym.judge.split.arena import ArenaError, ArenaView, HostArena

    with HostArena(8192) as parent:
        view = ArenaView(parent, 1024)
        view.tensor.fill_(7)
        assert bool(parent.tensor[:1024].eq(7).all()) and int(parent.tensor[1024]) == 0
        with pytest.raises(ArenaError, match="through its parent"):
            view.descriptor()
        view.close()
        assert int(parent.tensor[0]) == 7  # closing the view leaves the parent's memory
        with pytest.raises(ArenaError, match="does not fit"):
            ArenaView(parent, parent.size + 1)


def test_the_runner_takes_the_heaps_reserve_as_its_output_arena() -> None:
    from types import SimpleNamespace

    from cudagym.judge.split.arena import HostArena
    from cudagym.judge.split.runner import _Server

    server = _Server.__new__(_Server)  # its arena plumbing only: no channel, no job
    server.arenas, server.device, server.heap = {}, torch.device("cpu"), None
    inputs = HostArena(4096)
    with pytest.raises(ValueError, match="no heap"):
        server._attach({"names": ["inputs"], "sizes": {"inputs": 4096, "outputs": 1024}}, [inputs.descriptor()])
    heap = HostArena(8192)
    server.heap = SimpleNamespace(arena=heap)
    reply = server._attach({"names": ["inputs"], "sizes": {"inputs": 4096, "outputs": 1024}}, [inputs.descriptor()])
    assert reply == {"kind": "attached"}
    server.arenas["outputs"].tensor.fill_(9)
    assert bool(heap.tensor[:1024].eq(9).all()) and int(heap.tensor[1024]) == 0
    with pytest.raises(ValueError, match="expected the input arena"):
        server._attach({"names": ["outputs"], "sizes": {"outputs": 1024}}, [inputs.descriptor()])
    for arena in (*server.arenas.values(), inputs, heap):
        arena.close()


# ----------------------------------------------------------------------------------- CUDA graphs leave the heap

class _Graph:
    """Stands for torch.cuda.CUDAGraph: records whether the heap was routed when its capture began and ended."""

    def __init__(self, heap: _Heap, fail: bool = False) -> None:
        self.heap, self.fail, self.seen = heap, fail, []

    def capture_begin(self, *args: object, **kwargs: object) -> None:
        self.seen.append(("begin", self.heap.routing))
        if self.fail:
            raise RuntimeError("capture refused")

    def capture_end(self) -> None:
        self.seen.append(("end", self.heap.routing))


class _Heap:
    def __init__(self) -> None:
        import threading

        self.routing, self.thread, self.calls = False, threading.get_ident(), []

    def route(self, on: bool) -> None:
        self.calls.append(on)
        self.routing = on


def test_a_capture_leaves_the_heap_and_routing_resumes_after(monkeypatch) -> None:
    from cudagym.judge.split.heap import _guard_captures

    monkeypatch.setattr(torch.cuda, "CUDAGraph", type("CUDAGraph", (_Graph,), {}))
    heap = _Heap()
    _guard_captures(heap)
    heap.route(True)
    graph = torch.cuda.CUDAGraph(heap)
    graph.capture_begin()
    graph.capture_end()
    assert graph.seen == [("begin", False), ("end", False)] and heap.routing  # off while capturing, on after
    heap.route(False)
    other = torch.cuda.CUDAGraph(heap)
    other.capture_begin()
    other.capture_end()
    assert other.seen == [("begin", False), ("end", False)] and not heap.routing  # not routed: left as it was
    heap.route(True)
    broken = torch.cuda.CUDAGraph(heap, fail=True)
    with pytest.raises(RuntimeError, match="capture refused"):
        broken.capture_begin()
    assert heap.routing  # a capture that never began gives the routing back


def test_a_newer_heap_is_guarded_and_the_class_patched_once(monkeypatch) -> None:
    from cudagym.judge.split.heap import _guard_captures

    monkeypatch.setattr(torch.cuda, "CUDAGraph", type("CUDAGraph", (_Graph,), {}))
    older, newer = _Heap(), _Heap()
    _guard_captures(older)
    begin = torch.cuda.CUDAGraph.capture_begin
    _guard_captures(newer)
    assert torch.cuda.CUDAGraph.capture_begin is begin  # not wrapped twice
    newer.route(True)
    graph = torch.cuda.CUDAGraph(newer)
    graph.capture_begin()
    graph.capture_end()
    assert graph.seen == [("begin", False), ("end", False)] and newer.routing  # the newer heap came back
    assert older.calls == [] and newer.calls == [True, False, True]


def test_another_threads_capture_leaves_the_routing_alone(monkeypatch) -> None:
    import threading

    from cudagym.judge.split.heap import _guard_captures

    monkeypatch.setattr(torch.cuda, "CUDAGraph", type("CUDAGraph", (_Graph,), {}))
    heap = _Heap()
    _guard_captures(heap)
    heap.route(True)
    graph = torch.cuda.CUDAGraph(heap)
    worker = threading.Thread(target=lambda: (graph.capture_begin(), graph.capture_end()))
    worker.start()
    worker.join()
    assert graph.seen == [("begin", True), ("end", True)] and heap.calls == [True]


def test_the_copy_delivery_is_a_probes_setting_and_a_bad_one_is_named() -> None:
    from cudagym.errors import ConfigError
    from cudagym.judge.protocol import get_protocol

    assert get_protocol("cudagym[delivery=copy]").extra == {"delivery": "copy"}
    with pytest.raises(ConfigError, match="delivery.*one of 'heap', 'copy'"):
        get_protocol("cudagym[delivery=arena]")


# ----------------------------------------------------------------------------------- outputs moved into the heap

def _server_with_host_heap(size: int = 1 << 16, reserve: int = 1 << 14):
    """The runner's server with a stand-in heap over host memory: its placement logic, nothing of CUDA."""
    from types import SimpleNamespace

    from cudagym.judge.split.runner import _Server

    memory = torch.zeros(size, dtype=torch.uint8)
    heap = SimpleNamespace(copied=0, reserve_bytes=reserve)
    heap.offset_of = lambda t, slot: heap_offset(t, slot, memory.data_ptr(), size, memory.device)
    heap.reserve_view = lambda offset, slot: memory[offset:offset + slot.nbytes].view(
        getattr(torch, slot.dtype)).view(slot.shape)
    server = _Server.__new__(_Server)
    server.heap = heap
    return server, memory, heap


def test_outputs_made_elsewhere_are_moved_into_the_reserve_and_the_rest_stay() -> None:
    server, memory, heap = _server_with_host_heap()
    slots = [Slot(0, (8,), "float32"), Slot(0, (4,), "int64")]
    request = {"outputs": [s.to_json() for s in slots], "container": {"tuple": ["T", {"dict": [["k", "T"]]}]}}
    plan = server._heap_plan(request)
    inside = memory[1 << 15:(1 << 15) + 32].view(torch.float32)  # already in the heap, past the reserve
    inside.copy_(torch.arange(8.0))
    elsewhere = torch.arange(4)
    moved = server._in_heap((inside, {"k": elsewhere}), plan)
    assert moved[0] is inside  # read where it lies
    assert torch.equal(moved[1]["k"], elsewhere) and moved[1]["k"].data_ptr() != elsewhere.data_ptr()
    assert heap.offset_of(moved[1]["k"], slots[1]) == plan[2][1] < heap.reserve_bytes  # in the reserve now
    assert heap.copied == 1


def test_outputs_of_another_structure_are_left_for_the_delivery_to_name() -> None:
    server, _, heap = _server_with_host_heap()
    request = {"outputs": [Slot(0, (8,), "float32").to_json()], "container": "tensor"}
    plan = server._heap_plan(request)
    for wrong in (torch.zeros(9), torch.zeros(8, dtype=torch.float64), torch.empty(8, device="meta"), [1, 2]):
        assert server._in_heap(wrong, plan) is wrong
    assert heap.copied == 0
    server.heap = None
    assert server._heap_plan(request) is None and server._in_heap(wrong, None) is wrong


def test_the_descriptor_is_of_the_built_library_and_a_removed_one_is_built_again(tmp_path) -> None:
    import os

    from cudagym.judge.split.heap import library_fd

    first = library_fd(tmp_path)
    built = library_path(tmp_path)
    assert os.path.samefile(f"/proc/self/fd/{first}", built)
    os.close(first)
    built.unlink()
    again = library_fd(tmp_path)
    assert built.is_file() and os.path.samefile(f"/proc/self/fd/{again}", built)
    os.close(again)


def test_a_heap_too_large_for_the_device_shrinks_to_one_output_set(monkeypatch) -> None:
    import os

    import cudagym.judge.split.remote as remote
    from cudagym.judge.split.arena import ArenaError, HostArena

    made: list[int] = []

    def arena(size: int, device: torch.device) -> HostArena:
        made.append(size)
        if size > 64 << 20:
            raise ArenaError("cuMemCreate failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)")
        return HostArena(size)

    sent: list[dict] = []
    monkeypatch.setattr(remote, "new_arena", arena)
    monkeypatch.setattr(remote, "library_fd", lambda: os.open("/dev/null", os.O_RDONLY))
    link = remote.RunnerLink.__new__(remote.RunnerLink)
    link.arenas, link.notes, link.device, link.heap, link.arena_peak_bytes = {}, [], torch.device("cpu"), None, 0
    link.request = lambda message, fds, expect: sent.append(message) or {"kind": expect}
    slots = [Slot(0, (1 << 20,), "float32")]  # one 4 MiB output
    link.setup_heap(slots, 4 << 20, need_bytes=8 << 30)
    assert made == [(4 << 20) + (1 << 30) * 8 + (2 << 20), (4 << 20) + (4 << 20)]
    assert link.heap.size == 8 << 20 and link.heap_reserve == 4 << 20
    assert sent == [{"kind": "heap", "size": 8 << 20, "reserve": 4 << 20}]
    assert link.notes and "did not fit" in link.notes[0]
    link.heap.close()
    made.clear()
    monkeypatch.setattr(remote, "new_arena", lambda size, device: (_ for _ in ()).throw(ArenaError("no driver")))
    with pytest.raises(ArenaError, match="no driver"):  # not a lack of memory: no second try
        link.setup_heap(slots, 4 << 20)
