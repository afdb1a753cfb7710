"""Session 29's red team of the judge's state on disk: a cache folder it cannot write, damaged journal lines and
baseline files edited to other types.

Each test goes through the public API (``LocalJudge``, ``cudagym bench``, ``Journal``, ``BaselineCache``) and checks
that the damage is refused up front with a message naming the folder, or skipped with a warning, never a
traceback from deep inside a later job.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from bench_journals import child_env

from cudagym.errors import ConfigError
from cudagym.judge.baselines import BaselineCache, BaselineKey
from cudagym.judge.build import BuildCache
from cudagym.judge.journal import Journal
from cudagym.judge.local import LocalJudge
from cudagym.judge.records import EvalResult, EvalStatus, TimingStats

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def read_only() -> Iterator[list[Path]]:
    """Folders appended to the yielded list are made read-only for the test (a read-only bind mount as root, where
    modes do not stop writes; ``chmod 555`` otherwise), and writable again afterwards."""
    folders: list[Path] = []
    yield folders
    for folder in reversed(folders):
        if os.geteuid() == 0:
            subprocess.run(["umount", str(folder)], check=False)
        else:
            folder.chmod(0o755)


def make_read_only(folders: list[Path], folder: Path) -> None:
    """Make ``folder`` read-only (see :func:`read_only`); skip the test where this host cannot."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        folders.append(folder)
        return
    bind = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True, text=True)
    if bind.returncode != 0:
        pytest.skip(f"cannot bind-mount here to make a read-only folder: {bind.stderr.strip()}")
    folders.append(folder)
    subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], check=True)
    assert not os.access(folder, os.W_OK)


# ---------------------------------------------------------------------------------------------- a read-only cache

def test_a_judge_whose_build_cache_is_read_only_is_refused_when_it_starts(tmp_path, read_only):
    cache = tmp_path / "cache"
    BuildCache(cache)  # made by an earlier run (or another user): build/, build/locks, build/tmp
    make_read_only(read_only, cache / "build")
    with pytest.raises(ConfigError, match=r"cannot write into the folder .*/cache/build \(the cudagym cache folder; "
                                          r"set CUDAGYM_CACHE_DIR to a writable folder\)"):
        LocalJudge(devices="none", cache_dir=cache)


def test_bench_with_a_read_only_cache_folder_stops_before_the_run_begins(tmp_path, read_only):
    cache, out = tmp_path / "cache", tmp_path / "run"
    BuildCache(cache)
    make_read_only(read_only, cache)
    done = subprocess.run(
        [sys.executable, "-m", "cudagym.cli", "bench", "--agent", "scripted", "--tasks", "bundled/L1/01_Swish",
         "--no-progress", "--out", str(out)],
        cwd=ROOT, env={**child_env(), "CUDAGYM_CACHE_DIR": str(cache)}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert f"cannot write into the folder {cache} (the cudagym cache folder; set CUDAGYM_CACHE_DIR to a writable " \
           "folder)" in done.stderr and "Traceback" not in done.stderr
    assert not (out / "manifest.json").exists() and not (out / "episodes.jsonl").exists()  # no episode was played


# ---------------------------------------------------------------------------------------------- the judge's journal

DAMAGED_LINES = [
    '{"kind": "job", "job_id": ["a", "list"], "task_id": "t"}',  # an id that cannot key anything
    '{"kind": "result", "job_id": {"an": "object"}, "result": {}}',
    '{"kind": "result", "job_id": "j-list", "result": []}',  # a result that is not an object
    '{"kind": "result", "job_id": "j-text", "result": "ok"}',
    '{"kind": "result", "job_id": "j-build", "result": {"status": "ok", "build": []}}',
    '{"kind": "job", "job_id": "j-task", "task_id": 5}',  # a task id of another type
    '{"kind": "job", "job_id": 7}',  # an id that is a number: never the same as the text "7"
    '{"kind": "nonsense", "job_id": "j-kind"}',
]


def test_damaged_journal_lines_are_skipped_and_every_good_line_still_reads(tmp_path, caplog):
    path = tmp_path / "judge.jsonl"
    first = Journal(path)
    first.record_job("j1", task_id="bundled/L1/01_Swish", solution_hash="s1", mode="submit", protocol_id="p")
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("\n".join(DAMAGED_LINES) + "\n")
    first.record_result("j1", EvalResult(EvalStatus.NO_GPU, "no GPU"), task_id="bundled/L1/01_Swish",
                        solution_hash="s1")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="cudagym.judge.journal"):
        journal = Journal(path)
        assert [e.job_id for e in journal.entries()] == ["j1"]
    assert journal.done_ids() == {"j1"} and journal.result("j1").status is EvalStatus.NO_GPU
    assert sum("skipping an unreadable" in r.message for r in caplog.records) == len(DAMAGED_LINES)
    journal.record_job("j2", task_id="bundled/L1/02_NewGELU", solution_hash="s2")  # still written and read
    assert [e.job_id for e in Journal(path).pending()] == ["j2"]


# ---------------------------------------------------------------------------------------------- the baseline cache

KEY = BaselineKey(task_hash="0" * 64, gpu="NVIDIA H200", torch="2.11.0", protocol_key="cudagym-v5-abc")
EAGER = TimingStats(median_us=100.0, mean_us=101.0, min_us=99.0, max_us=104.0, iqr_us=1.5, ci95_halfwidth_pct=0.4,
                    runs=50)
COMPILED = TimingStats(median_us=80.0, mean_us=81.0, min_us=79.0, max_us=84.0, iqr_us=1.0, ci95_halfwidth_pct=0.3,
                       runs=50)


@pytest.mark.parametrize(("field", "value"), [
    ("runs", "50"),  # text where a count was: `known` compared text with 0
    ("median_us", float("nan")),  # a NaN baseline turns every speedup into NaN
    ("median_us", -5.0),
    ("median_us", 0.0),  # timed, with no time: every candidate 0x eager
    ("runs", 2.5),
    (None, ["not", "an", "object"]),
])
def test_a_baseline_file_edited_to_another_type_is_ignored_and_retimed(tmp_path, caplog, field, value):
    cache = BaselineCache(tmp_path / "baselines")
    assert cache.put(KEY, EAGER, COMPILED, task_id="bundled/L1/01_Swish").known
    path = cache.path(KEY)
    data = json.loads(path.read_text())
    if field is None:
        data["eager"] = value
    else:
        data["eager"][field] = value
    path.write_text(json.dumps(data))
    with caplog.at_level(logging.WARNING, logger="cudagym.judge.baselines"):
        held = cache.get(KEY)
    assert not held.known and not held.eager.measured  # unknown, so the pipeline times it again
    assert "ignoring unreadable" in caplog.text
    assert cache.entries() == []  # `cudagym baselines show` lists what it can read, and does not fail
    assert cache.put(KEY, EAGER, COMPILED).eager == EAGER  # the next measurement replaces the damaged file
    assert cache.get(KEY).known
