"""benchmarks/staging_probe.py on the CPU: valid variant tasks, its reading of a trace, a clear stop without a GPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from script_module import load_script

from cudagym.task import make_task

probe = load_script("benchmarks/staging_probe.py", "staging_probe")


def test_every_variant_is_a_task_whose_model_runs() -> None:
    for name in probe.VARIANTS:
        text = probe.source(name)
        task = make_task(text, id=f"staging/{name}", suite="staging-probe", level=2, name=name, origin=name)
        assert task.id == f"staging/{name}"
        scope: dict[str, object] = {}
        exec(compile(text, name, "exec"), scope)  # noqa: S102 - the probe's own source
        model = scope["Model"](*scope["get_init_inputs"]())  # type: ignore[operator]
        out = model(torch.rand(1, 64, 8, 8))
        assert out.shape[:2] == (1, 64), name
    assert "batch_size = 128" in probe.source("task") and "batch_size = 32" in probe.source("task_quarter")


def bracketed(kind: str, parts: list[float], late: bool = False, claim: float = 100.0) -> dict[str, object]:
    return {"event": "bracketed", "kind": kind, "late": late, "staged_parts_us": parts, "claim_us": claim}


def test_the_trace_is_read_per_task_and_kind(tmp_path: Path) -> None:
    events = [
        {"event": "job", "task": "staging/task"},
        bracketed("calibrate", [1420.0, 668.0, 35.0]),
        bracketed("calibrate", [1422.0, 670.0, 37.0]),
        bracketed("timed", [1421.0, 668.0, 2105.0], claim=16700.0),
        bracketed("timed", [1421.0, 668.0, 2107.0], late=True, claim=16720.0),
        {"event": "bracketed", "kind": "timed"},  # no staging measured: left out
        {"event": "job", "task": "staging/copy"},
        bracketed("timed", [1400.0, 660.0, 36.0]),
    ]
    trace = tmp_path / "t.trace"
    trace.write_text("\n".join(json.dumps(e) for e in events) + "\nnot json\n")
    rows = probe.summarize(trace)
    assert rows["staging/task"]["calibrate"] == {"calls": 2, "late": 0, "inputs": 1421.0, "poison": 669.0,
                                                "flush": 36.0, "claim": 100.0}
    timed = rows["staging/task"]["timed"]
    assert (timed["calls"], timed["late"], timed["flush"], timed["claim"]) == (2, 1, 2106.0, 16710.0)
    assert rows["staging/copy"]["timed"]["flush"] == 36.0 and "calibrate" not in rows["staging/copy"]


def test_dry_run_writes_the_sources_and_judges_nothing(tmp_path: Path, capsys) -> None:
    assert probe.main(["--out", str(tmp_path), "--variants", "copy", "gelu", "--dry-run"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.py", "gelu.py"]
    assert "2 task(s) written" in capsys.readouterr().out


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU host runs the probe itself (gpu_session.sh staging)")
def test_without_a_gpu_it_says_so(tmp_path: Path, capsys) -> None:
    assert probe.main(["--out", str(tmp_path), "--variants", "copy"]) == 1
    err = capsys.readouterr().err
    assert "no GPU found" in err and "no staged call in the trace" in err
