"""Where `L2/19`'s staging excess comes from: which op of its forward, and which size, slows the judge's staging.

KernelBench's `L2/19_ConvTranspose2d_GELU_GroupNorm` (a 2 GiB input, a 2 GiB output) is honest and still
`unverifiable_timing` under the default protocol: in its timed calls, and in the reference's own calls before any
candidate code loaded, the judge's staging before the go (inputs placed, outputs poisoned, the L2 flush) takes about
2.1 ms longer than in the empty calls (sessions 37-38; not the arm wait, not the heap). This probe judges variants of
the task, each the reference as its own candidate (PROFILE, guards off, the yardstick timed in the job): each op
alone on the same input, the whole forward at smaller batches, a copy of the same size (alone and behind a long plain
kernel), and the task itself. It prints per variant the staging's parts (inputs / poison / flush, medians in
microseconds) in the empty, the reference's and the timed calls, from the judge's trace; the verdicts are in
DIR/staging.md, the results in full in DIR/staging.jsonl.

    python3 benchmarks/staging_probe.py --out DIR [--variants NAME ...] [--protocol SPEC]   (repository root, GPU)

`--list` prints the variants and writes nothing; `--dry-run` writes the tasks' sources under DIR and judges none.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

HEAD = '''import torch
import torch.nn as nn

batch_size = {batch}
in_channels = 64
out_channels = 64
height = width = 256


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return []


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, 3, stride=1)
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.group_norm = nn.GroupNorm(num_groups=8, num_channels=out_channels)

    def forward(self, x):
'''

# name -> (the forward's body, batch): the task itself at 128, then one thing changed at a time
VARIANTS: dict[str, tuple[str, int]] = {
    "task": ("x = self.conv_transpose(x)\nx = torch.nn.functional.gelu(x)\nreturn self.group_norm(x)", 128),
    "task_half": ("x = self.conv_transpose(x)\nx = torch.nn.functional.gelu(x)\nreturn self.group_norm(x)", 64),
    "task_quarter": ("x = self.conv_transpose(x)\nx = torch.nn.functional.gelu(x)\nreturn self.group_norm(x)", 32),
    "conv_transpose": ("return self.conv_transpose(x)", 128),
    "conv": ("return self.conv(x)", 128),
    "gelu": ("return torch.nn.functional.gelu(x)", 128),
    "group_norm": ("return self.group_norm(x)", 128),
    "copy": ("return x.clone()", 128),
    # a copy behind a long plain kernel (about 10 ms): is it a long forward queued behind the go, whatever its ops?
    "sleep_copy": ("if x.is_cuda:\n    torch.cuda._sleep(20_000_000)\nreturn x.clone()", 128),
    # the transposed conv alone: just under the batch whose input is 2 GiB, and at 128 with cuDNN off
    "conv_transpose_b120": ("return self.conv_transpose(x)", 120),
    "conv_transpose_no_cudnn": ("with torch.backends.cudnn.flags(enabled=False):\n"
                                "    return self.conv_transpose(x)", 128),
}


def source(name: str) -> str:
    """The KernelBench-format source of variant ``name``."""
    body, batch = VARIANTS[name]
    return HEAD.format(batch=batch) + "".join(f"        {line}\n" for line in body.splitlines())


def summarize(trace: Path) -> dict[str, dict[str, dict[str, float]]]:
    """Per task in the trace, per bracketed kind: the calls, the late ones and the staging's parts' medians (µs)."""
    calls: dict[str, dict[str, list[dict[str, Any]]]] = {}
    task = "?"
    for line in trace.read_text().splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if event.get("event") == "job":
            task = str(event.get("task", "?"))
        elif event.get("event") == "bracketed" and event.get("staged_parts_us"):
            calls.setdefault(task, {}).setdefault(str(event.get("kind")), []).append(event)
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name, kinds in calls.items():
        for kind, events in kinds.items():
            parts = list(zip(*[e["staged_parts_us"] for e in events], strict=False))
            out.setdefault(name, {})[kind] = {
                "calls": len(events), "late": sum(bool(e.get("late")) for e in events),
                "inputs": statistics.median(parts[0]), "poison": statistics.median(parts[1]),
                "flush": statistics.median(parts[2]),
                "claim": statistics.median(float(e.get("claim_us") or 0.0) for e in events),
            }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="folder for the tasks, the trace, the table and the summary")
    parser.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--protocol", default="cudagym[yardstick=retimed]")
    parser.add_argument("--list", action="store_true", help="print the variants and exit")
    parser.add_argument("--dry-run", action="store_true", help="write the tasks' sources, judge nothing")
    args = parser.parse_args(argv)
    if args.list:
        for name in VARIANTS:
            body, batch = VARIANTS[name]
            print(f"{name:15s} batch {batch:3d}: {body.replace(chr(10), '; ')}")
        return 0
    if args.out is None:
        parser.error("--out is required")
    from cudagym.task import make_task

    args.out.mkdir(parents=True, exist_ok=True)
    tasks = []
    for name in args.variants:
        text = source(name)
        (args.out / f"{name}.py").write_text(text)
        tasks.append(make_task(text, id=f"staging/{name}", suite="staging-probe", level=2, name=name,
                               origin=str(args.out / f"{name}.py")))
    if args.dry_run:
        print(f"{len(tasks)} task(s) written under {args.out}; nothing judged (--dry-run)")
        return 0
    trace = (args.out / "staging.trace").resolve()
    trace.unlink(missing_ok=True)
    os.environ["CUDAGYM_TRACE"] = str(trace)  # read by the judge's trusted workers as they start
    from cudagym.commands.baselines import check
    from cudagym.judge.task_check import CheckPlan

    # one job at a time on one GPU: the trace's lines follow one task at a time, and no job overlaps another's staging
    code = check(tasks, args.protocol, CheckPlan(table=str(args.out / "staging.md"), window=1), devices="auto",
                 journal=args.out / "staging.jsonl")  # the results in full: each profiled forward's kernels
    rows = summarize(trace) if trace.exists() else {}
    if not rows:
        print("no staged call in the trace (no GPU, or every job ended before its timing)", file=sys.stderr)
        return code or 1
    lines = ["| variant | kind | calls | late | inputs us | poison us | flush us | claim us |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for task in tasks:
        for kind in ("calibrate", "reference", "timed"):
            r = rows.get(task.id, {}).get(kind)
            if r:
                lines.append(f"| {task.name} | {kind} | {r['calls']:.0f} | {r['late']:.0f} | {r['inputs']:.1f} | "
                             f"{r['poison']:.1f} | {r['flush']:.1f} | {r['claim']:.1f} |")
    text = "\n".join(lines)
    (args.out / "staging-summary.md").write_text(text + "\n")
    print(text)
    return code


if __name__ == "__main__":
    sys.exit(main())
