"""Reading a journal creates nothing on disk: no ``.lock`` file, no folder, and a read-only folder reads fine.

Every read-only entry point of :class:`~cudagym.judge.journal.Journal` is tried on real files; writers still take
the lock file, and a reader still waits out a writer that holds it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from filelock import FileLock

import cudagym
from cudagym.judge.journal import Journal
from cudagym.judge.records import BuildResult, BuildStatus, EvalResult, EvalStatus, TimingStats, to_dict


def verdict(status: EvalStatus = EvalStatus.OK) -> EvalResult:
    return EvalResult(status, "msg", build=BuildResult(BuildStatus.OK, "extension"),
                      candidate=TimingStats(median_us=12.5, runs=30), protocol_id="cudagym-v0")


def _written(folder: Path, *, keep_lock: bool) -> Path:
    """A journal in ``folder`` with a result for ``a`` and a pending ``b``; its lock file removed unless kept
    (a journal copied from another host, or kept without the lock its run made)."""
    path = folder / "j.jsonl"
    writer = Journal(path)
    writer.record_job("a", task_id="t", solution_hash="h1", mode="profile", protocol_id="cudagym-v0")
    writer.record_job("b", task_id="t", solution_hash="h2")
    writer.record_result("a", verdict(), task_id="t", solution_hash="h1")
    if not keep_lock:
        os.unlink(str(path) + ".lock")
    return path


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every name under ``folder`` with its size and modification time."""
    return {p.relative_to(folder).as_posix(): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in folder.rglob("*")}


def _read_everything(path: Path) -> None:
    """Call every read-only entry point of a fresh reader, checking what each returns."""
    reader = Journal(path)
    assert reader.result("a") == verdict() and reader.result("b") is None and reader.result("zz") is None
    assert reader.entry("b") is not None and reader.entry("zz") is None
    assert reader.conflict("a", task_id="t", solution_hash="h1", mode="profile", protocol_id="cudagym-v0") == ""
    assert "differ" in reader.conflict("a", task_id="t", solution_hash="other", mode="profile",
                                       protocol_id="cudagym-v0")
    assert [e.job_id for e in reader.entries()] == ["a", "b"] == [e.job_id for e in reader]
    assert reader.done_ids() == {"a"} and [e.job_id for e in reader.pending()] == ["b"] and len(reader) == 2


@pytest.mark.parametrize("keep_lock", [False, True], ids=["no-lock-file", "writers-lock-file-present"])
def test_reading_a_journal_leaves_the_folder_exactly_as_it_was(tmp_path, keep_lock):
    path = _written(tmp_path, keep_lock=keep_lock)
    before = _snapshot(tmp_path)
    _read_everything(path)
    assert _snapshot(tmp_path) == before


def test_reading_a_journal_that_does_not_exist_creates_no_folder_and_no_file(tmp_path):
    reader = Journal(tmp_path / "missing" / "j.jsonl")
    assert reader.entries() == [] and reader.result("a") is None and reader.done_ids() == set()
    assert list(tmp_path.iterdir()) == []


def test_a_writer_still_makes_its_folder_its_file_and_its_lock(tmp_path):
    path = tmp_path / "sub" / "j.jsonl"
    Journal(path).record_job("a", task_id="t", solution_hash="h")
    assert sorted(p.name for p in path.parent.iterdir()) == ["j.jsonl", "j.jsonl.lock"]
    assert Journal(path).entry("a") is not None


def _read_in_read_only_bind(path: Path) -> subprocess.CompletedProcess[str]:
    """Read the journal in a child that sees ``path``'s folder through a read-only bind (root ignores modes)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        pytest.skip("running as root, where chmod does not stop writes, and bubblewrap (for a read-only bind) "
                    "is not installed")
    folder = str(path.parent)
    probe = subprocess.run([bwrap, "--dev-bind", "/", "/", "--ro-bind", folder, folder, "true"],
                           capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        pytest.skip(f"running as root, where chmod does not stop writes, and bubblewrap cannot make a read-only "
                    f"bind here: {probe.stderr.strip()}")
    code = ("import sys; from cudagym.judge.journal import Journal; j = Journal(sys.argv[1]); "
            "print(sorted(j.done_ids()), [e.job_id for e in j.pending()], j.result('a').status.value)")
    env = {**os.environ, "PYTHONPATH": str(Path(cudagym.__file__).resolve().parents[1])}
    return subprocess.run([bwrap, "--dev-bind", "/", "/", "--ro-bind", folder, folder, sys.executable, "-c", code,
                           str(path)], capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize("keep_lock", [False, True], ids=["no-lock-file", "writers-lock-file-present"])
def test_a_journal_in_a_read_only_folder_can_be_read(tmp_path, keep_lock):
    path = _written(tmp_path / "ro", keep_lock=keep_lock)
    before = _snapshot(path.parent)
    os.chmod(path.parent, 0o555)
    try:
        if os.geteuid() == 0:
            done = _read_in_read_only_bind(path)
            assert done.returncode == 0, done.stderr
            assert done.stdout.split("\n")[0] == "['a'] ['b'] ok"
        else:
            _read_everything(path)
    finally:
        os.chmod(path.parent, 0o755)
    assert _snapshot(path.parent) == before


def test_a_reader_waits_out_a_writer_holding_the_lock_and_then_sees_its_line(tmp_path):
    """The reader's shared lock on the writer's lock file keeps reads and appends apart, as the exclusive one did."""
    path = _written(tmp_path, keep_lock=True)
    reader = Journal(path)
    seen: list[set[str]] = []
    line = json.dumps({"kind": "result", "job_id": "b", "task_id": "t", "solution_hash": "h2", "status": "ok",
                       "result": to_dict(verdict()), "time": 0.0}) + "\n"
    with FileLock(str(path) + ".lock"):  # a writer (another process's journal), about to append
        thread = threading.Thread(target=lambda: seen.append(reader.done_ids()), daemon=True)
        thread.start()
        time.sleep(0.3)
        assert thread.is_alive() and not seen  # the reader waits for the writer
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        os.write(fd, line.encode())
        os.close(fd)
    thread.join(timeout=10)
    assert seen == [{"a", "b"}]
