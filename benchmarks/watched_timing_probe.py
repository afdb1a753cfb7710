"""What would it cost to profile every timed call? One process, the task's reference, plain and profiled blocks.

The kernel attribution (``decoy_kernels``) is taken on forwards the candidate can tell apart: a profiler is on for
them and off for the timed calls, so a forward can show its own kernels to the profiler and run a faster torch
path when timed (bounded today by the busy-time fit, 1.5x + 10 µs). A profiler on from before the candidate loads,
through every timed call, leaves nothing to tell apart, and attributes the timed calls themselves. Whether a
protocol can afford that is this probe's question:

1. ``blocks``: ``--pairs`` pairs of ``--window`` calls, plain then under ``torch.profiler`` (CUDA activity),
   each call timed as the judge times one (the L2 flushed, a short spin before the start event, CUDA events);
   per mode, the median time and host time per call.
2. for the profiled blocks: the forward's device events per call; what reading them back costs (the profiler's
   stop and ``events()``, per 1,000 events recorded, the flush's and the spin's among them); and the busy GPU
   time per call (the union of the kernels' intervals) over the same calls' timed median: the fit, on the calls
   that were timed.

    python benchmarks/watched_timing_probe.py --task bundled/L1/01_Swish --out DIR
        (a KernelBench task: CUDAGYM_KERNELBENCH_DIR)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
# the sync probe's options, loader, timed call, cover spin and output
from sync_probe import _spin, probe_arguments, save, setup_on_gpu, timed_call  # noqa: E402


def blocks(model: Any, inputs: list[Any], flush: Any, window: int, pairs: int, cover_ms: float) -> dict[str, Any]:
    """``pairs`` plain and profiled blocks of ``window`` calls each, alternating (drift falls on both)."""
    import torch

    from cudagym.judge.harness.profiling import busy_us, device_events, profiled

    times: dict[str, list[float]] = {"plain": [], "profiled": []}
    host: dict[str, list[float]] = {"plain": [], "profiled": []}
    events, stop_ms, read_ms, fits = [], [], [], []
    recorded = 0  # every device event read back, the flush's and the spin's among them
    device = torch.device("cuda", torch.cuda.current_device())
    staging = _staging_names(flush, cover_ms, device)
    with torch.no_grad():
        for _ in range(pairs):
            for _ in range(window):
                t, h = timed_call(model, inputs, flush, cover_ms)
                times["plain"].append(t)
                host["plain"].append(h)
            block: list[float] = []
            cm = profiled(device)
            prof = cm.__enter__()
            try:
                for _ in range(window):
                    t, h = timed_call(model, inputs, flush, cover_ms)
                    block.append(t)
                    host["profiled"].append(h)
            finally:
                t0 = time.perf_counter()
                cm.__exit__(None, None, None)
                stop_ms.append((time.perf_counter() - t0) * 1000.0)
            t0 = time.perf_counter()
            found = device_events(prof)
            read_ms.append((time.perf_counter() - t0) * 1000.0)
            recorded += len(found)
            times["profiled"].extend(block)
            kernels = [e for e in found if e.name not in staging]
            events.append(len(kernels) / window)
            fits.append(busy_us(kernels) / window / max(statistics.median(block), 1e-9))
    return {
        "window": window, "pairs": pairs, "cover_ms": cover_ms,
        "plain_us": statistics.median(times["plain"]), "profiled_us": statistics.median(times["profiled"]),
        "plain_host_us": statistics.median(host["plain"]), "profiled_host_us": statistics.median(host["profiled"]),
        "events_per_call": statistics.median(events),
        "stop_ms_per_1000_events": 1000.0 * sum(stop_ms) / max(recorded, 1),
        "read_ms_per_1000_events": 1000.0 * sum(read_ms) / max(recorded, 1),
        "busy_over_timed": statistics.median(fits),
    }


def _staging_names(flush: Any, cover_ms: float, device: Any) -> set[str]:
    """The device activity of the L2 flush and the cover spin alone, by name: left out of the forward's events.

    (A forward that runs a kernel of the same name, a fill, loses it from its count and busy time.)
    """
    import torch

    from cudagym.judge.harness.profiling import device_events, profiled

    with profiled(device) as prof:
        flush.zero_()
        _spin(cover_ms)
        torch.cuda.synchronize()
    return {e.name for e in device_events(prof)}


def render(found: dict[str, Any]) -> str:
    """The probe's findings as markdown, the ratio a protocol would pay last."""
    b = found["blocks"]
    ratio = b["profiled_us"] / b["plain_us"] if b["plain_us"] > 0 else float("nan")
    host_ratio = b["profiled_host_us"] / b["plain_host_us"] if b["plain_host_us"] > 0 else float("nan")
    lines = [f"# Watched timing probe: {found['task']} under {found['protocol']}", "",
             f"{b['pairs']} pairs of {b['window']} calls, plain then under torch.profiler (CUDA activity); each call "
             f"timed as the judge times one (L2 flushed, {b['cover_ms']} ms spin before the start event).", "",
             "| mode | median µs | host µs per call |", "|---|---:|---:|",
             f"| plain | {b['plain_us']:,.1f} | {b['plain_host_us']:,.1f} |",
             f"| profiled | {b['profiled_us']:,.1f} | {b['profiled_host_us']:,.1f} |", "",
             f"Device events per call: {b['events_per_call']:,.1f}; reading them back: the profiler's stop "
             f"{b['stop_ms_per_1000_events']:.2f} ms and `events()` {b['read_ms_per_1000_events']:.2f} ms per 1,000 "
             "events.",
             f"Busy GPU time per call over the same calls' timed median: {b['busy_over_timed']:.3f}.", "",
             f"**Profiled / plain: {ratio:.3f}x the device time, {host_ratio:.3f}x the host time per call.**"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    probe_arguments(parser)
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args(argv)
    if args.window < 1 or args.pairs < 1 or args.cover_ms < 0:
        parser.error("--window and --pairs must be at least 1, --cover-ms at least 0")
    loaded = setup_on_gpu("watched_timing_probe", "it measures the GPU profiler's cost", args)
    if loaded is None:
        return 2
    model, inputs, flush = loaded
    found = {"task": args.task, "protocol": args.protocol,
             "blocks": blocks(model, inputs, flush, args.window, args.pairs, args.cover_ms)}
    save(args.out, "watched", found, render(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
