"""``cudagym report`` on a hand-built journal: exact CSV numbers, the Markdown tables, the PNGs opened."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from bench_journals import oracle_entries, write_run

from cudagym.bench import plots
from cudagym.bench.report import NO_PLOTS, write_report
from cudagym.cli import main
from cudagym.errors import ConfigError


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return write_run(tmp_path / "run", oracle_entries())


def test_table1_csv_holds_the_oracle_numbers_unrounded(run_dir):
    report = write_report(run_dir, draw=False)
    rows = {(r["group"], r["scoring"]): r for r in _rows(report.markdown.parent / "table1.csv")}
    one = rows[("1", "final")]
    assert (one["episodes"], one["tasks"], one["evaluated"]) == ("4", "2", "4")
    assert float(one["pass_rate"]) == 0.75
    assert float(one["faster_than_eager"]) == 0.5
    assert float(one["faster_than_compile"]) == 0.25
    assert float(one["geomean_speedup_vs_eager"]) == pytest.approx((2.0 * 100 / 98 * 100 / 88) ** (1 / 3))
    assert float(rows[("1", "best")]["faster_than_compile"]) == 0.5
    overall = rows[("overall", "final")]
    assert float(overall["pass_rate"]) == pytest.approx(4 / 6)
    assert float(overall["mean_turns"]) == pytest.approx(13 / 6)


def test_fast_p_pass_at_k_and_tier_csvs(run_dir):
    out = write_report(run_dir, draw=False).markdown.parent
    fast = {(r["group"], r["scoring"], r["baseline"], float(r["p"])): float(r["fast_p"])
            for r in _rows(out / "fast_p.csv")}
    assert fast[("1", "final", "compile", 1.0)] == 0.5
    assert fast[("overall", "final", "eager", 1.5)] == pytest.approx(2 / 6)  # A#0 2.0x, C#0 4.0x
    assert fast[("overall", "final", "eager", 2.0)] == pytest.approx(1 / 6)  # 2.0 is not > 2.0
    passk = {(r["group"], r["scoring"], r["k"]): float(r["pass_at_k"]) for r in _rows(out / "pass_at_k.csv")}
    assert passk[("1", "final", "1")] == 0.75 and passk[("overall", "final", "2")] == 1.0
    tiers = {(r["group"], r["scoring"]): r for r in _rows(out / "tiers.csv")}
    assert [tiers[("overall", "final")][f"tier_{t}"] for t in (-1, 0, 1, 2, 3)] == ["1", "1", "1", "1", "2"]
    episodes = _rows(out / "episodes.csv")
    assert len(episodes) == 6 and episodes[2]["final_status"] == "incorrect"


def test_markdown_has_every_section_with_rounded_numbers(run_dir):
    text = write_report(run_dir, draw=False).markdown.read_text()
    for heading in ("## Table 1, final state", "## Table 1, best state", "## fast_p (final state)",
                    "## pass@k (unbiased estimator)", "## Tiers (final state)", "## Turns and tokens per episode"):
        assert heading in text
    assert "| level 1 | 4 | 4 | 75.0% | 50.0% | 25.0% |" in text
    assert "| **overall** | 6 | 5 | 66.7% |" in text
    assert "GPU NVIDIA H200" in text and "6 finished of 6 planned" in text
    assert "protocol hand-built-v1," in text  # what the episodes' observations name, not a default


@pytest.mark.skipif(not plots.available(), reason="matplotlib (the plots extra) is not installed")
def test_the_plots_are_non_empty_images_of_the_expected_size(run_dir):
    from PIL import Image

    report = write_report(run_dir)
    assert [p.name for p in report.plots] == list(plots.FILES)
    for path in report.plots:
        with Image.open(path) as image:
            assert image.format == "PNG"
            assert image.size == plots.SIZE_PX == (800, 450)
            colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
            assert colours is not None and len(colours) > 20  # lines, boxes, text: not a blank canvas
        assert f"![{path.stem}]({path.name})" in report.markdown.read_text()


def test_without_matplotlib_the_report_says_so_and_writes_the_tables(run_dir, monkeypatch):
    monkeypatch.setattr(plots, "available", lambda: False)
    report = write_report(run_dir, run_dir / "elsewhere")
    assert report.plots == () and len(report.csvs) == 5
    assert NO_PLOTS in report.markdown.read_text()
    assert not list((run_dir / "elsewhere").glob("*.png"))


def test_cli_report_prints_the_markdown(run_dir, capsys):
    assert main(["report", str(run_dir), "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "# cudagym bench report" in out and "wrote " in out


def test_a_folder_that_is_no_run_is_a_usage_error(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "expected a benchmark run folder with manifest.json" in capsys.readouterr().err
    write_run(tmp_path / "empty", [])
    with pytest.raises(ConfigError, match="no finished episode yet"):
        write_report(tmp_path / "empty")
