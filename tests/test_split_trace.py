"""The diagnostic trace (``CUDAGYM_TRACE``): written by the confined trusted worker, as the job goes, changing nothing.

Through the real worker pool on the CPU path (bubblewrap where the host has it): the trusted worker, confined to its
own folder, writes the trace's folder too, the job's phases and its runner requests land there line by line, and
the verdict is the one an untraced judge gives (the trace file is no ``file_access`` attempt of the job).
"""

from __future__ import annotations

import dataclasses
import json
import os
import textwrap
from pathlib import Path

import pytest
from script_module import load_script
from test_split import HONEST, TASK  # the tiny linear+relu task and its honest answer

from cudagym.judge.interface import EvalMode
from cudagym.judge.job import Job, KnownBaselines
from cudagym.judge.protocol import CUDAGYM_V0
from cudagym.judge.records import BuildResult, BuildStatus, EvalResult, EvalStatus
from cudagym.judge.split import trace as trace_module
from cudagym.judge.split.trace import TRACE_ENV, trace
from cudagym.judge.worker import PoolOptions, WorkerPool
from cudagym.solution import Solution
from cudagym.task import make_task


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_untraced_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TRACE_ENV, raising=False)
    trace("phase", name="load")
    assert not trace_module.tracing() and trace_module.folders() == ()
    assert list(tmp_path.iterdir()) == []


def test_a_trace_is_one_json_line_per_event(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "sub" / "run.trace"
    monkeypatch.setenv(TRACE_ENV, str(path))
    assert trace_module.folders() == (str(path.parent),)  # made, for a confined process's view
    trace("request", kind="timed", parts_us=[1.0, 2.5, 0.0], odd=object())
    trace("phase", name="check", begins=True)
    lines = _lines(path)
    assert [line["event"] for line in lines] == ["request", "phase"]
    assert lines[0]["kind"] == "timed" and lines[0]["parts_us"] == [1.0, 2.5, 0.0]
    assert lines[0]["pid"] == os.getpid() and isinstance(lines[0]["odd"], str)


def test_an_unwritable_trace_is_given_up_without_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(TRACE_ENV, str(blocker / "run.trace"))  # a folder that is a file: no open can succeed
    trace("phase", name="load")
    trace("phase", name="load")  # given up: no second attempt, no error
    assert str(blocker / "run.trace") in trace_module._failed


def test_a_runner_gets_no_trace_path_only_the_word_to_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cudagym.judge.worker import PoolOptions as Options
    from cudagym.judge.worker import _runner_env

    monkeypatch.setenv(TRACE_ENV, str(tmp_path / "run.trace"))
    env = _runner_env("0", Options(), tmp_path)
    assert TRACE_ENV not in env and env[trace_module.RUNNER_ENV] == "1"
    monkeypatch.delenv(TRACE_ENV)
    monkeypatch.setenv(trace_module.RUNNER_ENV, "1")  # a parent's leftover is not passed on untraced
    assert trace_module.RUNNER_ENV not in _runner_env("0", Options(), tmp_path)


def _job(job_id: str) -> Job:
    return Job(
        job_id=job_id,
        task=make_task(textwrap.dedent(TASK), id="test/trace", suite="test", level=1, name="trace", origin="test"),
        solution=Solution("inline", {"model_new.py": HONEST}),
        build=BuildResult(BuildStatus.OK, "inline"),
        mode=EvalMode.SUBMIT,
        protocol=CUDAGYM_V0.with_changes(id="test-trace", guards=("file_access", "network"), num_inputs=2,
                                         warmup_runs=1, warmup_ms=0.0, min_runs=5, max_runs=5, target_ci_pct=0.0),
        baselines=KnownBaselines(),
    )


def _judged(job_id: str, answer: str = HONEST) -> EvalResult:
    options = PoolOptions(job_fn="cudagym.judge.split.trusted:run_job_on_cpu", runner=True, startup_timeout_s=180.0,
                          spare_runners=1)
    job = _job(job_id)
    job = dataclasses.replace(job, solution=Solution("inline", {"model_new.py": answer}))
    with WorkerPool(["0"], options=options) as pool:
        return pool.submit(job).result(timeout=300)


def test_the_confined_trusted_worker_traces_a_job_and_judges_it_as_untraced(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "traces" / "split.trace"
    monkeypatch.setenv(TRACE_ENV, str(path))
    result = _judged("traced")
    assert result.status is EvalStatus.OK, result.message + result.log[-2000:]
    assert result.violations == ()  # the trace's writes are no file_access attempt of the job
    lines = _lines(path)
    assert {line["pid"] for line in lines} != {os.getpid()}  # written by the worker, not this process
    events = [line["event"] for line in lines]
    assert events[0] == "job" and lines[0]["task"] == "test/trace" and lines[0]["mode"] == "submit"
    verdict = next(line for line in lines if line["event"] == "verdict")
    assert verdict["status"] == "ok"
    phases = [(line["name"], line["begins"]) for line in lines if line["event"] == "phase"]
    for name in ("load", "check", "timing", "profile"):
        assert (name, True) in phases and (name, False) in phases, phases
    timed = [line for line in lines if line["event"] == "request" and line["kind"] == "timed"]
    assert len(timed) >= 5 and all(len(line["parts_us"]) == 3 for line in timed)
    last = [line for line in lines if line["event"] == "rounds"][-1]  # the timing loop's end, and why
    assert last["done"] == 5 and last["stop"] and set(last["medians_us"]) >= {"candidate"}, last
    table = "\n".join(load_script("benchmarks/trace_summary.py", "trace_summary").summarize(path))  # its reader
    assert "job {" in table and "verdict {" in table and "begun, never ended" not in table, table
    assert f"request:timed                n={len(timed):6d} late=    0" in table, table
    assert "rounds lines=" in table and "stop=" in table, table

    monkeypatch.delenv(TRACE_ENV)
    plain = _judged("untraced")
    assert plain.status is EvalStatus.OK and plain.violations == ()


def test_a_candidate_cannot_write_into_the_trace_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The trace's folder is in the trusted worker's view only: the candidate, in its runner, writes nothing there
    (neither a file of its own nor a forged line in the trace)."""
    folder = tmp_path / "traces"
    path = folder / "split.trace"
    monkeypatch.setenv(TRACE_ENV, str(path))
    planted = folder / "planted.txt"
    attack = textwrap.dedent(f'''
        import os
        for target, text in (({str(planted)!r}, "the candidate was here"),
                             ({str(path)!r}, '{{"event": "verdict", "status": "ok", "forged": true}}\\n')):
            try:
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "a") as handle:
                    handle.write(text)
            except OSError:
                pass
    ''') + HONEST
    result = _judged("trace-attack", attack)
    assert not planted.exists(), "the candidate wrote into the trace's folder"
    lines = _lines(path)
    assert lines and not any(line.get("forged") for line in lines), lines  # the trusted worker's lines alone
    assert any(line["event"] == "verdict" for line in lines), result.message


def test_the_summary_gives_each_kinds_staging_beside_its_bracket(tmp_path: Path) -> None:
    """The GPU path's lines (written only there): the judge's staging per kind of request, to set a task's timed
    calls' staging beside its empty calls' (session 35's `L2/19`: 4,194 against 2,112 us)."""
    path = tmp_path / "gpu.trace"
    rows = [{"event": "bracketed", "kind": kind, "pid": 7, "t": i, "bracket_us": 100.0 + staged, "staged_us": staged,
             "late": False, "parts_us": [1.0, 2.0, 3.0]}
            for i, (kind, staged) in enumerate([("calibrate", 2112.0), ("calibrate", 2100.0), ("timed", 4194.0),
                                                ("timed", 4300.0), ("timed", 4100.0)])]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    table = "\n".join(load_script("benchmarks/trace_summary.py", "trace_summary").summarize(path))
    assert "bracketed:calibrate" in table and "staged med=2106 max=2112" in table, table
    assert "staged med=4194 max=4300" in table, table
    assert "inputs/poison/flush" not in table  # lines without the staging's parts name none
    parts = [{**r, "staged_parts_us": [2000.0 + i, 2100.0, 94.0]} for i, r in enumerate(rows)]
    path.write_text("\n".join(json.dumps(r) for r in parts) + "\n")
    table = "\n".join(load_script("benchmarks/trace_summary.py", "trace_summary").summarize(path))
    assert "staged med=4194 max=4300 (inputs/poison/flush med=2003/2100/94)" in table, table


def test_the_claims_table_gives_each_jobs_medians_and_how_far_they_moved(tmp_path: Path) -> None:
    """``--claims``: per task, protocol and mode, the runner's reference's and the candidate's median claim per call
    in each job, how far each moved from job to job and their ratio's (session 48: Softmax's reference moved 1.36%)."""
    path = tmp_path / "bench.trace"
    rows: list[object] = []
    for pid, (reference, timed) in enumerate([(216.0, 182.0), (219.0, 182.0), (217.0, 182.5)], start=3):
        rows.append({"event": "job", "pid": pid, "t": 0, "task": "bundled/L1/05_Softmax", "mode": "submit",
                     "protocol": "cudagym-v6"})
        rows += [{"event": "bracketed", "pid": pid, "t": 1, "kind": "reference", "calls": 2, "claim_us": 2 * c}
                 for c in (reference - 1, reference, reference + 1)]  # batched: per call
        rows += [{"event": "bracketed", "pid": pid, "t": 2, "kind": "timed", "calls": 1, "claim_us": timed}] * 3
        rows.append({"event": "bracketed", "pid": pid, "t": 3, "kind": "calibrate", "calls": 1, "claim_us": 9.0})
    rows.append({"event": "job", "pid": 9, "t": 0, "task": "bundled/L1/01_Swish", "mode": "verify",
                 "protocol": "cudagym-v6"})  # no timed request: no figures, no failure
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n{cut mid-li")
    module = load_script("benchmarks/trace_summary.py", "trace_summary")
    table = "\n".join(module.claims(path))
    assert ("bundled/L1/05_Softmax [cudagym-v6, submit]: 3 jobs; the runner's reference 216.0-219.0 us (1.39%); "
            "the candidate 182.0-182.5 us (0.27%)") in table, table
    softmax = next(line for line in table.splitlines() if "05_Softmax" in line)
    ratios = [216.0 / 182.0, 219.0 / 182.0, 217.0 / 182.5]
    assert f"their ratio {max(ratios) / min(ratios) - 1:.2%} over 3 jobs" in softmax, softmax
    assert "bundled/L1/01_Swish [cudagym-v6, verify]: 1 jobs; the runner's reference -; the candidate -" in table
    assert module.main(["--claims", str(path)]) == 0 and module.main(["--claims"]) == 2
