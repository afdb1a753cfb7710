"""Does a task's time depend on where its tensors lie in device memory? One process, many placements.

Each trial holds a pad of a random size (so the allocator hands out other addresses), builds the task's model
afresh (new weight tensors) and draws a fresh input set, then times the forward as the judge's timing loop does
(CUDA events, the L2 flushed before each call) and keeps the median. A spread between trials of one process
says the time moves with placement, not with the process; the addresses of the largest input, the output and
the first weight are printed beside each trial.

    python benchmarks/placement_probe.py --task L2/77_ConvTranspose3d_Scale_BatchNorm_GlobalAvgPool \
        --protocol kernelbench --trials 8 --out DIR    (a KernelBench task: CUDAGYM_KERNELBENCH_DIR)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
import types
from pathlib import Path
from typing import Any

MIB = 1 << 20


def _tensors(tree: Any) -> list[Any]:
    import torch

    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, (list, tuple)):
        return [t for x in tree for t in _tensors(x)]
    return []


def probe(task_id: str, protocol_id: str, trials: int, runs: int, device_name: str, seed: int) -> dict[str, Any]:
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
    rows = []
    for trial in range(trials):
        pad_mib = 0 if trial == 0 else 2 * rng.randrange(0, 512)
        pad = torch.empty(pad_mib * MIB, dtype=torch.uint8, device=device) if pad_mib else None
        torch.manual_seed(trial)
        model = module.Model(*module.get_init_inputs()).to(device)
        model.train(protocol.extra.get("module_mode", "eval") == "train")
        inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
        times = []
        with torch.no_grad():
            out = model(*inputs)
            for _ in range(runs):
                if flush is not None:
                    flush.zero_()
                if on_gpu:
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record()
                    out = model(*inputs)
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
                     "min_us": min(times), "input_ptr": hex(largest.data_ptr()),
                     "output_ptr": hex(_tensors(out)[0].data_ptr()) if _tensors(out) else "-",
                     "weight_ptr": hex(weight.data_ptr()) if weight is not None else "-"})
        del model, inputs, out, pad
        if on_gpu:
            torch.cuda.empty_cache()
    medians = [r["median_us"] for r in rows]
    return {"task": task_id, "protocol": protocol_id, "device": device_name, "runs": runs,
            "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), "trials": rows,
            "spread": max(medians) / min(medians) if min(medians) > 0 else 0.0}


def render(found: dict[str, Any]) -> str:
    """A markdown table of one probe."""
    lines = [f"# Placement probe: {found['task']} under {found['protocol']} on {found['device']} "
             f"(PYTORCH_CUDA_ALLOC_CONF={found['alloc_conf'] or '(unset)'}; median of {found['runs']} calls)", "",
             "| trial | pad MiB | median µs | min µs | largest input | output | first weight |",
             "|---:|---:|---:|---:|---|---|---|"]
    for r in found["trials"]:
        lines.append(f"| {r['trial']} | {r['pad_mib']} | {r['median_us']:,.1f} | {r['min_us']:,.1f} | "
                     f"`{r['input_ptr']}` | `{r['output_ptr']}` | `{r['weight_ptr']}` |")
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
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.trials < 1 or args.runs < 1:
        parser.error("--trials and --runs must be at least 1")
    found = probe(args.task, args.protocol, args.trials, args.runs, args.device, args.seed)
    text = render(found)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        tag = found["alloc_conf"].replace(":", "-").replace(",", "_") or "default"
        (args.out / f"placement-{os.getpid()}-{tag}.json").write_text(json.dumps(found, indent=1))
        (args.out / f"placement-{os.getpid()}-{tag}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
