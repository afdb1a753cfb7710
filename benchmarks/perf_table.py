"""Turn one pytest-benchmark run (``--benchmark-json`` files) into the README's performance table.

Usage (repository root)::

    python -m pytest benchmarks/bench_step.py benchmarks/bench_tokens.py --benchmark-only \\
        --benchmark-json perf.json
    python benchmarks/perf_table.py perf.json [more.json ...] [--gpu "NVIDIA H200"] [--out table.md]
    python benchmarks/perf_table.py perf.json --update README.md   # between the perf-table markers

The table is labelled with the hardware (CPU model and cores from pytest-benchmark's ``machine_info``; the
GPU from ``--gpu`` or a benchmark's ``extra_info["gpu"]``) and the commit (``commit_info``, ``-dirty`` when the
tree had changes), so a number never loses where it was measured. Times are the median with the IQR and
the min over the rounds; each benchmark's scalar ``extra_info`` (a p50 of inner timings, a ratio, a tier
count) follows in the notes column.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

START = "<!-- perf-table:start -->"
END = "<!-- perf-table:end -->"
WHAT = {  # the module -> what it measures
    "bench_step": "env step overhead and action parsing (FakeJudge)",
    "bench_tokens": "token counting",
    "bench_build": "build latency per format, beside load_inline of the same kernel",
    "bench_eval": "evaluation latency and repeatability (SUBMIT through the judge)",
    "soak_judge": "judge throughput under faults",
}
MAX_NOTE_CHARS = 120


def load_runs(paths: Sequence[str | Path]) -> list[dict[str, Any]]:
    """Read pytest-benchmark JSON files; exits with a message when one is not such a file."""
    runs = []
    for path in paths:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise SystemExit(f"perf_table: cannot read {path} as JSON: {exc}") from exc
        if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
            raise SystemExit(f"perf_table: expected pytest-benchmark JSON (--benchmark-json) in {path}")
        runs.append(data)
    return runs


def fmt_seconds(value: float) -> str:
    """A duration in the unit that suits it (ns, µs, ms or s), three significant digits."""
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value / 1e-9:.3g} ns"


def label(runs: Sequence[Mapping[str, Any]], gpu: str | None) -> str:
    """``CPU (cores), GPU; commit <sha>[-dirty] on <branch>, <datetime>`` of the runs (their first file's)."""
    first = runs[0]
    cpu = first.get("machine_info", {}).get("cpu", {})
    commit = first.get("commit_info", {})
    sha = str(commit.get("id", ""))[:12] or "unknown"
    if commit.get("dirty"):
        sha += "-dirty"
    gpus = {str(b.get("extra_info", {}).get("gpu")) for r in runs for b in r["benchmarks"]
            if b.get("extra_info", {}).get("gpu")}
    gpu_text = gpu or ", ".join(sorted(gpus)) or "no GPU recorded"
    python = first.get("machine_info", {}).get("python_version", "?")
    return (f"{cpu.get('brand_raw', 'unknown CPU')} ({cpu.get('count', '?')} cores), GPU: {gpu_text}; "
            f"commit {sha} on {commit.get('branch', '?')}; {first.get('datetime', '?')}; Python {python}, "
            f"pytest-benchmark {first.get('version', '?')}")


def notes(extra: Mapping[str, Any]) -> str:
    """The scalar ``extra_info`` entries as ``key=value``, numbers to three significant digits."""
    parts = []
    for key, value in extra.items():
        if key == "gpu" or isinstance(value, (dict, list)):
            continue
        shown = f"{value:.3g}" if isinstance(value, float) else str(value)
        parts.append(f"{key}={shown}")
    text = ", ".join(parts)
    return text if len(text) <= MAX_NOTE_CHARS else text[: MAX_NOTE_CHARS - 3] + "..."


def table(runs: Sequence[Mapping[str, Any]], gpu: str | None = None) -> str:
    """The Markdown table of every benchmark of the runs, grouped by module, with its label line."""
    lines = [f"Measured on {label(runs, gpu)}.", "",
             "| what | benchmark | median | IQR | min | rounds | notes |", "|---|---|---|---|---|---|---|"]
    for run in runs:
        for bench in run["benchmarks"]:
            module = Path(str(bench.get("fullname", "")).split("::")[0]).stem
            stats = bench["stats"]
            lines.append(
                f"| {WHAT.get(module, module)} | `{bench['name']}` | {fmt_seconds(stats['median'])} | "
                f"{fmt_seconds(stats['iqr'])} | {fmt_seconds(stats['min'])} | {stats['rounds']} | "
                f"{notes(bench.get('extra_info', {})).replace('|', '/')} |"
            )
    return "\n".join(lines)


def update(readme: Path, text: str) -> None:
    """Replace what lies between the perf-table markers of ``readme`` with ``text``; exits when they are missing."""
    content = readme.read_text(encoding="utf-8")
    pattern = re.compile(re.escape(START) + r".*?" + re.escape(END), re.S)
    if not pattern.search(content):
        raise SystemExit(f"perf_table: {readme} has no {START} ... {END} markers to put the table between")
    readme.write_text(pattern.sub(lambda _: f"{START}\n{text}\n{END}", content), encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    """Print (or write) the table of the given runs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", nargs="+", help="pytest-benchmark --benchmark-json files of one run")
    parser.add_argument("--gpu", default=None, help="the GPU the run used (default: from extra_info)")
    parser.add_argument("--out", default=None, help="write the table to this file")
    parser.add_argument("--update", default=None, metavar="README", help="put the table between the markers")
    args = parser.parse_args(argv)
    text = table(load_runs(args.json), args.gpu)
    if args.update:
        update(Path(args.update), text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    if not args.update and not args.out:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
