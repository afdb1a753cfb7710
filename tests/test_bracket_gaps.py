"""benchmarks/bracket_gaps.py on a journal whose notes the bracket rule itself wrote."""

from __future__ import annotations

import json
from pathlib import Path

from script_module import load_script

from cudagym.judge.harness.claims import judge_bracketed_claims

bg = load_script("benchmarks/bracket_gaps.py", "bracket_gaps")


def note(claim: float, gap: float, base: float, staged: tuple[float, float] | None = None) -> str:
    claims = [claim] * 10
    extra = ([staged[0]] * 10, [staged[1]] * 5) if staged else ((), ())
    text, _ = judge_bracketed_claims(claims, [claim + gap] * 10, [base] * 5, 10.0, *extra)
    return text


def result(task: str, protocol: str, status: str, notes: list[str]) -> str:
    return json.dumps({"kind": "result", "task_id": task, "status": status,
                       "result": {"status": status, "protocol_id": protocol, "notes": ["guards: ", *notes]}})


def test_the_report_sorts_by_relative_difference_and_names_the_tasks_beyond_their_allowance(tmp_path: Path):
    journal = tmp_path / "journal.jsonl"
    journal.write_text("\n".join([
        json.dumps({"kind": "job", "task_id": "L1/1"}),
        "not json",
        result("L1/1", "kernelbench-v0.3", "ok", [note(100.0, 400.0, 500.0)]),  # superseded below
        result("L1/1", "kernelbench-v0.4", "ok", [note(100.0, 501.0, 500.0)]),
        result("L1/4", "kernelbench-v0.4", "rule_violation", [note(2310.2, 4361.5, 4739.1)]),
        result("L1/9", "kernelbench-v0.4", "ok", [note(50.0, 300.0, 299.0, (150.0, 149.0))]),
        result("L1/97", "kernelbench-v0.4", "ok", [note(23054.3, 5657.8, 4996.0)]),
        result("L1/5", "kernelbench-v0.4", "ok", ["no bracket here"]),
    ]) + "\n")
    gaps = bg.read_gaps(journal.read_text().splitlines(), "kernelbench-v0.4")
    assert [g.task_id for g in gaps] == ["L1/4", "L1/1", "L1/9", "L1/97"]
    assert round(gaps[0].diff, 1) == -377.6 and round(gaps[0].relative, 3) == -0.080 and gaps[0].allowed == 125.5
    assert gaps[2].staged == 150.0 and gaps[2].calibration_staged == 149.0 and gaps[1].staged is None
    text = bg.render(gaps, "journal.jsonl")
    assert "4 tasks; 2 within 1.6% of the empty call's gap; 1 beyond the whole bracket's allowance" in text
    assert text.count("L1/4") == 2  # named in the summary, and its row
    assert "| L1/9 | ok | 50.0 | 300.0 | 299.0 | 1.0 | 0.3 | 12.5 | 150.0 | 149.0 |" in text
    assert "| L1/97 | ok | 23054.3 | 5657.8 | 4996.0 | 661.8 | 13.2 | 1162.7 |  |  |" in text
    assert [g.task_id for g in bg.read_gaps(journal.read_text().splitlines(), "kernelbench-v0.3")] == ["L1/1"]


def test_the_command_reports_and_says_what_is_missing(tmp_path: Path, capsys):
    assert bg.main([str(tmp_path / "none.jsonl")]) == 2
    assert "no journal at" in capsys.readouterr().err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    out = tmp_path / "report.md"
    assert bg.main([str(empty), "--out", str(out)]) == 0
    assert "No bracketed timing notes" in out.read_text() and "No bracketed timing notes" in capsys.readouterr().out


def test_notes_written_before_the_rule_named_its_checked_calls_still_parse() -> None:
    old = ("timing claims: median 100.0 us; the judge's GPU clock around each call: median 600.0 us, beyond the claim "
           "501.0 us (20th percentile; median 501.0 us) against 500.0 us for an empty call (allowed shortfall 15.0 us)")
    for text in (old, note(100.0, 501.0, 500.0)):
        found = bg.CLAIMS.search(text)
        assert found is not None and float(found["gap"]) == 501.0 and float(found["base"]) == 500.0, text
