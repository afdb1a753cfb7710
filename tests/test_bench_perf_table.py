"""benchmarks/perf_table.py: one pytest-benchmark JSON run as the README's labelled Markdown table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from script_module import load_script


@pytest.fixture(scope="module")
def perf():
    return load_script("benchmarks/perf_table.py", "perf_table")


def _run(tmp_path: Path) -> Path:
    data = {
        "machine_info": {"cpu": {"brand_raw": "Xeon Test", "count": 16}, "python_version": "3.12.1"},
        "commit_info": {"id": "0123456789abcdef0123", "dirty": True, "branch": "main"},
        "datetime": "2026-12-01T12:00:00", "version": "5.1.0",
        "benchmarks": [
            {"name": "test_step_write_file", "fullname": "benchmarks/bench_step.py::test_step_write_file",
             "extra_info": {}, "stats": {"median": 0.000468, "iqr": 0.000122, "min": 0.000256, "rounds": 79}},
            {"name": "test_raw_build", "fullname": "benchmarks/bench_build.py::test_raw_build",
             "extra_info": {"gpu": "NVIDIA H200", "raw_p50_s": 0.04812, "load_inline_over_raw": 485.2},
             "stats": {"median": 1.4, "iqr": 0.05, "min": 1.31, "rounds": 5}},
        ],
    }
    path = tmp_path / "perf.json"
    path.write_text(json.dumps(data))
    return path


def test_the_table_is_labelled_with_hardware_and_commit(perf, tmp_path):
    text = perf.table(perf.load_runs([_run(tmp_path)]))
    lines = text.splitlines()
    assert lines[0] == ("Measured on Xeon Test (16 cores), GPU: NVIDIA H200; commit 0123456789ab-dirty on main; "
                        "2026-12-01T12:00:00; Python 3.12.1, pytest-benchmark 5.1.0.")
    assert ("| env step overhead and action parsing (FakeJudge) | `test_step_write_file` | 468 µs | 122 µs | "
            "256 µs | 79 |  |") in lines
    assert ("| build latency per format, beside load_inline of the same kernel | `test_raw_build` | 1.4 s | 50 ms | "
            "1.31 s | 5 | raw_p50_s=0.0481, load_inline_over_raw=485 |") in lines


def test_units_follow_the_size_of_the_number(perf):
    assert [perf.fmt_seconds(x) for x in (2.5, 0.0125, 3.2e-6, 4e-9)] == ["2.5 s", "12.5 ms", "3.2 µs", "4 ns"]


def test_update_puts_the_table_between_the_readme_markers(perf, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n{perf.START}\nold\n{perf.END}\nafter\n")
    assert perf.main([str(_run(tmp_path)), "--update", str(readme), "--gpu", "H200 (given)"]) == 0
    text = readme.read_text()
    assert "old" not in text and "GPU: H200 (given)" in text and text.endswith(f"{perf.END}\nafter\n")
    readme.write_text("no markers\n")
    with pytest.raises(SystemExit, match="no <!-- perf-table:start -->"):
        perf.main([str(_run(tmp_path)), "--update", str(readme)])


def test_a_file_that_is_not_benchmark_json_is_refused(perf, tmp_path):
    (tmp_path / "x.json").write_text("[]")
    with pytest.raises(SystemExit, match="expected pytest-benchmark JSON"):
        perf.load_runs([tmp_path / "x.json"])
