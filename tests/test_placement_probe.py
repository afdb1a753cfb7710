"""benchmarks/placement_probe.py on the CPU: the trials run, the table and the JSON say what they measured."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import placement_probe  # noqa: E402

pytest.importorskip("torch")


def test_the_probe_times_each_placement_and_writes_its_table(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert placement_probe.main(["--task", "bundled/L1/01_Swish", "--device", "cpu", "--trials", "2", "--runs", "1",
                                 "--out", str(tmp_path)]) == 0
    found = json.loads(next(tmp_path.glob("placement-*.json")).read_text())
    assert [r["trial"] for r in found["trials"]] == [0, 1]
    assert found["trials"][0]["pad_mib"] == 0 and all(r["median_us"] > 0 for r in found["trials"])
    assert found["spread"] >= 1.0
    table = next(tmp_path.glob("placement-*.md")).read_text()
    assert "| 1 |" in table and "slowest / fastest trial median" in table
    assert "slowest / fastest" in capsys.readouterr().out


def test_the_probe_can_put_each_input_set_in_an_arena_of_its_own(tmp_path: Path) -> None:
    assert placement_probe.main(["--task", "bundled/L1/01_Swish", "--device", "cpu", "--trials", "2", "--runs", "1",
                                 "--inputs", "arena", "--idle-contexts", "2", "--out", str(tmp_path)]) == 0
    found = json.loads(next(tmp_path.glob("placement-*-arena-idle0.json")).read_text())
    assert found["inputs"] == "arena" and found["idle_contexts"] == 0  # no CUDA context to hold off the GPU
    assert all(r["median_us"] > 0 for r in found["trials"])
    assert "inputs from the arena" in next(tmp_path.glob("placement-*.md")).read_text()


def test_the_probe_refuses_an_empty_run() -> None:
    with pytest.raises(SystemExit):
        placement_probe.main(["--task", "bundled/L1/01_Swish", "--trials", "0"])
    with pytest.raises(SystemExit):
        placement_probe.main(["--task", "bundled/L1/01_Swish", "--idle-contexts", "-1"])
