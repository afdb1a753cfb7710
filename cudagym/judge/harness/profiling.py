"""Per-kernel breakdown of a forward pass with ``torch.profiler``: which GPU kernels ran and for how long.

Device activity is read from the profiler's device events: kernels, and memory operations (``Memcpy``,
``Memset``), each with its duration and the stream it ran on. The breakdown feeds the observation the agent
sees after ``profile()`` and the ``decoy_kernels`` guard (whose kernels did the work).
"""

from __future__ import annotations

import contextlib
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from cudagym.judge.harness.integrity import PRISTINE
from cudagym.judge.records import KernelTime

MAX_KERNELS = 20  # rows of the breakdown; the rest is summed into one "(other kernels)" row
OTHER = "(other kernels)"


@dataclass(frozen=True)
class DeviceEvent:
    """One piece of GPU activity, or ``calls`` of them with one name on one stream (their summed duration).

    ``start_us``: when it started on the profiler's clock (-1.0 when unknown, as for a condensed row).
    """

    name: str
    duration_us: float
    stream: int
    is_memory_op: bool
    calls: int = 1
    start_us: float = -1.0


@dataclass(frozen=True)
class KernelProfile:
    """What the profiler saw of ``repeats`` forwards: one event row per name and stream, and the GPU's busy time.

    ``busy_us`` is the union of the activities' intervals: kernels that overlap count once, unlike in the sum of the
    rows' durations (on several streams; or on one, as cuDNN's FFT convolution kernels did on the H200, most
    likely under programmatic dependent launch).
    """

    events: tuple[DeviceEvent, ...]
    busy_us: float
    repeats: int

    @classmethod
    def of(cls, events: list[DeviceEvent], repeats: int, limit: int = 2000) -> KernelProfile:
        """The profile of raw device events: condensed to at most ``limit`` rows, busy time from their intervals."""
        return cls(events=tuple(condense(events, limit)), busy_us=busy_us(events), repeats=repeats)

    @property
    def busy_per_forward_us(self) -> float:
        """Busy time per forward (0.0 without forwards)."""
        return self.busy_us / self.repeats if self.repeats > 0 else 0.0

    @property
    def summed_per_forward_us(self) -> float:
        """The rows' durations summed, per forward (overlapping activity counted twice)."""
        return sum(e.duration_us for e in self.events) / self.repeats if self.repeats > 0 else 0.0


def busy_us(events: list[DeviceEvent]) -> float:
    """How long the device was busy: the union of the events' intervals (an event without a start adds its duration)."""
    spans = sorted((e.start_us, e.start_us + max(e.duration_us, 0.0)) for e in events if e.start_us >= 0)
    total = sum(max(e.duration_us, 0.0) for e in events if e.start_us < 0)
    end = -1.0
    for start, stop in spans:
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def condense(events: list[DeviceEvent], limit: int) -> list[DeviceEvent]:
    """One row per (name, stream, memory op) with summed durations and counts, largest first.

    Rows past ``limit`` are summed into one :data:`OTHER` row (whose name no guard takes for the candidate's kernel).
    """
    time_us: dict[tuple[str, int, bool], float] = defaultdict(float)
    calls: dict[tuple[str, int, bool], int] = defaultdict(int)
    for event in events:
        key = (event.name, event.stream, event.is_memory_op)
        time_us[key] += event.duration_us
        calls[key] += event.calls
    keys = sorted(time_us, key=lambda k: time_us[k], reverse=True)
    rows = [DeviceEvent(k[0], time_us[k], k[1], k[2], calls[k]) for k in keys[:max(limit - 1, 0)]]
    rest = keys[len(rows):]
    if len(rest) == 1:
        k = rest[0]
        rows.append(DeviceEvent(k[0], time_us[k], k[1], k[2], calls[k]))
    elif rest:
        rows.append(DeviceEvent(OTHER, sum(time_us[k] for k in rest), rest[0][1], False,
                                sum(calls[k] for k in rest)))
    return rows


@contextlib.contextmanager
def profiled(device: torch.device) -> Iterator[Any]:
    """A ``torch.profiler.profile`` recording device activity (CPU ops too on a CPU device)."""
    from torch.profiler import ProfilerActivity, profile

    activity = ProfilerActivity.CUDA if device.type == "cuda" else ProfilerActivity.CPU
    prof = profile(activities=[activity])
    with warnings.catch_warnings():  # torch 2.11 warns on every first profile of a process: noise in the job log
        warnings.filterwarnings("ignore", message="Warning: Profiler clears events", category=UserWarning)
        prof.__enter__()
    try:
        yield prof
    finally:
        prof.__exit__(None, None, None)


def device_events(prof: Any) -> list[DeviceEvent]:
    """The device events (kernels and memory operations) a finished profile recorded."""
    from torch.autograd import DeviceType

    found = []
    for event in prof.events():
        if event.device_type != DeviceType.CUDA:
            continue
        name = str(event.name)
        found.append(
            DeviceEvent(
                name=name,
                duration_us=float(event.time_range.elapsed_us()),
                stream=int(getattr(event, "device_resource_id", 0) or 0),
                is_memory_op=name.startswith(("Memcpy", "Memset")),
                start_us=max(float(event.time_range.start), 0.0),
            )
        )
    return found


def device_activity_us(prof: Any) -> float:
    """Total device time of a finished profile, in microseconds."""
    return sum(e.duration_us for e in device_events(prof))


def profile_calls(call: Callable[[], Any], device: torch.device, repeats: int) -> list[DeviceEvent]:
    """Device events of ``repeats`` calls of ``call`` (the device is synchronised before and after)."""
    return profile_forward(call, device, repeats)[0]


def profile_forward(call: Callable[[], Any], device: torch.device, repeats: int,
                    keep: str = "last") -> tuple[list[DeviceEvent], Any]:
    """Device events of ``repeats`` calls of ``call``, and what one of them returned (its outputs to check).

    ``keep``: ``"last"`` (one output set alive at a time) or ``"first"`` (the call on the inputs as given, for a
    forward that writes its inputs; its outputs stay alive through the later calls).
    """
    PRISTINE.sync(device)
    kept: Any = None
    with profiled(device) as prof:
        for i in range(repeats):
            if keep == "last":
                kept = None  # one output set alive at a time
                kept = call()
            elif i == 0:
                kept = call()
            else:
                call()
        PRISTINE.sync(device)
    return device_events(prof), kept


def breakdown(events: list[DeviceEvent], repeats: int, limit: int = MAX_KERNELS) -> tuple[KernelTime, ...]:
    """Per-name time and calls per forward pass, largest first, with each name's share of the total."""
    time_us: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    for event in events:
        time_us[event.name] += event.duration_us
        calls[event.name] += event.calls
    total = sum(time_us.values())
    if total <= 0 or repeats <= 0:
        return ()
    rows = sorted(time_us, key=lambda n: time_us[n], reverse=True)
    out = [
        KernelTime(name=n, time_us=time_us[n] / repeats, calls=round(calls[n] / repeats), share=time_us[n] / total)
        for n in rows[:limit]
    ]
    rest = rows[limit:]
    if rest:
        rest_time = sum(time_us[n] for n in rest)
        out.append(KernelTime(name=OTHER, time_us=rest_time / repeats,
                              calls=round(sum(calls[n] for n in rest) / repeats), share=rest_time / total))
    return tuple(out)
