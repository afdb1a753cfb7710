"""Does reading outputs from the shared heap change what honest code is timed at? The same solutions, both ways.

Run on the GPU host (one GPU)::

    python benchmarks/heap_probe.py --out "$OUT/heap" [--tasks bundled/L1/01_Swish ...] [--rounds 2]

Two judges on the same GPU, one under ``--protocol`` (default ``cudagym``: the runner's outputs read from the heap
it shares with the worker, ``cudagym.judge.split.heap``) and one under the same protocol with ``delivery=copy``
(the runner copies them into the output arena, as before session 31). Each task's bundled solution is submitted to
both in turn, round after round (the order alternates, so drift falls on both alike). The heap should move no
honest median beyond the judge's own repeatability (about 0.3-0.5% on 130-290 µs kernels): a task far off names a
cost of the heap (its allocations, the words, the reserve's copy) or of the copy the old delivery forgave.

Writes ``rows.json`` and ``summary.md`` under ``--out`` (the table is printed too).
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HEAP_LINE = "the runner's heap:"  # the runner's own note (cudagym.judge.split.runner._Server._end)


@dataclass
class Row:
    """One task under both deliveries: each round's candidate median and verdict, and the runner's heap note."""

    task: str
    heap_us: list[float] = field(default_factory=list)
    copy_us: list[float] = field(default_factory=list)
    heap_status: list[str] = field(default_factory=list)
    copy_status: list[str] = field(default_factory=list)
    heap_note: str = ""

    @property
    def ratio(self) -> float:
        """The heap's median over the copy's (medians over the rounds; 0 where either has none)."""
        if not self.heap_us or not self.copy_us:
            return 0.0
        return statistics.median(self.heap_us) / statistics.median(self.copy_us)


def table(rows: list[Row]) -> str:
    """The rows as a markdown table, then the median ratio over the tasks that have one."""
    lines = ["| task | heap median µs | copy median µs | heap / copy | heap verdicts | copy verdicts | runner's heap |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        heap = f"{statistics.median(row.heap_us):.2f}" if row.heap_us else "-"
        copy = f"{statistics.median(row.copy_us):.2f}" if row.copy_us else "-"
        ratio = f"{row.ratio:.4f}" if row.ratio else "-"
        note = row.heap_note.removeprefix(HEAP_LINE).strip().replace("|", "/")[:120]
        lines.append(f"| {row.task} | {heap} | {copy} | {ratio} | {', '.join(row.heap_status)} | "
                     f"{', '.join(row.copy_status)} | {note} |")
    ratios = [r.ratio for r in rows if r.ratio]
    if ratios:
        lines.append("")
        lines.append(f"median heap / copy over {len(ratios)} task(s): {statistics.median(ratios):.4f} "
                     f"(range {min(ratios):.4f}-{max(ratios):.4f})")
    return "\n".join(lines)


def _record(row: Row, delivery: str, result: Any) -> None:
    ok = result.status.value == "ok"
    (row.heap_status if delivery == "heap" else row.copy_status).append(result.status.value)
    if ok:
        (row.heap_us if delivery == "heap" else row.copy_us).append(result.candidate.median_us)
    if delivery == "heap":
        row.heap_note = next((ln for ln in result.log.splitlines() if ln.startswith(HEAP_LINE)), row.heap_note)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="*", default=None, help="bundled task ids (default: every bundled task)")
    parser.add_argument("--protocol", default="cudagym")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    from cudagym.judge.interface import EvalMode
    from cudagym.judge.local import LocalJudge, probe_gpus
    from cudagym.judge.protocol import get_protocol
    from cudagym.sources.bundled import BundledSource

    source = BundledSource()
    ids = args.tasks or source.ids()
    base = get_protocol(args.protocol)
    copy = get_protocol(f"{args.protocol}[delivery=copy]")
    devices = list(probe_gpus("auto").device_ids[:1])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = [Row(task) for task in ids]
    with LocalJudge(base, devices=devices) as heap_judge, LocalJudge(copy, devices=devices) as copy_judge:
        judges = {"heap": heap_judge, "copy": copy_judge}
        for k in range(args.rounds):
            for i, row in enumerate(rows):
                order = ("heap", "copy") if (i + k) % 2 == 0 else ("copy", "heap")
                for delivery in order:
                    result = judges[delivery].evaluate(source.get(row.task), source.solution(row.task), EvalMode.SUBMIT)
                    _record(row, delivery, result)
                    print(f"round {k} {row.task} {delivery}: {result.status.value} {result.message[:160]}", flush=True)
    (out / "rows.json").write_text(json.dumps([row.__dict__ for row in rows], indent=1))
    text = table(rows)
    (out / "summary.md").write_text(f"# Heap vs copy delivery ({base.id}, {args.rounds} round(s))\n\n{text}\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
