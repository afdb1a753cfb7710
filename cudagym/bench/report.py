"""``cudagym report RUN_DIR``: the Table-1 metrics of a bench run as Markdown, CSV and PNG plots.

Per level and overall, under final-state and best-of-trajectory scoring: CUDA Agent's Table-1 columns
(pass rate, faster than eager, faster than torch.compile, geomean speedup over each), KernelBench's fast_p
for p in 0, 0.5, 0.8, 1.0, 1.5, 2.0 against both baselines, pass@k when tasks have K > 1 samples, tier
counts, and turns and tokens per episode (definitions: :mod:`cudagym.bench.metrics`). Written to ``--out``
(default ``RUN_DIR/report``): ``report.md``, ``table1.csv``, ``fast_p.csv``, ``pass_at_k.csv``,
``tiers.csv``, ``episodes.csv`` and, with matplotlib installed, the figures of :mod:`cudagym.bench.plots`.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from cudagym.bench import plots
from cudagym.bench.journal import read_entries, read_manifest
from cudagym.bench.metrics import FAST_P, OVERALL, TIERS, EpisodeSummary, GroupMetrics, by_level
from cudagym.errors import ConfigError
from cudagym.paths import writable_dir

SCORINGS = ("final", "best")
TABLE1_COLUMNS = ("group", "scoring", "episodes", "tasks", "evaluated", "pass_rate", "faster_than_eager",
                  "faster_than_compile", "geomean_speedup_vs_eager", "geomean_speedup_vs_compile",
                  "mean_turns", "mean_env_tokens", "mean_model_tokens")
NO_PLOTS = "Plots: not drawn, matplotlib is not installed (`pip install 'cudagym[plots]'`); the tables are complete."


@dataclass(frozen=True)
class Report:
    """What ``cudagym report`` wrote.

    Attributes:
        markdown: The path of ``report.md``.
        csvs: The CSV files.
        plots: The PNG files (empty without matplotlib).
        rows: Scoring -> the per-level and overall metrics.
    """

    markdown: Path
    csvs: tuple[Path, ...]
    plots: tuple[Path, ...]
    rows: Mapping[str, Sequence[GroupMetrics]]


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the command's arguments."""
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a `cudagym bench --out` folder")
    parser.add_argument("--out", default=None, metavar="DIR", help="where to write (default: RUN_DIR/report)")
    parser.add_argument("--no-plots", action="store_true", help="tables only")


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Write the report; prints where it went and the overall Table-1 row."""
    out = out or sys.stdout
    report = write_report(args.run_dir, args.out, draw=not args.no_plots)
    print(report.markdown.read_text(encoding="utf-8"), file=out)
    print(f"wrote {report.markdown}, {len(report.csvs)} CSV file(s), {len(report.plots)} plot(s)", file=out)
    return 0


def write_report(run_dir: str | Path, out_dir: str | Path | None = None, *, draw: bool = True) -> Report:
    """Compute every metric of the run and write the files.

    Raises:
        ConfigError: ``run_dir`` is not a run folder, no episode of it has finished, or the report's folder
            cannot be written.
    """
    run_dir = Path(run_dir)
    manifest = read_manifest(run_dir)
    entries = read_entries(run_dir)
    summaries = [e.summary for e in entries]
    if not summaries:
        raise ConfigError(f"{run_dir} has no finished episode yet (episodes.jsonl is empty or missing)")
    target = writable_dir(out_dir if out_dir is not None else run_dir / "report", "--out")
    rows = {scoring: by_level(summaries, scoring=scoring) for scoring in SCORINGS}
    csvs = write_csvs(target, rows, summaries)
    drawn: list[Path] = []
    note = ""
    if draw and plots.available():
        drawn = plots.write_plots(summaries, rows["final"], target)
    elif draw:
        note = NO_PLOTS
    markdown = target / "report.md"
    ran = sorted({str(t.info["protocol_id"]) for e in entries for t in e.record.turns if t.info.get("protocol_id")})
    markdown.write_text(render_markdown(manifest, rows, drawn, note, planned=manifest.get("episodes_planned"),
                                        protocols=ran), encoding="utf-8")
    return Report(markdown, tuple(csvs), tuple(drawn), rows)


def write_csvs(target: Path, rows: Mapping[str, Sequence[GroupMetrics]],
               summaries: Sequence[EpisodeSummary]) -> list[Path]:
    """``table1.csv``, ``fast_p.csv``, ``pass_at_k.csv``, ``tiers.csv`` and ``episodes.csv`` (unrounded)."""
    every = [r for scoring in SCORINGS for r in rows[scoring]]
    tables: dict[str, tuple[Sequence[str], Iterable[Sequence[Any]]]] = {
        "table1.csv": (TABLE1_COLUMNS, ([getattr(r, c) for c in TABLE1_COLUMNS] for r in every)),
        "fast_p.csv": (("group", "scoring", "baseline", "p", "fast_p"),
                       ([r.group, r.scoring, base, p, values[p]] for r in every
                        for base, values in (("eager", r.fast_p_eager), ("compile", r.fast_p_compile))
                        for p in FAST_P)),
        "pass_at_k.csv": (("group", "scoring", "k", "pass_at_k"),
                          ([r.group, r.scoring, k, v] for r in every for k, v in r.pass_at.items())),
        "tiers.csv": (("group", "scoring", *(f"tier_{t}" for t in TIERS)),
                      ([r.group, r.scoring, *(r.tiers[t] for t in TIERS)] for r in every)),
        "episodes.csv": (EPISODE_COLUMNS, (_episode_row(s) for s in summaries)),
    }
    paths = []
    for name, (header, body) in tables.items():
        path = target / name
        with open(path, "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(header)
            writer.writerows(body)
        paths.append(path)
    return paths


EPISODE_COLUMNS = ("task_id", "level", "sample", "final_tier", "final_status", "final_speedup_vs_eager",
                   "final_speedup_vs_compile", "best_tier", "best_speedup_vs_eager", "best_speedup_vs_compile",
                   "reward", "turns", "env_tokens", "model_tokens", "invalid_actions", "episode_end", "wall_time_s")


def _episode_row(s: EpisodeSummary) -> list[Any]:
    return [s.task_id, s.level, s.sample, s.final.tier, s.final.status, s.final.speedup_vs_eager,
            s.final.speedup_vs_compile, s.best.tier, s.best.speedup_vs_eager, s.best.speedup_vs_compile,
            s.reward, s.turns, s.env_tokens, s.model_tokens, s.invalid_actions, s.episode_end, s.wall_time_s]


def render_markdown(manifest: Mapping[str, Any], rows: Mapping[str, Sequence[GroupMetrics]],
                    drawn: Sequence[Path], note: str, *, planned: Any = None,
                    protocols: Sequence[str] = ()) -> str:
    """The report as Markdown: the run's facts, then one section per table, then the figures.

    ``protocols``: the protocol ids the episodes' observations name (what ran), else the manifest's.
    """
    plan, hw = manifest.get("plan", {}), manifest.get("hardware", {})
    protocol = ", ".join(protocols) or plan.get("protocol") or manifest.get("protocol_id") or "unknown"
    done = rows["final"][-1].episodes
    lines = [
        "# cudagym bench report", "",
        f"- agent `{plan.get('agent')}`, {_what(plan)}, "
        f"K = {plan.get('k')} sample(s) per task, protocol {protocol}, "
        f"format {plan.get('format')}",
        f"- episodes: {done} finished" + (f" of {planned} planned" if planned is not None else ""),
        f"- GPU {hw.get('gpu', '?')} (driver {hw.get('driver') or '?'}, CUDA {hw.get('cuda') or '?'}, "
        f"torch {hw.get('torch') or '?'}); cudagym {manifest.get('cudagym')} at commit "
        f"{manifest.get('commit') or 'unknown'}; started {manifest.get('started')}",
        "- rates over all episodes of a group; geomeans over its correct, timed episodes; \"faster\" means "
        "correct and more than the protocol's threshold (5%) faster", "",
    ]
    for scoring, title in (("final", "final state (the submitted solution)"),
                           ("best", "best state of the trajectory")):
        lines += [f"## Table 1, {title}", "", *_table1(rows[scoring]), ""]
    lines += ["## fast_p (final state)", "", *_fast_p_table(rows["final"]), ""]
    if any(r.pass_at for r in rows["final"]):
        lines += ["## pass@k (unbiased estimator)", "", *_pass_at_table(rows), ""]
    lines += ["## Tiers (final state)", "", *_tier_table(rows["final"]), ""]
    lines += ["## Turns and tokens per episode", "", *_cost_table(rows["final"]), ""]
    if drawn:
        lines += ["## Figures", "", *(f"![{p.stem}]({p.name})" for p in drawn), ""]
    elif note:
        lines += [note, ""]
    return "\n".join(lines)


def _what(plan: Mapping[str, Any]) -> str:
    if plan.get("env"):
        limit = plan.get("limit")
        return f"env {plan['env']}" + (f" (first {limit} tasks)" if limit is not None else "")
    tasks = list(plan.get("tasks") or [])
    return f"tasks {', '.join(tasks)}" if len(tasks) <= 4 else f"{len(tasks)} tasks ({tasks[0]}, ...)"


def _md(header: Sequence[str], body: Iterable[Sequence[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in body]
    return out


def _label(group: str) -> str:
    return "**overall**" if group == OVERALL else f"level {group}"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _x(x: float) -> str:
    return f"{x:.2f}x" if x > 0 else "-"


def _table1(rows: Sequence[GroupMetrics]) -> list[str]:
    header = ("", "episodes", "evaluated", "pass rate", "faster than eager", "faster than compile",
              "geomean vs eager", "geomean vs compile")
    return _md(header, ([_label(r.group), r.episodes, r.evaluated, _pct(r.pass_rate), _pct(r.faster_than_eager),
                         _pct(r.faster_than_compile), _x(r.geomean_speedup_vs_eager),
                         _x(r.geomean_speedup_vs_compile)] for r in rows))


def _fast_p_table(rows: Sequence[GroupMetrics]) -> list[str]:
    header = ("", "baseline", *(f"fast_{p:g}" for p in FAST_P))
    return _md(header, ([_label(r.group), base, *(_pct(values[p]) for p in FAST_P)] for r in rows
                        for base, values in (("eager", r.fast_p_eager), ("compile", r.fast_p_compile))))


def _pass_at_table(rows: Mapping[str, Sequence[GroupMetrics]]) -> list[str]:
    ks = sorted({k for r in rows["final"] for k in r.pass_at})
    header = ("", "scoring", *(f"pass@{k}" for k in ks))
    return _md(header, ([_label(r.group), scoring, *(_pct(r.pass_at[k]) if k in r.pass_at else "-" for k in ks)]
                        for scoring in SCORINGS for r in rows[scoring]))


def _tier_table(rows: Sequence[GroupMetrics]) -> list[str]:
    names = {-1: "tier -1", 0: "not evaluated", 1: "tier 1", 2: "tier 2", 3: "tier 3"}
    return _md(("", *(names[t] for t in TIERS)), ([_label(r.group), *(r.tiers[t] for t in TIERS)] for r in rows))


def _cost_table(rows: Sequence[GroupMetrics]) -> list[str]:
    header = ("", "turns", "env tokens", "model tokens")
    return _md(header, ([_label(r.group), f"{r.mean_turns:.1f}", f"{r.mean_env_tokens:.0f}",
                         f"{r.mean_model_tokens:.0f}"] for r in rows))
