"""The journal: one result per job id, readable after a crash, shared between processes, resumable."""

from __future__ import annotations

import json
import multiprocessing
import os

from cudagym.judge.journal import Journal
from cudagym.judge.records import BuildResult, BuildStatus, EvalResult, EvalStatus, TimingStats


def verdict(status: EvalStatus = EvalStatus.OK, median_us: float = 12.5) -> EvalResult:
    return EvalResult(status, "msg", build=BuildResult(BuildStatus.OK, "extension"),
                      candidate=TimingStats(median_us=median_us, runs=30), protocol_id="cudagym-v0")


def test_jobs_and_results_round_trip(tmp_path):
    journal = Journal(tmp_path / "j.jsonl")
    journal.record_job("a", task_id="L1/19_ReLU", solution_hash="h1", mode="profile", protocol_id="cudagym-v0")
    journal.record_job("b", task_id="L1/20_X", solution_hash="h2")
    assert journal.record_result("a", verdict(), task_id="L1/19_ReLU", solution_hash="h1")
    assert journal.result("a") == verdict()
    assert journal.result("b") is None
    assert [e.job_id for e in journal.pending()] == ["b"]
    assert journal.done_ids() == {"a"}
    lines = [json.loads(line) for line in (tmp_path / "j.jsonl").read_text().splitlines()]
    result_line = lines[-1]
    assert (result_line["kind"], result_line["job_id"], result_line["status"]) == ("result", "a", "ok")
    assert result_line["result"]["candidate"]["median_us"] == 12.5
    assert result_line["task_id"] == "L1/19_ReLU" and result_line["solution_hash"] == "h1"


def test_only_the_first_result_of_a_job_is_kept(tmp_path):
    journal = Journal(tmp_path / "j.jsonl")
    assert journal.record_result("a", verdict(EvalStatus.CRASHED), task_id="t", solution_hash="h")
    assert not journal.record_result("a", verdict(EvalStatus.OK), task_id="t", solution_hash="h")
    assert journal.result("a").status is EvalStatus.CRASHED
    assert Journal(tmp_path / "j.jsonl").result("a").status is EvalStatus.CRASHED
    assert len((tmp_path / "j.jsonl").read_text().splitlines()) == 1


def test_a_resumed_run_sees_what_an_earlier_run_wrote_and_skips_it(tmp_path):
    path = tmp_path / "j.jsonl"
    first = Journal(path)
    for job_id in ("a", "b", "c"):
        first.record_job(job_id, task_id="t", solution_hash=job_id)
    first.record_result("a", verdict(), task_id="t", solution_hash="a")
    first.record_result("b", verdict(EvalStatus.TIMEOUT), task_id="t", solution_hash="b")
    resumed = Journal(path)
    ran = [job_id for job_id in ("a", "b", "c", "d") if resumed.result(job_id) is None]
    assert ran == ["c", "d"]
    assert {e.job_id for e in resumed.pending()} == {"c"}


def test_a_torn_last_line_is_skipped_and_later_lines_still_read(tmp_path):
    path = tmp_path / "j.jsonl"
    Journal(path).record_result("a", verdict(), task_id="t", solution_hash="h")
    with open(path, "ab") as fh:
        fh.write(b'{"kind": "result", "job_id": "b", "result": {"sta')  # a writer died mid-line
    journal = Journal(path)
    assert journal.done_ids() == {"a"}
    journal.record_result("c", verdict(), task_id="t", solution_hash="h")
    assert Journal(path).done_ids() == {"a", "c"}


def _write_results(path: str, worker: int, count: int) -> None:
    journal = Journal(path)
    for i in range(count):
        journal.record_result(f"job-{i}", verdict(median_us=worker), task_id="t", solution_hash=str(worker))


def test_processes_sharing_a_journal_write_one_result_per_job(tmp_path):
    path = str(tmp_path / "j.jsonl")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_write_results, args=(path, w, 40)) for w in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    lines = [json.loads(line) for line in open(path)]
    assert sorted(line["job_id"] for line in lines) == sorted(f"job-{i}" for i in range(40))
    assert Journal(path).done_ids() == {f"job-{i}" for i in range(40)}


def test_fsync_mode_writes_the_same_lines(tmp_path):
    journal = Journal(tmp_path / "sub" / "j.jsonl", fsync=True)
    journal.record_result("a", verdict(), task_id="t", solution_hash="h")
    assert os.path.getsize(tmp_path / "sub" / "j.jsonl") > 0
    assert Journal(tmp_path / "sub" / "j.jsonl").result("a") == verdict()


def test_the_commit_can_be_given_where_the_checkout_is_a_copy(monkeypatch):
    from cudagym.bench.journal import git_commit

    monkeypatch.setenv("CUDAGYM_COMMIT", "e49f303abcde")
    assert git_commit() == "e49f303abcde"
