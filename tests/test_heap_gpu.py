"""The shared heap on a GPU, in one process playing both sides: routing, the fallback, words and the gather.

The trusted side's arena is exported and mapped again as the runner maps it (a second mapping of the same VMM
allocation), the allocator library is loaded through ``/proc/self/fd`` as the runner loads it, and the words are
written by stream memory operations as the runner writes them. Across two processes and the sandbox, through the
worker: ``tests/test_whitebox_gpu.py`` (white-box 36), ``tests/test_bundled_split_gpu.py``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

from cudagym.judge.split.arena import DeviceArena, Slot, attach_arena
from cudagym.judge.split.heap import (
    HEAP_ALIGN,
    RunnerHeap,
    descriptor_word,
    gather,
    library_path,
    reserve_layout,
    reset_words,
)
from cudagym.judge.split.signals import SIGNAL_BYTES, write_value

pytestmark = pytest.mark.gpu

MIB = 1 << 20


@pytest.fixture
def sides(tmp_path: Path):
    """The trusted side's heap and signals, and a runner's heap over a second mapping of the same heap."""
    device = torch.device("cuda", 0)
    slots = [Slot(0, (1024, 1024), "float32"), Slot(0, (3,), "float16")]
    _, reserve = reserve_layout(slots)
    trusted = DeviceArena(reserve + 64 * MIB, device)
    signals = DeviceArena(SIGNAL_BYTES, device)
    signals.tensor.zero_()
    library = tmp_path / "heap.so"  # a copy of its own: the allocator's state is per loaded library
    shutil.copyfile(library_path(tmp_path / "built"), library)
    fd = os.open(library, os.O_RDONLY)
    mapped = attach_arena(trusted.descriptor(), trusted.size, device)
    heap = RunnerHeap(mapped, f"/proc/self/fd/{fd}", reserve)
    yield trusted, signals, heap, slots
    torch.cuda.synchronize()
    del heap
    mapped.close()
    signals.close()
    trusted.close()
    # fd stays open: the loader knows a library by its name, and a later test given this fd number again would get
    # this library (and its allocator's state) back instead of its own copy


def test_what_a_forward_makes_while_routed_lies_in_the_heap_and_comes_back(sides) -> None:
    trusted, signals, heap, slots = sides
    words = signals.tensor.view(torch.int32)
    x = torch.randn(1024, 1024, device="cuda")
    with heap.routed():
        y = torch.sigmoid(x) * x  # the forward's own allocations
        z = torch.arange(3, device="cuda", dtype=torch.float16)
    offsets = [heap.offset_of(y, slots[0]), heap.offset_of(z, slots[1])]
    assert all(o is not None and o >= heap.reserve_bytes and o % HEAP_ALIGN == 0 for o in offsets), offsets
    stream = torch.cuda.current_stream()
    reset_words(words, 1)
    for i, offset in enumerate(offsets):
        write_value(stream.cuda_stream, signals.tensor.data_ptr() + 4 * descriptor_word(0, i), offset // HEAP_ALIGN)
    outs, valid = gather(trusted.tensor, words, 0, slots)  # from the trusted side's own mapping
    assert bool(valid.item())
    assert torch.equal(outs[0], y) and torch.equal(outs[1], z)
    assert heap.allocator.stats()["in_use"] > 0


def test_an_output_outside_the_heap_goes_through_the_reserve(sides) -> None:
    trusted, signals, heap, slots = sides
    outside = torch.randn(1024, 1024, device="cuda")  # not routed: torch's own pool
    assert heap.offset_of(outside, slots[0]) is None
    offsets, _ = reserve_layout(slots)
    view = heap.reserve_view(offsets[0], slots[0])
    view.copy_(outside)
    assert heap.offset_of(view, slots[0]) == offsets[0]
    words = signals.tensor.view(torch.int32)
    reset_words(words, 1)
    write_value(torch.cuda.current_stream().cuda_stream, signals.tensor.data_ptr() + 4 * descriptor_word(0, 0),
                offsets[0] // HEAP_ALIGN)
    outs, valid = gather(trusted.tensor, words, 0, slots[:1])
    assert bool(valid.item()) and torch.equal(outs[0], outside)


def test_a_full_heap_falls_back_to_the_driver_and_nothing_fails(sides) -> None:
    _, _, heap, slots = sides
    with heap.routed():
        big = torch.ones(128 * MIB // 4, device="cuda")  # twice the heap beside its reserve
        small = torch.ones(16, device="cuda")
    assert float(big.sum()) == 128 * MIB // 4 and float(small.sum()) == 16
    stats = heap.allocator.stats()
    assert stats["outside_segments"] >= 1 and stats["failed"] == 0, stats
    assert heap.offset_of(big, Slot(0, tuple(big.shape), "float32")) is None  # it would be copied into the reserve
    del big, small
    torch.cuda.synchronize()


def test_unwritten_or_stray_words_fail_the_call_on_the_gpu(sides) -> None:
    trusted, signals, _, slots = sides
    words = signals.tensor.view(torch.int32)
    reset_words(words, 2)
    _, valid = gather(trusted.tensor, words, 1, slots)
    assert not bool(valid.item())  # nothing written in this call
    words[descriptor_word(1, 0)] = trusted.size // HEAP_ALIGN  # just past the end
    words[descriptor_word(1, 1)] = 0
    _, valid = gather(trusted.tensor, words, 1, slots)
    assert not bool(valid.item())
    torch.cuda.synchronize()  # and no index past the heap was read: the context is sound
    assert float(torch.ones(4, device="cuda").sum()) == 4.0


def test_a_cuda_graph_captured_while_routed_keeps_its_own_pool(sides) -> None:
    _, _, heap, _ = sides
    x = torch.randn(1 << 20, device="cuda")
    with heap.routed():
        static_in = x.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # the warm-up torch's graph docs ask for
            torch.sigmoid(static_in) * static_in
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = torch.sigmoid(static_in) * static_in
        assert heap.routing  # back on the heap once the capture ended
        assert heap.offset_of(static_out, Slot(0, tuple(static_out.shape), "float32")) is None  # the graph's pool
        held = [torch.full_like(x, 7.0) for _ in range(8)]  # eager allocations after the capture, in the heap
        assert all(heap.offset_of(h, Slot(0, tuple(h.shape), "float32")) is not None for h in held)
        static_in.copy_(x * 3)
        graph.replay()
        torch.cuda.synchronize()
    assert torch.allclose(static_out, torch.sigmoid(x * 3) * (x * 3))
    assert all(bool((h == 7.0).all()) for h in held)  # the replay wrote nothing of theirs


# A fresh process (CUDA's lazy module loading is per process): its stream waits for a word, as the trusted side's
# stream waits for the runner's in a bracket, and the gather is queued behind that wait; a thread writes the word
# only after the seconds given. ``rehearse`` runs the gather once first, with nothing waiting (RunnerLink.rehearse).
GATHER_BEHIND_A_WAIT = r'''
import json, sys, threading, time
import torch
from cudagym.judge.split.arena import DeviceArena, Slot
from cudagym.judge.split.heap import gather
from cudagym.judge.split.signals import SIGNAL_BYTES, wait_value, write_value

rehearse, release_s = sys.argv[1] == "rehearse", float(sys.argv[2])
device = torch.device("cuda", 0)
heap, signals, gate = DeviceArena(64 << 20, device), DeviceArena(SIGNAL_BYTES, device), DeviceArena(4096, device)
signals.tensor.zero_()
gate.tensor.zero_()
words, slots = signals.tensor.view(torch.int32), [Slot(0, (1024, 1024), "float32"), Slot(0, (3,), "float16")]
torch.cuda.synchronize()
if rehearse:
    gather(heap.tensor, words, 0, slots)
    torch.cuda.synchronize()
released = threading.Event()
side = torch.cuda.Stream(device)

def release():
    time.sleep(release_s)
    released.set()
    write_value(side.cuda_stream, gate.tensor.data_ptr(), 1)

threading.Thread(target=release, daemon=True).start()
wait_value(torch.cuda.current_stream(device).cuda_stream, gate.tensor.data_ptr(), 1)
began = time.monotonic()
gather(heap.tensor, words, 0, slots)
queued_s, released_first = time.monotonic() - began, released.is_set()
torch.cuda.synchronize()
print(json.dumps({"queued_s": queued_s, "released_first": released_first}))
'''


@pytest.mark.parametrize("rehearse", ["rehearse", "cold"])
def test_a_gather_queued_behind_a_wait_does_not_wait_once_rehearsed(tmp_path: Path, rehearse: str) -> None:
    """Session 34's deadlock, in one process: a bracket's first gather, queued behind the wait for the runner's word.

    Rehearsed, the gather is queued before the word comes. Cold, it is printed, not asserted: under lazy module
    loading its first launch waited for the context, so for the word (in a bracket, the runner's word that comes
    only after the request this thread had not yet sent).
    """
    import json
    import subprocess
    import sys

    script = tmp_path / "gather_behind_a_wait.py"
    script.write_text(GATHER_BEHIND_A_WAIT)
    path = os.pathsep.join(p for p in (str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "CUDA_MODULE_LOADING": "LAZY", "PYTHONPATH": path}
    try:
        done = subprocess.run([sys.executable, str(script), rehearse, "10"], capture_output=True, text=True,
                              timeout=60, env=env)
    except subprocess.TimeoutExpired:
        assert rehearse == "cold", "rehearsed, the gather still hung behind the wait"
        # the thread never ran: the stalled launch held the GIL, so no Python watchdog could free it
        print("cold: hung until the 60 s limit (the thread writing the word never ran, or its write did not free it)")
        return
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"{rehearse}: the gather queued in {result['queued_s']:.3f} s, "
          f"{'after' if result['released_first'] else 'before'} the word was written")
    if rehearse == "rehearse":
        assert not result["released_first"], result
