"""Does a task's time depend on where its tensors lie in device memory? One process, many placements.

Each trial holds a pad of a random size (so the allocator hands out other addresses), builds the task's model
afresh (new weight tensors) and draws a fresh input set, then times the forward as the judge's timing loop does
(CUDA events, the L2 flushed before each call) and keeps the median, beside the median host time a call takes
to return (longer than its device time: the call waits for the GPU inside). A spread between trials of one process
says the time moves with placement, not with the process; the addresses of the largest input, the output and
the first weight are printed beside each trial.

What the judge does differently from a plain process can be switched on one at a time: ``--inputs arena`` puts
each trial's input set in an arena of its own (CUDA virtual memory, ``cuMemCreate``, as the trust split hands
inputs to the runner), and ``--idle-contexts N`` keeps N other processes with a CUDA context (torch imported, one
tiny kernel run, then idle) on the GPU while the trials run, as the judge's spare runners are.

    python benchmarks/placement_probe.py --task L2/77_ConvTranspose3d_Scale_BatchNorm_GlobalAvgPool \
        --protocol kernelbench --trials 8 [--inputs arena] [--idle-contexts 8] --out DIR
        (a KernelBench task: CUDAGYM_KERNELBENCH_DIR)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

MIB = 1 << 20
INPUTS = ("allocator", "arena")
_IDLE = ("import time, torch; torch.ones(1, device='cuda').add_(1); torch.cuda.synchronize(); "
         "print('ready', flush=True); time.sleep(3600)")


def _tensors(tree: Any) -> list[Any]:
    import torch

    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, (list, tuple)):
        return [t for x in tree for t in _tensors(x)]
    return []


@contextmanager
def idle_contexts(count: int, on_gpu: bool) -> Iterator[int]:
    """``count`` other processes holding an idle CUDA context while the block runs (none off the GPU)."""
    procs = [subprocess.Popen([sys.executable, "-c", _IDLE], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True) for _ in range(count if on_gpu else 0)]
    try:
        started = sum(1 for p in procs if p.stdout is not None and p.stdout.readline().strip() == "ready")
        yield started
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _to_arena(inputs: list[Any], device: Any) -> tuple[list[Any], Any]:
    """The input set moved into an arena of its own (the tensors become views of it), and the arena."""
    import torch

    from cudagym.judge.split.arena import layout, new_arena, place, views

    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
    slots, nbytes = layout(tensors)
    arena = new_arena(max(1, nbytes), device)
    place(arena.tensor, slots, tensors)
    placed = iter(views(arena.tensor, slots))
    return [next(placed) if isinstance(x, torch.Tensor) else x for x in inputs], arena


def probe(task_id: str, protocol_id: str, trials: int, runs: int, device_name: str, seed: int,
          inputs_in: str = "allocator", idle: int = 0) -> dict[str, Any]:
    """Per-trial medians (microseconds) and where the main tensors lay."""
    import torch

    from cudagym.judge.protocol import get_protocol
    from cudagym.suites import get_task

    task, protocol = get_task(task_id), get_protocol(protocol_id)
    device = torch.device(device_name)
    module = types.ModuleType("reference")
    exec(compile(task.source, task.id, "exec"), module.__dict__)  # the task's own reference, as the judge loads it
    torch.backends.cuda.matmul.allow_tf32 = protocol.matmul_tf32
    torch.backends.cudnn.allow_tf32 = protocol.cudnn_tf32
    torch.backends.cudnn.benchmark = False
    on_gpu = device.type == "cuda"
    flush = torch.empty(256 * MIB // 4, dtype=torch.float32, device=device) if on_gpu else None
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    with idle_contexts(idle, on_gpu) as others:
        _trials(module, protocol, device, flush, rng, trials, runs, inputs_in, rows)
    medians = [r["median_us"] for r in rows]
    return {"task": task_id, "protocol": protocol_id, "device": device_name, "runs": runs,
            "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), "inputs": inputs_in,
            "idle_contexts": others, "trials": rows,
            "spread": max(medians) / min(medians) if min(medians) > 0 else 0.0}


def _trials(module: Any, protocol: Any, device: Any, flush: Any, rng: random.Random, trials: int, runs: int,
            inputs_in: str, rows: list[dict[str, Any]]) -> None:
    import torch

    on_gpu = device.type == "cuda"
    for trial in range(trials):
        pad_mib = 0 if trial == 0 else 2 * rng.randrange(0, 512)
        pad = torch.empty(pad_mib * MIB, dtype=torch.uint8, device=device) if pad_mib else None
        torch.manual_seed(trial)
        model = module.Model(*module.get_init_inputs()).to(device)
        model.train(protocol.extra.get("module_mode", "eval") == "train")
        inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
        arena = None
        if inputs_in == "arena":
            inputs, arena = _to_arena(inputs, device)
        times, host = [], []
        with torch.no_grad():
            out = model(*inputs)
            for _ in range(runs):
                if flush is not None:
                    flush.zero_()
                if on_gpu:
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record()
                    t0 = time.perf_counter()
                    out = model(*inputs)
                    host.append((time.perf_counter() - t0) * 1e6)
                    b.record()
                    b.synchronize()
                    times.append(a.elapsed_time(b) * 1000.0)
                else:
                    t0 = time.perf_counter()
                    out = model(*inputs)
                    times.append((time.perf_counter() - t0) * 1e6)
        largest = max(_tensors(inputs), key=lambda t: t.numel())
        weight = next(iter(model.parameters()), None)
        rows.append({"trial": trial, "pad_mib": pad_mib, "median_us": statistics.median(times),
                     "min_us": min(times), "host_us": statistics.median(host) if host else 0.0,
                     "input_ptr": hex(largest.data_ptr()),
                     "output_ptr": hex(_tensors(out)[0].data_ptr()) if _tensors(out) else "-",
                     "weight_ptr": hex(weight.data_ptr()) if weight is not None else "-"})
        del model, inputs, out, pad, largest, weight
        if arena is not None:
            if on_gpu:
                torch.cuda.synchronize()
            arena.close()
        if on_gpu:
            torch.cuda.empty_cache()


def render(found: dict[str, Any]) -> str:
    """A markdown table of one probe."""
    lines = [f"# Placement probe: {found['task']} under {found['protocol']} on {found['device']} "
             f"(PYTORCH_CUDA_ALLOC_CONF={found['alloc_conf'] or '(unset)'}; inputs from the {found['inputs']}; "
             f"{found['idle_contexts']} idle context(s) beside; median of {found['runs']} calls)", "",
             "| trial | pad MiB | median µs | min µs | host µs per call | largest input | output | first weight |",
             "|---:|---:|---:|---:|---:|---|---|---|"]
    for r in found["trials"]:
        lines.append(f"| {r['trial']} | {r['pad_mib']} | {r['median_us']:,.1f} | {r['min_us']:,.1f} | "
                     f"{r.get('host_us', 0.0):,.1f} | `{r['input_ptr']}` | `{r['output_ptr']}` | `{r['weight_ptr']}` |")
    lines += ["", f"slowest / fastest trial median: {found['spread']:.3f}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", required=True)
    parser.add_argument("--protocol", default="kernelbench")
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--runs", type=int, default=20, help="timed calls per trial")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--inputs", choices=INPUTS, default="allocator",
                        help="where each trial's input set lies: torch's allocator, or an arena of its own "
                        "(cuMemCreate)")
    parser.add_argument("--idle-contexts", type=int, default=0, help="other processes with an idle CUDA context")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.trials < 1 or args.runs < 1 or args.idle_contexts < 0:
        parser.error("--trials and --runs must be at least 1, --idle-contexts at least 0")
    found = probe(args.task, args.protocol, args.trials, args.runs, args.device, args.seed, args.inputs,
                  args.idle_contexts)
    text = render(found)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        tag = "-".join([found["alloc_conf"].replace(":", "-").replace(",", "_") or "default", found["inputs"],
                        f"idle{found['idle_contexts']}"])
        (args.out / f"placement-{os.getpid()}-{tag}.json").write_text(json.dumps(found, indent=1))
        (args.out / f"placement-{os.getpid()}-{tag}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
