"""cudagym's baselines next to KernelBench's published ones: Spearman correlation per level, stale rows left out.

Reads the CSV tables of ``cudagym baselines check`` (``benchmarks/kernelbench_sweep.sh`` writes one per level and
protocol) and KernelBench's published timings (``results/timing/<hardware>/baseline_time_torch.json`` and
``baseline_time_torch_compile_inductor_default.json`` in a KernelBench checkout, in milliseconds), and reports per
level, over the tasks both have: the Spearman rank correlation of the eager/torch.compile ratio (which of the two
is faster, and by how much) and of the eager time itself.

Stale rows. KernelBench's published timings predate some v0.2 problem changes, so a few rows time a different
problem than the checkout holds (``L1/12``'s eager time is 2.68 ms in the H100 file, 0.055 ms on an H200). A row
is left out when KernelBench's changelog names the problem as updated, or when the published/measured eager ratio
is more than ``--outlier-factor`` (default 4) away from that level's median ratio (different GPUs shift every
task alike; a changed problem moves alone). The report says how many were left out, and which.

    python benchmarks/kernelbench_compare.py --kernelbench-dir .data/kb [--hardware H100_Modal] TABLE.csv ...
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import statistics
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

EAGER_FILE = "baseline_time_torch.json"
COMPILE_FILE = "baseline_time_torch_compile_inductor_default.json"
CHANGELOG_LINE = re.compile(r"Updated\s+Level(\d+)/(\S+?)\.py")
DEFAULT_OUTLIER_FACTOR = 4.0


@dataclass(frozen=True)
class Times:
    """One task's eager and torch.compile times, in microseconds."""

    eager_us: float
    compile_us: float

    @property
    def ratio(self) -> float:
        """eager / torch.compile (above 1: torch.compile is faster)."""
        return self.eager_us / self.compile_us


@dataclass
class LevelReport:
    """The comparison of one level."""

    level: int
    tasks: list[str] = field(default_factory=list)  # compared
    stale_changelog: list[str] = field(default_factory=list)
    stale_outlier: list[str] = field(default_factory=list)
    ratio_spearman: float = math.nan
    eager_spearman: float = math.nan
    median_published_over_measured: float = math.nan


def task_id(level: int, file_name: str) -> str:
    """cudagym's id of a KernelBench problem file: ``L1/12_Matmul_with_diagonal_matrices_``."""
    return f"L{level}/{file_name.removesuffix('.py')}"


def load_published(kernelbench_dir: Path, hardware: str) -> dict[str, Times]:
    """KernelBench's published eager and torch.compile (inductor, default mode) means, by task id.

    Raises:
        FileNotFoundError: The checkout has no timing files for ``hardware``.
    """
    folder = kernelbench_dir / "results" / "timing" / hardware
    eager, compiled = (json.loads((folder / name).read_text()) for name in (EAGER_FILE, COMPILE_FILE))
    found: dict[str, Times] = {}
    for level_key, problems in eager.items():
        level = int(level_key.removeprefix("level"))
        for name, stats in problems.items():
            other = compiled.get(level_key, {}).get(name)
            if other and stats.get("mean", 0) > 0 and other.get("mean", 0) > 0:
                found[task_id(level, name)] = Times(1000.0 * stats["mean"], 1000.0 * other["mean"])
    return found


def load_measured(tables: Iterable[Path]) -> dict[str, tuple[int, Times]]:
    """(level, times) by task id from ``cudagym baselines check`` CSV tables: OK rows with both times only."""
    found: dict[str, tuple[int, Times]] = {}
    for table in tables:
        with table.open(newline="", encoding="utf-8") as fh:
            for row in csv.DictReader(fh):
                eager, compiled = float(row["eager_us"] or 0), float(row["compile_us"] or 0)
                if row["status"] == "ok" and eager > 0 and compiled > 0:
                    found[row["task_id"]] = (int(row["level"]), Times(eager, compiled))
    return found


def changelog_updates(kernelbench_dir: Path) -> set[str]:
    """Task ids KernelBench's changelog (``KernelBench/changelog/v*``) names as updated."""
    folder = kernelbench_dir / "KernelBench" / "changelog"
    updated: set[str] = set()
    for path in sorted(folder.glob("v*")) if folder.is_dir() else []:
        text = path.read_text(encoding="utf-8", errors="replace")
        updated.update(task_id(int(level), name) for level, name in CHANGELOG_LINE.findall(text))
    return updated


def outliers(pairs: dict[str, tuple[Times, Times]], factor: float) -> set[str]:
    """Ids whose published/measured eager ratio is over ``factor`` away from the median ratio of ``pairs``."""
    if not pairs:
        return set()
    logs = {tid: math.log(published.eager_us / measured.eager_us) for tid, (measured, published) in pairs.items()}
    center = statistics.median(logs.values())
    return {tid for tid, value in logs.items() if abs(value - center) > math.log(factor)}


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation (NaN with fewer than three pairs)."""
    if len(a) < 3:
        return math.nan
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic)


def compare(measured: dict[str, tuple[int, Times]], published: dict[str, Times], stale: set[str],
            factor: float = DEFAULT_OUTLIER_FACTOR) -> list[LevelReport]:
    """One report per level present in ``measured``, over the tasks ``published`` has too."""
    reports = []
    for level in sorted({lv for lv, _ in measured.values()}):
        report = LevelReport(level)
        pairs = {tid: (times, published[tid]) for tid, (lv, times) in measured.items()
                 if lv == level and tid in published}
        report.stale_changelog = sorted(tid for tid in pairs if tid in stale)
        fresh = {tid: pair for tid, pair in pairs.items() if tid not in stale}
        report.stale_outlier = sorted(outliers(fresh, factor))
        kept = {tid: pair for tid, pair in fresh.items() if tid not in report.stale_outlier}
        report.tasks = sorted(kept)
        ours = [kept[t][0] for t in report.tasks]
        theirs = [kept[t][1] for t in report.tasks]
        report.ratio_spearman = spearman([m.ratio for m in ours], [p.ratio for p in theirs])
        report.eager_spearman = spearman([m.eager_us for m in ours], [p.eager_us for p in theirs])
        if report.tasks:
            report.median_published_over_measured = statistics.median(
                p.eager_us / m.eager_us for m, p in zip(ours, theirs, strict=True))
        reports.append(report)
    return reports


def render(reports: Sequence[LevelReport], hardware: str, tables: Sequence[Path]) -> str:
    """The reports as markdown."""
    lines = [f"# cudagym vs KernelBench's published baselines ({hardware})", "",
             f"Measured: {', '.join(str(t) for t in tables)}", "",
             "| level | tasks compared | Spearman eager/compile | Spearman eager time | median published/measured "
             "eager | stale: changelog | stale: outlier |", "|---:|---:|---:|---:|---:|---:|---:|"]
    for r in reports:
        lines.append(f"| {r.level} | {len(r.tasks)} | {r.ratio_spearman:.2f} | {r.eager_spearman:.2f} | "
                     f"{r.median_published_over_measured:.2f} | {len(r.stale_changelog)} | {len(r.stale_outlier)} |")
    left_out = [t for r in reports for t in (*r.stale_changelog, *r.stale_outlier)]
    lines += ["", f"{len(left_out)} stale rows left out: {', '.join(left_out) or 'none'}."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the comparison; prints the markdown report (and writes it to ``--out``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tables", nargs="+", type=Path, help="CSV tables of `cudagym baselines check`")
    parser.add_argument("--kernelbench-dir", type=Path, required=True, help="a KernelBench checkout (repo root)")
    parser.add_argument("--hardware", default="H100_Modal", help="folder under results/timing (default H100_Modal)")
    parser.add_argument("--outlier-factor", type=float, default=DEFAULT_OUTLIER_FACTOR)
    parser.add_argument("--out", type=Path, help="also write the report here")
    args = parser.parse_args(argv)
    tables = [t for t in args.tables if t.exists()]
    if not tables:
        print(f"no tables found among {', '.join(map(str, args.tables))}", file=sys.stderr)
        return 2
    try:
        published = load_published(args.kernelbench_dir, args.hardware)
    except FileNotFoundError as exc:
        print(f"no published timings: {exc}; expected a KernelBench checkout with results/timing/{args.hardware}/",
              file=sys.stderr)
        return 2
    reports = compare(load_measured(tables), published, changelog_updates(args.kernelbench_dir), args.outlier_factor)
    text = render(reports, args.hardware, tables)
    print(text, end="")
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
