"""Does a task's forward wait for the GPU inside, behind its host? One process, three looks.

1. ``waits``: the CUDA runtime calls one forward makes (``torch.profiler``, CPU side), by name: how many and how
   long the host spent in each. A synchronous ``cudaMemcpy``, ``cudaFree`` or ``cudaStreamSynchronize`` among them
   waits for the GPU.
2. ``behind a spin``: the forward's host time with a GPU spin of ``--spin-ms`` queued before it, against none. A
   forward whose host time grows by about the spin waits for the GPU inside; the judge's launch cover then cannot
   hide its host work, and its timed region holds host time.
3. ``windows``: ``--runs`` calls timed as the judge times a candidate (the L2 flushed, a short spin before the start
   event, CUDA events), in windows of ``--window`` calls: the median and the share of calls over 1.2x the fastest,
   per window. Early slow windows say warm-up; slow calls spread through say a steady lottery.

    python benchmarks/sync_probe.py --task L1/71_conv_transposed_2D__asymmetric_input__square_kernel \
        --protocol cudagym --out DIR      (a KernelBench task: CUDAGYM_KERNELBENCH_DIR)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

MIB = 1 << 20


def _setup(task_id: str, protocol_id: str, device_name: str, warm: int = 0) -> tuple[Any, list[Any], Any]:
    """The task's reference model, one input set and an L2 flush buffer, under the protocol's precision.

    Loaded and built by the judge's own loader (``load_reference``, ``build_reference``), with the switches
    the judge runs its baselines under; ``warm`` untimed forwards first.
    """
    import torch

    from cudagym.judge.harness.integrity import protocol_flags
    from cudagym.judge.harness.loading import build_reference, load_reference
    from cudagym.judge.protocol import get_protocol
    from cudagym.suites import get_task

    task, protocol = get_task(task_id), get_protocol(protocol_id)
    device = torch.device(device_name)
    protocol_flags(protocol.matmul_tf32, protocol.cudnn_tf32).apply()
    reference = load_reference(task)
    model = build_reference(reference, device, protocol.seed, protocol.extra.get("module_mode", "eval") == "train")
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in reference.get_inputs()]
    flush = torch.empty(256 * MIB // 4, dtype=torch.float32, device=device)
    with torch.no_grad():
        for _ in range(warm):
            model(*inputs)
    return model, inputs, flush


def waits(model: Any, inputs: list[Any], calls: int = 3) -> list[dict[str, Any]]:
    """The CUDA runtime and driver calls of ``calls`` forwards: name, count per forward, host µs per forward."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            model(*inputs)
        torch.cuda.synchronize()
    found: dict[str, list[float]] = defaultdict(list)
    for event in prof.events():
        name = event.name
        if name.startswith("cu") and not name.startswith("cudnn") and event.device_type.name == "CPU":
            found[name].append(event.cpu_time_total)
    return sorted(({"call": k, "per_forward": len(v) / calls, "host_us_per_forward": sum(v) / calls}
                   for k, v in found.items()), key=lambda r: -r["host_us_per_forward"])


_CYCLES_PER_MS: list[float] = []


def _spin(ms: float) -> None:
    """Keep the GPU busy for about ``ms`` (``torch.cuda._sleep``, its cycles per ms measured once)."""
    import torch

    if not _CYCLES_PER_MS:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1_000_000)
        a.record()
        torch.cuda._sleep(10_000_000)
        b.record()
        b.synchronize()
        _CYCLES_PER_MS.append(10_000_000 / max(a.elapsed_time(b), 1e-3))
    torch.cuda._sleep(int(ms * _CYCLES_PER_MS[0]))


def behind_spin(model: Any, inputs: list[Any], spin_ms: float, runs: int = 10) -> dict[str, float]:
    """The forward's median host time (µs) alone and behind a GPU spin of ``spin_ms``."""
    import torch

    out: dict[str, float] = {}
    with torch.no_grad():
        for label, spin in (("alone", 0.0), ("behind_spin", spin_ms)):
            host = []
            for _ in range(runs):
                torch.cuda.synchronize()
                if spin:
                    _spin(spin)
                t0 = time.perf_counter()
                model(*inputs)
                host.append((time.perf_counter() - t0) * 1e6)
            torch.cuda.synchronize()
            out[f"host_us_{label}"] = statistics.median(host)
    out["spin_ms"] = spin_ms
    return out


def timed_call(model: Any, inputs: list[Any], flush: Any, cover_ms: float) -> tuple[float, float]:
    """One call timed the judge's way (L2 flushed, the cover spin, CUDA events): (device µs, host µs to queue it)."""
    import torch

    flush.zero_()
    _spin(cover_ms)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    t0 = time.perf_counter()
    model(*inputs)
    host_us = (time.perf_counter() - t0) * 1e6
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000.0, host_us


def windows(model: Any, inputs: list[Any], flush: Any, runs: int, window: int, cover_ms: float) -> dict[str, Any]:
    """``runs`` calls timed the judge's way, summarised per window of ``window`` calls."""
    import torch

    times, host = [], []
    with torch.no_grad():
        for _ in range(runs):
            t, h = timed_call(model, inputs, flush, cover_ms)
            times.append(t)
            host.append(h)
    fastest = min(times)
    rows = []
    for i in range(0, runs, window):
        part, part_host = times[i:i + window], host[i:i + window]
        rows.append({"calls": f"{i + 1}-{i + len(part)}", "median_us": statistics.median(part),
                     "slow_share": sum(t > 1.2 * fastest for t in part) / len(part),
                     "host_us": statistics.median(part_host)})
    return {"fastest_us": fastest, "median_us": statistics.median(times), "windows": rows}


def render(found: dict[str, Any]) -> str:
    """The three looks as markdown."""
    spin = found["spin"]
    lines = [f"# Sync probe: {found['task']} under {found['protocol']}", "",
             "CUDA runtime calls per forward (host side, torch.profiler):", "",
             "| call | per forward | host µs per forward |", "|---|---:|---:|"]
    lines += [f"| `{r['call']}` | {r['per_forward']:.1f} | {r['host_us_per_forward']:,.1f} |"
              for r in found["waits"][:12]]
    waits_inside = spin["host_us_behind_spin"] - spin["host_us_alone"] > 0.5 * spin["spin_ms"] * 1000
    lines += ["", f"Host time per forward: {spin['host_us_alone']:,.1f} µs alone, "
              f"{spin['host_us_behind_spin']:,.1f} µs behind a {spin['spin_ms']:.0f} ms GPU spin: the forward "
              + ("waits for the GPU inside." if waits_inside else "does not wait for the GPU inside."),
              "", f"Timed calls (L2 flushed, {found['cover_ms']} ms spin before the start event, CUDA events): "
              f"fastest {found['timed']['fastest_us']:,.1f} µs, median {found['timed']['median_us']:,.1f} µs", "",
              "| calls | median µs | share over 1.2x fastest | host µs |", "|---|---:|---:|---:|"]
    lines += [f"| {w['calls']} | {w['median_us']:,.1f} | {w['slow_share']:.2f} | {w['host_us']:,.1f} |"
              for w in found["timed"]["windows"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    probe_arguments(parser)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--spin-ms", type=float, default=50.0)
    args = parser.parse_args(argv)
    if args.runs < 1 or args.window < 1 or args.spin_ms <= 0 or args.cover_ms < 0:
        parser.error("--runs and --window must be at least 1, --spin-ms above 0, --cover-ms at least 0")
    loaded = setup_on_gpu("sync_probe", "it looks at GPU waits only", args)
    if loaded is None:
        return 2
    model, inputs, flush = loaded
    found = {"task": args.task, "protocol": args.protocol, "cover_ms": args.cover_ms,
             "timed": windows(model, inputs, flush, args.runs, args.window, args.cover_ms),
             "spin": behind_spin(model, inputs, args.spin_ms), "waits": waits(model, inputs)}
    save(args.out, "sync", found, render(found))
    return 0


def probe_arguments(parser: argparse.ArgumentParser) -> None:
    """The options the timing probes share: the task, its protocol, the window, the cover, the device, the output."""
    parser.add_argument("--task", required=True)
    parser.add_argument("--protocol", default="cudagym")
    parser.add_argument("--window", type=int, default=20)
    parser.add_argument("--cover-ms", type=float, default=0.1)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", type=Path)


def setup_on_gpu(name: str, why: str, args: argparse.Namespace) -> tuple[Any, list[Any], Any] | None:
    """:func:`_setup` of the probe's task, warmed up; ``None`` (and why, on stderr) without a CUDA device."""
    import torch

    if not torch.cuda.is_available():
        print(f"{name}: no CUDA device here; {why}", file=sys.stderr)
        return None
    return _setup(args.task, args.protocol, args.device, warm=3)


def save(out: Path | None, prefix: str, found: dict[str, Any], text: str) -> None:
    """Print a probe's table, and write it with its figures (JSON) as ``PREFIX-TASK.{md,json}`` under ``out``."""
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        stem = str(found["task"]).replace("/", "_")[:60]
        (out / f"{prefix}-{stem}.json").write_text(json.dumps(found, indent=1))
        (out / f"{prefix}-{stem}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    sys.exit(main())
