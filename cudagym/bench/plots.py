"""The report's figures, drawn with matplotlib (the optional ``plots`` extra: ``pip install 'cudagym[plots]'``).

Three PNGs of :data:`SIZE_PX` pixels each (a fixed figure size and dpi, no tight bounding box, so every
run's figures line up in a paper):

- ``speedup_distribution.png``: per level, the speedups of the correct episodes over eager and over
  torch.compile, on a log axis with lines at 1.0 (as fast) and 1.05 (the tier threshold).
- ``fast_p.png``: fast_p against p, against eager (solid) and torch.compile (dashed), per level and overall.
- ``tiers.png``: per level, the episodes in each tier, stacked.

Figures are built on :class:`matplotlib.figure.Figure` directly (no pyplot state), so drawing is safe from
any thread and never opens a window.
"""

from __future__ import annotations

import importlib.util
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cudagym.bench.metrics import FAST_P, OVERALL, TIERS, EpisodeSummary, GroupMetrics

FIGSIZE_IN = (8.0, 4.5)
DPI = 100
SIZE_PX = (int(FIGSIZE_IN[0] * DPI), int(FIGSIZE_IN[1] * DPI))  # (width, height)
FILES = ("speedup_distribution.png", "fast_p.png", "tiers.png")
TIER_COLOURS = {-1: "#c0392b", 0: "#95a5a6", 1: "#f1c40f", 2: "#5dade2", 3: "#27ae60"}
TIER_LABELS = {-1: "tier -1 (failed)", 0: "not evaluated", 1: "tier 1", 2: "tier 2", 3: "tier 3"}


def available() -> bool:
    """True when matplotlib is installed."""
    return importlib.util.find_spec("matplotlib") is not None


def write_plots(summaries: Sequence[EpisodeSummary], rows: Sequence[GroupMetrics], out_dir: Path,
                *, scoring: str = "final") -> list[Path]:
    """Draw the three figures of ``summaries`` (``rows``: :func:`~cudagym.bench.metrics.by_level`) into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / name for name in FILES]
    _speedups(summaries, scoring).savefig(paths[0], dpi=DPI)
    _fast_p(rows).savefig(paths[1], dpi=DPI)
    _tiers(rows).savefig(paths[2], dpi=DPI)
    return paths


def _figure() -> tuple[Any, Any]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=FIGSIZE_IN, dpi=DPI, layout="constrained")
    return fig, fig.subplots()


def _speedups(summaries: Sequence[EpisodeSummary], scoring: str) -> Any:
    fig, ax = _figure()
    levels: dict[int, dict[str, list[float]]] = defaultdict(lambda: {"eager": [], "compile": []})
    for s in summaries:
        o = getattr(s, scoring)
        if o.correct:
            levels[s.level]["eager"].append(o.speedup_vs_eager)
            levels[s.level]["compile"].append(o.speedup_vs_compile)
    names = sorted(levels)
    data, positions, colours = [], [], []
    for i, level in enumerate(names):
        for j, (baseline, colour) in enumerate((("eager", "#2e86c1"), ("compile", "#e67e22"))):
            values = [v for v in levels[level][baseline] if v > 0]
            if values:
                data.append(values)
                positions.append(i * 3 + j)
                colours.append(colour)
    if data:
        parts = ax.boxplot(data, positions=positions, widths=0.8, patch_artist=True, showfliers=False)
        for patch, colour in zip(parts["boxes"], colours, strict=True):
            patch.set_facecolor(colour)
            patch.set_alpha(0.4)
        for values, x, colour in zip(data, positions, colours, strict=True):  # every episode as a dot
            offsets = [x + 0.3 * ((k * 0.618) % 1.0 - 0.5) for k in range(len(values))]
            ax.scatter(offsets, values, s=12, color=colour, zorder=3)
        ax.set_xticks([i * 3 + 0.5 for i in range(len(names))], [f"level {lv}" for lv in names])
    else:
        ax.text(0.5, 0.5, "no correct, timed episode", ha="center", va="center", transform=ax.transAxes)
        ax.set_xticks([])
    _log_axis(ax, [v for values in data for v in values])
    ax.axhline(1.0, color="black", linewidth=1.0, label="1.0 (as fast)")
    ax.axhline(1.05, color="black", linewidth=1.0, linestyle="--", label="1.05 (tier threshold)")
    ax.plot([], [], color="#2e86c1", linewidth=6, alpha=0.6, label="vs eager")
    ax.plot([], [], color="#e67e22", linewidth=6, alpha=0.6, label="vs torch.compile")
    ax.set_ylabel("speedup (baseline time / candidate time)")
    ax.set_title(f"Speedups of correct episodes ({scoring} state)")
    ax.legend(loc="best", fontsize="small")
    return fig


def _log_axis(ax: Any, values: Sequence[float]) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator

    ax.set_yscale("log")
    ax.set_ylim(min([*values, 1.0]) / 1.5, max([*values, 1.05]) * 1.5)
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_minor_locator(LogLocator(base=10, subs=(1.0,)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))


def _fast_p(rows: Sequence[GroupMetrics]) -> Any:
    fig, ax = _figure()
    cycle = ["#2e86c1", "#27ae60", "#8e44ad", "#c0392b", "#16a085", "#d35400"]
    for i, row in enumerate(rows):
        colour = "black" if row.group == OVERALL else cycle[i % len(cycle)]
        label = "overall" if row.group == OVERALL else f"level {row.group}"
        ax.plot(FAST_P, [row.fast_p_eager[p] for p in FAST_P], marker="o", color=colour, label=f"{label} vs eager")
        ax.plot(FAST_P, [row.fast_p_compile[p] for p in FAST_P], marker="s", linestyle="--", color=colour,
                label=f"{label} vs compile")
    ax.set_xlabel("p (speedup threshold)")
    ax.set_ylabel("fast_p (correct and speedup > p)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"fast_p ({rows[0].scoring if rows else 'final'} state)")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize="x-small", ncol=2)
    return fig


def _tiers(rows: Sequence[GroupMetrics]) -> Any:
    fig, ax = _figure()
    labels = ["overall" if r.group == OVERALL else f"level {r.group}" for r in rows]
    bottom = [0] * len(rows)
    for tier in TIERS:
        counts = [r.tiers.get(tier, 0) for r in rows]
        ax.bar(labels, counts, bottom=bottom, color=TIER_COLOURS[tier], label=TIER_LABELS[tier])
        bottom = [b + c for b, c in zip(bottom, counts, strict=True)]
    ax.set_ylabel("episodes")
    ax.set_title(f"Tiers ({rows[0].scoring if rows else 'final'} state)")
    ax.legend(loc="best", fontsize="small")
    return fig
