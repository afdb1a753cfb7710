"""Session 29's red team of ``cudagym bench``: runs that overlap, fill the disk, resume elsewhere or read damage.

Each test drives the real command line (``cudagym.cli.main``, or ``python -m cudagym.cli`` where a second
process or a file size limit is needed) on the tests' stand-in judges, and checks that bad input or a bad
moment ends in a one-line error that says what to do, with every journaled episode kept and readable.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from bench_journals import child_env, oracle_entries, started_slow_bench, write_run

from cudagym import cli
from cudagym.bench.journal import EPISODES, MANIFEST, read_entries, read_manifest

pytestmark = pytest.mark.usefixtures("offline_data_env")

ROOT = Path(__file__).resolve().parents[1]
TASKS = ["bundled/L1/01_Swish", "bundled/L1/02_NewGELU", "bundled/L1/03_Mish"]
GATE_ENV = "CUDAGYM_TEST_JUDGE_GATE"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``cudagym ARGV``; the exit code, stdout and stderr."""
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def bench(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``cudagym bench`` on the stand-in judge (its GPU an H200), without the progress bar."""
    return run_cli(capsys, "bench", "--judge", "bench_journals:fake_judge", "--no-progress", *argv)


def refused(result: tuple[int, str, str]) -> str:
    """Check a command was refused as a usage error with one line and no traceback; its stderr."""
    code, _, err = result
    assert code == 2, err
    assert "Traceback" not in err and "unexpected" not in err, err
    return err


def gated_judge(protocol: Any) -> Any:
    """``--judge test_bench_robustness_s29:gated_judge``: a stand-in judge that takes long to start.

    It touches ``$CUDAGYM_TEST_JUDGE_GATE.started``, then waits (up to 60 s) for ``$CUDAGYM_TEST_JUDGE_GATE.go``:
    a run that has begun but has not written its manifest yet, held there for as long as a test needs.
    """
    from fakes import FakeJudge

    gate = Path(os.environ[GATE_ENV])
    gate.with_suffix(".started").touch()
    deadline = time.monotonic() + 60
    while not gate.with_suffix(".go").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return FakeJudge(protocol=protocol)


def agents_of(run_dir: Path) -> list[str]:
    """The agent of every journal line, in order (duplicates too)."""
    return [json.loads(line)["record"]["agent"] for line in (run_dir / EPISODES).read_text().splitlines()]


# ---------------------------------------------------------------------------------------------- two runs at once

def test_a_second_run_on_a_folder_whose_run_is_starting_is_refused_and_the_first_kept(capsys, tmp_path):
    out, gate = tmp_path / "run", tmp_path / "gate"
    first = subprocess.Popen(
        [sys.executable, "-m", "cudagym.cli", "bench", "--judge", "test_bench_robustness_s29:gated_judge",
         "--agent", "scripted", "--tasks", *TASKS, "--no-progress", "--out", str(out)],
        cwd=ROOT, env={**child_env(), GATE_ENV: str(gate)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not gate.with_suffix(".started").exists() and time.monotonic() < deadline:
            assert first.poll() is None, first.communicate()
            time.sleep(0.02)
        assert not (out / MANIFEST).exists()  # begun, but nothing on disk says so yet
        err = refused(bench(capsys, "--agent", "random", "--max-turns", "2", "--tasks", *TASKS, "--out", str(out)))
        assert f"{out} is in use by another `cudagym bench`" in err
    finally:
        gate.with_suffix(".go").touch()
        stdout, stderr = first.communicate(timeout=120)
    assert first.returncode == 0, stderr
    assert read_manifest(out)["plan"]["agent"] == "scripted"
    assert agents_of(out) == ["scripted"] * 3  # none of the refused run's episodes


def test_a_resume_while_the_run_still_plays_is_refused_and_nothing_is_played_twice(capsys, tmp_path):
    out = tmp_path / "run"
    proc = started_slow_bench(out, 4, text=True)
    try:
        err = refused(run_cli(capsys, "bench", "--no-progress", "--resume", "--out", str(out)))
        assert f"{out} is in use by another `cudagym bench`" in err
    finally:
        _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    keys = [json.loads(line)["key"] for line in (out / EPISODES).read_text().splitlines()]
    assert len(keys) == 8 and len(set(keys)) == 8


def test_a_new_run_over_a_journal_without_a_manifest_is_refused_and_the_journal_untouched(capsys, tmp_path):
    out = write_run(tmp_path / "run", oracle_entries())
    (out / MANIFEST).unlink()  # e.g. a journal copied here on its own
    before = (out / EPISODES).read_bytes()
    err = refused(bench(capsys, "--agent", "scripted", "--tasks", *TASKS, "--out", str(out)))
    assert f"holds an {EPISODES} but no {MANIFEST}" in err
    assert (out / EPISODES).read_bytes() == before and not (out / MANIFEST).exists()


# ---------------------------------------------------------------------------------------------- a full disk

# A child that may write files of at most LIMIT bytes (RLIMIT_FSIZE; a write past it fails with EFBIG, as a full
# disk fails with ENOSPC), runs ARGV through the command line and prints the exit code.
LIMITED = """
import resource, signal, sys
from cudagym import cli
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, resource.RLIM_INFINITY))
print("exit", cli.main({argv!r}))
"""

# A child that appends ENTRY twice through RunJournal: the first append past LIMIT bytes fails half written, then
# the limit is lifted (space freed) and the second goes in, as a run's other episode thread would append.
APPEND_AFTER_FAILURE = """
import resource, signal, sys
from cudagym.bench.journal import Entry, RunJournal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
entry = Entry.from_line(open({line!r}).read())
journal = RunJournal({run!r})
resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, resource.RLIM_INFINITY))
try:
    journal.append(entry)
except OSError as exc:
    print("failed:", exc)
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
journal.append(entry)
"""


def run_child(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -c CODE`` with the tests' stand-ins importable."""
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=child_env(), capture_output=True, text=True,
                          timeout=120)


def test_a_failed_append_leaves_no_part_of_its_line_to_spoil_the_next(tmp_path):
    out = write_run(tmp_path / "run", oracle_entries()[:1])
    line_file = tmp_path / "line.json"
    line_file.write_text((out / EPISODES).read_text().splitlines()[0])
    size = (out / EPISODES).stat().st_size
    done = run_child(APPEND_AFTER_FAILURE.format(line=str(line_file), run=str(out), limit=size + size // 2))
    assert done.returncode == 0, done.stderr
    assert "failed: [Errno 27] File too large" in done.stdout
    entries = read_entries(out)  # every complete line still reads
    assert len((out / EPISODES).read_text().splitlines()) == 2 and len(entries) == 1
    assert f"(episode {oracle_entries()[0].key} not journaled): '{out / EPISODES}'" in done.stdout


def test_a_run_that_fills_the_disk_names_the_journal_keeps_its_episodes_and_resumes(tmp_path):
    out = tmp_path / "run"
    argv = ["bench", "--judge", "bench_journals:fake_judge", "--agent", "scripted", "--tasks", *TASKS,
            "--parallel", "1", "--no-progress", "--out", str(out)]
    full = run_child(LIMITED.format(limit=60_000, argv=argv))  # room for the manifest and one episode (~45 kB)
    assert "exit 2" in full.stdout and "Traceback" not in full.stderr, full.stderr
    assert f"cannot use {out / EPISODES}: File too large (episode bundled/L1/02_NewGELU#0 not journaled)" in full.stderr
    assert f"bench: stopped; 1 finished episode(s) are kept in {out / EPISODES}; continue with " \
           f"`cudagym bench --resume --out {out}`" in full.stderr
    assert len(read_entries(out)) == 1
    resumed = subprocess.run([sys.executable, "-m", "cudagym.cli", "bench", "--resume", "--no-progress", "--out",
                              str(out)], cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    keys = [json.loads(line)["key"] for line in (out / EPISODES).read_text().splitlines()]
    assert sorted(keys) == sorted(f"{t}#0" for t in TASKS)


# ---------------------------------------------------------------------------------------------- resuming elsewhere

def edit_manifest(run_dir: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Rewrite the run's manifest through ``change``."""
    data = json.loads((run_dir / MANIFEST).read_text())
    change(data)
    (run_dir / MANIFEST).write_text(json.dumps(data))


def keep_first_lines(run_dir: Path, n: int) -> None:
    """Keep only the first ``n`` journal lines (as if the run was killed after ``n`` episodes)."""
    lines = (run_dir / EPISODES).read_text().splitlines(keepends=True)
    (run_dir / EPISODES).write_text("".join(lines[:n]))


def test_a_resumed_run_goes_on_under_the_protocol_it_started_with(capsys, tmp_path):
    out = tmp_path / "run"
    assert bench(capsys, "--agent", "scripted", "--tasks", *TASKS, "--out", str(out))[0] == 0
    keep_first_lines(out, 1)
    kept = {e.key for e in read_entries(out)}
    # the run began when the default protocol was cudagym-v4; this install's default is newer
    edit_manifest(out, lambda m: m.update(protocol_id="cudagym-v4"))
    assert bench(capsys, "--resume", "--out", str(out))[0] == 0
    ran = {e.key: e.record.last_eval["protocol_id"] for e in read_entries(out) if e.key not in kept}
    assert len(ran) == 2 and set(ran.values()) == {"cudagym-v4"}, ran


def test_a_resume_under_a_protocol_this_install_does_not_know_is_refused(capsys, tmp_path):
    out = tmp_path / "run"
    assert bench(capsys, "--agent", "scripted", "--tasks", *TASKS, "--out", str(out))[0] == 0
    keep_first_lines(out, 1)
    edit_manifest(out, lambda m: m.update(protocol_id="cudagym-v99", cudagym="9.9.9"))
    err = refused(bench(capsys, "--resume", "--out", str(out)))
    assert "was judged under protocol 'cudagym-v99', which this install of cudagym does not know" in err
    assert len(read_entries(out)) == 1


def test_a_resume_on_another_gpu_is_refused_and_the_journal_kept(capsys, tmp_path):
    out = tmp_path / "run"
    assert bench(capsys, "--agent", "scripted", "--tasks", *TASKS, "--out", str(out))[0] == 0
    keep_first_lines(out, 1)
    edit_manifest(out, lambda m: m["hardware"].update(gpu="NVIDIA H100 80GB HBM3"))  # the run began on an H100
    before = (out / EPISODES).read_bytes()
    err = refused(bench(capsys, "--resume", "--out", str(out)))  # this judge is an H200
    assert "was judged on GPU 'NVIDIA H100 80GB HBM3', this judge has 'NVIDIA H200'" in err
    assert (out / EPISODES).read_bytes() == before


# ---------------------------------------------------------------------------------------------- hand-edited lines

def set_in_first_line(path: tuple[str, ...], value: Any) -> Callable[[Path], None]:
    """A damage: set ``path`` of the journal's first line to ``value``."""
    def damage(run_dir: Path) -> None:
        lines = (run_dir / EPISODES).read_text().splitlines()
        data = json.loads(lines[0])
        holder = data
        for part in path[:-1]:
            holder = holder[part]
        holder[path[-1]] = value
        (run_dir / EPISODES).write_text("\n".join([json.dumps(data), *lines[1:]]) + "\n")
    return damage


@pytest.mark.parametrize(("path", "value", "expected"), [
    (("seed",), "abc", "expected the entry's 'seed' to be an int, got str 'abc'"),
    (("key",), 5, "expected the entry's 'key' to be '<task id>#<sample>', got 5"),
    (("summary", "level"), "1", "expected the summary's level to be int, got str '1'"),
    (("summary", "final", "tier"), "3", "expected the summary's final.tier to be int, got str '3'"),
    (("summary", "best", "speedup_vs_eager"), "fast", "expected the summary's best.speedup_vs_eager to be float"),
])
@pytest.mark.parametrize("command", ["report", "export"])
def test_a_journal_line_edited_to_another_type_is_named_by_report_and_export(capsys, tmp_path, path, value,
                                                                              expected, command):
    out = write_run(tmp_path / "run", oracle_entries())
    set_in_first_line(path, value)(out)
    argv = {"report": ("report", str(out), "--no-plots"),
            "export": ("export", str(out), "--format", "rft", "--out", str(tmp_path / "rft.jsonl"))}[command]
    err = refused(run_cli(capsys, *argv))
    assert f"{out / EPISODES}:1: {expected}" in err
