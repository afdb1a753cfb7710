"""Probe mode: the CUDA caching allocator's history of one process, and what was alive at its peaks.

A diagnostic, off by default (``benchmarks/memory_probe.py`` uses it). ``torch.cuda.memory`` records every
allocation, free and ``cudaMalloc`` of the process with the Python frames that made it; a snapshot holds that
trace and the final state. :func:`replay` walks the trace and finds the two peaks: of memory allocated to
tensors and of memory reserved by the allocator (``cudaMalloc``'d segments, what ``max_memory_reserved`` and
the bound count). At each it lists every live block of at least ``min_bytes`` with the frames that allocated
it, and every segment of that size with how much of it was in use: a 2 GiB segment holding a 64 MiB block is
the caching allocator's slack (fragmentation), not a tensor of the task.

The runner process is started by the worker pool, not by the probe: with ``CUDAGYM_MEMORY_HISTORY`` set to a
folder (relative: to the process's working folder when the harness is imported, a runner's own private
folder), importing the harness starts recording and the process writes ``<program>-<pid>.pickle`` (the
snapshot) and ``.json`` (torch's peak counters) there when it exits. Nothing happens without the variable.
"""

from __future__ import annotations

import atexit
import json
import os
import pickle
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HISTORY_ENV = "CUDAGYM_MEMORY_HISTORY"
MAX_ENTRIES = 400_000  # trace entries kept (alloc, free, segment events); one SUBMIT of a 2 GiB task: ~10^4
LARGE = 64 << 20  # blocks and segments listed at a peak: 64 MiB and up
MIB = float(1 << 20)

Frame = tuple[str, int, str]  # file, line, function


def start_recording(max_entries: int = MAX_ENTRIES) -> bool:
    """Record this process's CUDA allocations with their Python frames (False where there is no CUDA)."""
    import torch

    if not torch.cuda.is_available():
        return False
    torch.cuda.init()  # the allocator of a device that is not initialised records nothing
    torch.cuda.memory._record_memory_history(context="alloc", stacks="python", max_entries=max_entries)
    return True


def stop_recording() -> None:
    """Stop recording (the history taken so far is dropped with it)."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.memory._record_memory_history(enabled=None)


def take_snapshot() -> dict[str, Any]:
    """The allocator's snapshot: its segments now and the trace recorded so far."""
    import torch

    return dict(torch.cuda.memory._snapshot())


def peak_counters() -> dict[str, int]:
    """The peaks torch counted on the current device: ``max_memory_reserved`` and ``max_memory_allocated``."""
    import torch

    return {"max_memory_reserved": int(torch.cuda.max_memory_reserved()),
            "max_memory_allocated": int(torch.cuda.max_memory_allocated())}


def dump(folder: Path, stem: str) -> Path:
    """Write the snapshot to ``folder/stem.pickle`` and the peak counters to ``folder/stem.json``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}.pickle"
    with path.open("wb") as fh:
        pickle.dump(take_snapshot(), fh)
    (folder / f"{stem}.json").write_text(json.dumps(peak_counters()))
    return path


def record_from_env() -> None:
    """Probe mode only: with :data:`HISTORY_ENV` set, record from now on and dump when the process exits."""
    where = os.environ.get(HISTORY_ENV, "")
    if not where:
        return
    folder = Path(where).resolve()  # now: the process may change its working folder later (a runner does)
    try:
        started = start_recording()
    except (RuntimeError, AttributeError) as exc:  # a broken or CPU-only torch: the probe says so in its report
        print(f"{HISTORY_ENV}: could not record: {exc}", file=sys.stderr, flush=True)
        return
    if started:
        atexit.register(_dump_at_exit, folder, f"{Path(sys.argv[0]).stem or 'python'}-{os.getpid()}")


def _dump_at_exit(folder: Path, stem: str) -> None:
    try:
        print(f"{HISTORY_ENV}: wrote {dump(folder, stem)}", flush=True)
    except Exception as exc:  # at exit nothing else can report it
        print(f"{HISTORY_ENV}: could not write the history to {folder}: {exc}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------- replaying a trace


@dataclass(frozen=True)
class Block:
    """A device allocation: its address, bytes and the frames that made it (innermost first)."""

    addr: int
    size: int
    frames: tuple[Frame, ...] = ()
    before_recording: bool = False


@dataclass
class Moment:
    """The state at one trace entry: bytes allocated and reserved, live blocks and segments."""

    index: int
    allocated: int
    reserved: int
    blocks: list[Block] = field(default_factory=list)
    segments: list[Block] = field(default_factory=list)

    def used_in(self, segment: Block) -> list[Block]:
        """The live blocks inside ``segment``."""
        return [b for b in self.blocks if segment.addr <= b.addr < segment.addr + segment.size]


@dataclass(frozen=True)
class Peaks:
    """What :func:`replay` found: the state at the peak of allocated and of reserved bytes."""

    allocated: Moment
    reserved: Moment
    entries: int


_ALLOC, _FREE = ("alloc",), ("free_completed",)
_SEG_ALLOC, _SEG_FREE = ("segment_alloc", "segment_map"), ("segment_free", "segment_unmap")


def _frames(raw: Iterable[dict[str, Any]] | None) -> tuple[Frame, ...]:
    return tuple((str(f.get("filename", "?")), int(f.get("line", 0)), str(f.get("name", "?"))) for f in raw or ())


def _initial(snapshot: dict[str, Any], trace: list[dict[str, Any]], device: int) -> tuple[dict[int, Block],
                                                                                          dict[int, Block]]:
    """Blocks and segments alive when recording began: freed in the trace unseen, or alive at its end unseen."""
    blocks: dict[int, Block] = {}
    segments: dict[int, Block] = {}
    seen_blocks: set[int] = set()
    seen_segments: set[int] = set()
    for entry in trace:
        action, addr, size = entry.get("action"), int(entry.get("addr", 0)), int(entry.get("size", 0))
        if action in _ALLOC:
            seen_blocks.add(addr)
        elif action in _FREE and addr not in seen_blocks:
            blocks.setdefault(addr, Block(addr, size, before_recording=True))
        elif action in _SEG_ALLOC:
            seen_segments.add(addr)
        elif action in _SEG_FREE and addr not in seen_segments:
            segments.setdefault(addr, Block(addr, size, before_recording=True))
        if action in _FREE:
            seen_blocks.discard(addr)
        elif action in _SEG_FREE:
            seen_segments.discard(addr)
    for segment in snapshot.get("segments", []):
        if int(segment.get("device", device)) != device:
            continue
        addr = int(segment["address"])
        if addr not in seen_segments:
            segments.setdefault(addr, Block(addr, int(segment["total_size"]), before_recording=True))
        for block in segment.get("blocks", []):
            baddr = int(block["address"])
            if block.get("state") != "inactive" and baddr not in seen_blocks:
                blocks.setdefault(baddr, Block(baddr, int(block["size"]), _frames(block.get("frames")), True))
    return blocks, segments


def _apply(entry: dict[str, Any], blocks: dict[int, Block], segments: dict[int, Block]) -> None:
    action, addr, size = entry.get("action"), int(entry.get("addr", 0)), int(entry.get("size", 0))
    if action in _ALLOC:
        blocks[addr] = Block(addr, size, _frames(entry.get("frames")))
    elif action in _FREE:
        blocks.pop(addr, None)
    elif action in _SEG_ALLOC:
        segments[addr] = Block(addr, size)
    elif action in _SEG_FREE:
        segments.pop(addr, None)


def replay(snapshot: dict[str, Any], device: int = 0) -> Peaks:
    """Walk ``snapshot``'s trace of ``device``: the state at the peak of allocated and of reserved bytes.

    A peak is the first trace entry after which the total is at its most (index -1: before the first entry); of
    the entries at the reserved peak, the one with the most allocated.
    """
    traces = snapshot.get("device_traces") or [[]]
    trace = list(traces[device]) if device < len(traces) else []
    blocks, segments = _initial(snapshot, trace, device)
    allocated, reserved = sum(b.size for b in blocks.values()), sum(s.size for s in segments.values())
    # the reserved peak's moment: where reserved is at its most and, of those, allocated too (the fullest state)
    best = {"allocated": ((allocated,), -1), "reserved": ((reserved, allocated), -1)}
    for i, entry in enumerate(trace):
        action, size = entry.get("action"), int(entry.get("size", 0))
        if action in _ALLOC:
            allocated += size
        elif action in _FREE:
            allocated -= size
        elif action in _SEG_ALLOC:
            reserved += size
        elif action in _SEG_FREE:
            reserved -= size
        if (allocated,) > best["allocated"][0]:
            best["allocated"] = ((allocated,), i)
        if (reserved, allocated) > best["reserved"][0]:
            best["reserved"] = ((reserved, allocated), i)
    moments = {}
    for name, (_total, index) in best.items():
        live_blocks, live_segments = dict(blocks), dict(segments)
        for entry in trace[:index + 1]:
            _apply(entry, live_blocks, live_segments)
        moments[name] = Moment(index, sum(b.size for b in live_blocks.values()),
                               sum(s.size for s in live_segments.values()),
                               sorted(live_blocks.values(), key=lambda b: -b.size),
                               sorted(live_segments.values(), key=lambda s: -s.size))
    return Peaks(moments["allocated"], moments["reserved"], len(trace))


ENTRY_POINTS = ("<module>", "_run_module_as_main", "_run_code", "_bootstrap", "_bootstrap_inner")


def where(frames: tuple[Frame, ...], depth: int = 8) -> str:
    """The allocation site and the judge's frames above it: ``fn (file:line) < ...``, innermost first.

    The first two frames say what allocated (torch's own code included); after them only frames of cudagym,
    the task or the candidate, so the phase of the harness that asked shows within ``depth`` frames.
    """
    if frames and frames[0][2] in ENTRY_POINTS:  # outermost first: turn it around
        frames = tuple(reversed(frames))
    picked = list(frames[:2]) + [f for f in frames[2:] if _ours(f[0])]
    return " < ".join(f"{name} ({_short(file)}:{line})" for file, line, name in picked[:depth]) or "(no frames)"


def _ours(file: str) -> bool:
    """A frame of the judge, the task or the candidate (not torch's, wherever torch is installed)."""
    return "/torch/" not in file and ("cudagym" in file or "model_new" in file or file.startswith("<"))


def _short(file: str) -> str:
    for marker in ("/torch/", "/cudagym/"):
        if marker in file:
            return file[file.rindex(marker) + 1:]
    return Path(file).name


def describe_moment(title: str, moment: Moment, min_bytes: int = LARGE) -> list[str]:
    """Lines for one peak: totals, live blocks of ``min_bytes`` and up, segments and what uses them."""
    lines = [f"{title}: allocated {moment.allocated / MIB:,.0f} MiB, reserved {moment.reserved / MIB:,.0f} MiB "
             f"(slack {(moment.reserved - moment.allocated) / MIB:,.0f} MiB), at trace entry {moment.index}"]
    large = [b for b in moment.blocks if b.size >= min_bytes]
    small = sum(b.size for b in moment.blocks if b.size < min_bytes)
    lines.append(f"  live blocks >= {min_bytes / MIB:.0f} MiB: {len(large)} ({sum(b.size for b in large) / MIB:,.0f}"
                 f" MiB); smaller blocks: {small / MIB:,.0f} MiB")
    for block in large:
        origin = "allocated before recording" if block.before_recording and not block.frames else where(block.frames)
        lines.append(f"    {block.size / MIB:10,.1f} MiB  {origin}")
    lines.append(f"  segments >= {min_bytes / MIB:.0f} MiB (cudaMalloc'd; in use / size):")
    for segment in (s for s in moment.segments if s.size >= min_bytes):
        inside = moment.used_in(segment)
        used = sum(b.size for b in inside)
        lines.append(f"    {used / MIB:10,.1f} / {segment.size / MIB:,.1f} MiB")
        if used < segment.size:  # what keeps a partly free segment from being reused or released
            for block in sorted(inside, key=lambda b: -b.size)[:3]:
                lines.append(f"        holds {block.size / MIB:,.1f} MiB: {where(block.frames, 4)}")
    return lines


def report(snapshot: dict[str, Any], counters: dict[str, int] | None = None, device: int = 0,
           min_bytes: int = LARGE) -> str:
    """The probe's table for one process: both peaks, and torch's own peak counters beside them."""
    peaks = replay(snapshot, device)
    lines = [f"trace entries: {peaks.entries}" + (" (the buffer may have wrapped: early entries lost)"
                                                  if peaks.entries >= MAX_ENTRIES else "")]
    if counters:
        reserved, allocated = counters.get("max_memory_reserved", 0), counters.get("max_memory_allocated", 0)
        lines.append(f"torch: max_memory_reserved {reserved / MIB:,.0f} MiB, max_memory_allocated "
                     f"{allocated / MIB:,.0f} MiB (caching-allocator slack at the peaks "
                     f"{(reserved - allocated) / MIB:,.0f} MiB)")
    lines += describe_moment("peak reserved", peaks.reserved, min_bytes)
    lines += describe_moment("peak allocated", peaks.allocated, min_bytes)
    return "\n".join(lines)
