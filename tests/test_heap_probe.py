"""benchmarks/heap_probe.py: its rows and table from stand-in verdicts, and its arguments (the judging needs a GPU)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from script_module import load_script

hp = load_script("benchmarks/heap_probe.py", "heap_probe")


def verdict(status: str, median_us: float = 0.0, log: str = "") -> SimpleNamespace:
    return SimpleNamespace(status=SimpleNamespace(value=status), candidate=SimpleNamespace(median_us=median_us),
                           log=log)


def test_each_delivery_keeps_its_medians_and_the_runners_heap_note() -> None:
    row = hp.Row("bundled/L1/01_Swish")
    hp._record(row, "heap", verdict("ok", 140.0, "a\nthe runner's heap: 0 output(s) copied into its reserve\nb"))
    hp._record(row, "copy", verdict("ok", 138.0))
    hp._record(row, "heap", verdict("ok", 142.0, "no note this time"))
    hp._record(row, "copy", verdict("unverifiable", 1.0))  # not ok: its median is no timing
    assert row.heap_us == [140.0, 142.0] and row.copy_us == [138.0]
    assert row.heap_status == ["ok", "ok"] and row.copy_status == ["ok", "unverifiable"]
    assert row.heap_note.startswith("the runner's heap: 0 output(s)")  # the last one seen stays
    assert row.ratio == pytest.approx(141.0 / 138.0)


def test_the_table_has_a_row_a_task_and_the_median_ratio() -> None:
    timed, untimed = hp.Row("t/a", [100.0, 102.0], [100.0], ["ok", "ok"], ["ok"], "the runner's heap: 1 | x"), \
        hp.Row("t/b", [], [], ["no_gpu"], ["no_gpu"])
    text = hp.table([timed, untimed])
    assert "| t/a | 101.00 | 100.00 | 1.0100 | ok, ok | ok | 1 / x |" in text
    assert "| t/b | - | - | - | no_gpu | no_gpu |  |" in text
    assert "median heap / copy over 1 task(s): 1.0100" in text
    assert "median heap" not in hp.table([untimed])


def test_rounds_below_one_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        hp.main(["--out", "x", "--rounds", "0"])
    assert "--rounds must be at least 1" in capsys.readouterr().err
