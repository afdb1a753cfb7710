"""Bad input to every ``cudagym`` command: a clear message and exit code, never a traceback, never lost data.

Each test runs the real command line (``cudagym.cli.main``, or ``python -m cudagym.cli`` where a signal is
sent) with one kind of bad input: a path that cannot be written, a damaged run folder, an unknown or
conflicting option, a user callable that fails, a Ctrl-C.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest
from bench_journals import (
    child_env,
    judge_serve_interrupted,
    oracle_entries,
    slow_bench_command,
    started_slow_bench,
    write_run,
)

from cudagym import cli
from cudagym.bench.journal import EPISODES, MANIFEST, read_entries

pytestmark = pytest.mark.usefixtures("offline_data_env")

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
SWISH = "bundled/L1/01_Swish"
FAKE_JUDGE = "bench_journals:fake_judge"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``cudagym ARGV``; the exit code, stdout and stderr."""
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run ``cudagym ARGV``, check it is refused as a usage error without a traceback; its stderr."""
    code, _, err = run_cli(capsys, *argv)
    assert code == 2, err
    assert "Traceback" not in err and err.startswith("cudagym: error: "), err
    return err


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A finished bench run (hand-built episodes)."""
    return write_run(tmp_path / "run", oracle_entries())


@pytest.fixture
def a_file(tmp_path: Path) -> Path:
    """A plain file, where a folder is expected (and under which nothing can be created)."""
    path = tmp_path / "a_file"
    path.write_text("not a folder\n")
    return path


def bench(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``cudagym bench`` on the fake judge, without the progress bar."""
    return run_cli(capsys, "bench", "--judge", FAKE_JUDGE, "--no-progress", *argv)


# ---------------------------------------------------------------------------------------------- the last nets

def test_an_os_error_from_a_command_is_one_line_naming_the_path(capsys, monkeypatch, tmp_path):
    (tmp_path / "opens_missing.py").write_text(
        "def configure(parser):\n    pass\n\n"
        "def run(args):\n    open('/nonexistent-cudagym-dir/x.txt', 'w')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(cli.COMMANDS, "demo", cli.Command("opens_missing", "x"))
    err = refused(capsys, "demo")
    assert "cannot use /nonexistent-cudagym-dir/x.txt: No such file or directory" in err


def test_an_unexpected_error_is_one_line_with_the_traceback_behind_v(capsys, monkeypatch, tmp_path):
    (tmp_path / "raises_value.py").write_text(
        "def configure(parser):\n    pass\n\n"
        "def run(args):\n    raise ValueError('deep inside')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(cli.COMMANDS, "demo", cli.Command("raises_value", "x"))
    code, _, err = run_cli(capsys, "demo")
    assert code == 1 and "Traceback" not in err
    assert "cudagym: error: demo: unexpected ValueError: deep inside" in err and "cudagym -v demo" in err
    code, _, err = run_cli(capsys, "-v", "demo")
    assert code == 1 and "Traceback" in err  # asked for


# ---------------------------------------------------------------------------------------------- tasks

def test_fetch_models_dest_that_is_a_file_or_cannot_be_created(capsys, kernelbench_tree, a_file):
    root = str(kernelbench_tree)
    err = refused(capsys, "tasks", "fetch-models", "--root", root, "--level", "4", "--dest", str(a_file))
    assert f"expected --dest to be a folder, but {a_file} is a file" in err
    err = refused(capsys, "tasks", "fetch-models", "--root", root, "--level", "4", "--dest", str(a_file / "models"))
    assert f"cannot create the folder {a_file / 'models'} (--dest): {a_file} is a file, not a folder" in err


def test_ops6k_filters_on_another_suite_name_the_flags(capsys):
    err = refused(capsys, "tasks", "list", "--suite", "bundled", "--limit", "3", "--ops", "ReLU")
    assert "Ops-6K filters (for --suite ops6k only) given with --suite bundled: --ops, --limit" in err
    assert "suite_options" not in err  # the library's words, not the command line's


def test_min_ops_above_max_ops_is_refused_not_an_empty_list(capsys, ops6k_parquet):
    err = refused(capsys, "tasks", "list", "--suite", "ops6k", "--path", str(ops6k_parquet),
                  "--min-ops", "5", "--max-ops", "2")
    assert "expected --min-ops <= --max-ops, got --min-ops 5 and --max-ops 2" in err


# ---------------------------------------------------------------------------------------------- baselines

def test_check_table_that_cannot_be_written_is_refused_before_any_work(capsys, tmp_path, a_file):
    journal = tmp_path / "kb.jsonl"
    journal.write_text("")
    common = ("baselines", "check", "--suite", "bundled", "--from-journal", "--journal", str(journal))
    err = refused(capsys, *common, "--table", str(a_file / "table.md"))
    assert f"cannot create the folder {a_file} (--table {a_file / 'table.md'}): {a_file} is a file" in err
    err = refused(capsys, *common, "--table", str(tmp_path))
    assert f"expected --table to be a file, but {tmp_path} is a folder" in err


def test_baselines_journal_that_is_a_folder_or_cannot_be_created(capsys, tmp_path, a_file):
    err = refused(capsys, "baselines", "check", "--suite", "bundled", "--from-journal", "--journal", str(tmp_path),
                  "--table", str(tmp_path / "t.md"))
    assert f"--journal {tmp_path} is a folder; expected the journal file (JSONL) of a run" in err
    err = refused(capsys, "baselines", "precompute", "--suite", "bundled", "--journal", str(a_file / "j.jsonl"))
    assert f"cannot create the folder {a_file} (--journal {a_file / 'j.jsonl'}): {a_file} is a file" in err
    err = refused(capsys, "baselines", "check", "--suite", "bundled", "--journal", str(tmp_path),
                  "--table", str(tmp_path / "t.md"))
    assert f"expected --journal to be a file, but {tmp_path} is a folder" in err


@pytest.mark.parametrize(("flag", "value", "expected"), [
    ("--window", "0", "expected --window >= 1"),
    ("--first", "-2", "expected --first >= 0"),
    ("--stop-after-s", "-5", "expected --stop-after-s >= 0 (0: no limit), got -5.0"),
    ("--deadline-s", "nan", "expected --deadline-s >= 0 (0: no limit), got nan"),
])
def test_check_counts_and_times_that_mean_nothing_are_refused(capsys, tmp_path, flag, value, expected):
    err = refused(capsys, "baselines", "check", "--suite", "bundled", "--table", str(tmp_path / "t.md"), flag, value)
    assert expected in err


# ---------------------------------------------------------------------------------------------- judge serve

def test_judge_serve_journal_that_cannot_be_created(capsys, a_file):
    err = refused(capsys, "judge", "serve", "--devices", "none", "--journal", str(a_file / "judge.jsonl"))
    assert f"cannot create the folder {a_file} (--journal {a_file / 'judge.jsonl'}): {a_file} is a file" in err


def test_judge_serve_stopped_with_ctrl_c_exits_0_without_an_error(tmp_path):
    code, first, err = judge_serve_interrupted(tmp_path / "cache", lambda p: p.stdout.readline() if p.stdout else "")
    assert first.startswith("export "), first
    assert code == 0, err
    assert "stopped (Ctrl-C)" in err and "error" not in err and "Traceback" not in err


# ---------------------------------------------------------------------------------------------- eval

def test_eval_task_file_that_is_missing_a_folder_or_not_text(capsys, tmp_path):
    solution = tmp_path / "model_new.py"
    solution.write_text("import torch\n")
    err = refused(capsys, "eval", str(solution), "--task", str(tmp_path / "missing.py"))
    assert "to be a KernelBench-format .py file (or a task id such as bundled/L1/01_Swish), found no such file" in err
    assert "cannot tell the suite" not in err
    (tmp_path / "folder.py").mkdir()
    err = refused(capsys, "eval", str(solution), "--task", str(tmp_path / "folder.py"))
    assert "to be a KernelBench-format .py file, found a folder" in err
    (tmp_path / "binary.py").write_bytes(b"\xff\xfe\x00def Model(): pass\n")
    err = refused(capsys, "eval", str(solution), "--task", str(tmp_path / "binary.py"))
    assert "to be a Python source file (UTF-8), found bytes that are not UTF-8 at offset 0" in err


def test_eval_judge_callable_that_fails_names_it(capsys, tmp_path):
    solution = tmp_path / "model_new.py"
    solution.write_text("import torch\n")
    err = refused(capsys, "eval", str(solution), "--task", SWISH, "--judge", "os:getcwd")
    assert "--judge os:getcwd: calling it with the protocol failed: TypeError" in err


# ---------------------------------------------------------------------------------------------- bench

def test_bench_judge_and_agent_callables_that_fail_name_them(capsys, tmp_path):
    err = refused(capsys, "bench", "--judge", "os:getcwd", "--agent", "scripted", "--tasks", SWISH,
                  "--out", str(tmp_path / "judge"))
    assert "--judge os:getcwd: calling it with the protocol failed: TypeError" in err
    out = tmp_path / "agent"
    code, _, err = bench(capsys, "--agent", "json:loads", "--tasks", SWISH, "--out", str(out))
    assert code == 2 and "Traceback" not in err
    assert "--agent json:loads: calling it as loads(task_id='bundled/L1/01_Swish', seed=0) failed: TypeError" in err
    assert not (out / MANIFEST).exists()  # nothing was journaled: the same --out takes the corrected run
    assert bench(capsys, "--agent", "scripted", "--tasks", SWISH, "--out", str(out))[0] == 0
    assert len(read_entries(out)) == 1


def test_bench_env_kwargs_the_env_does_not_take(capsys, tmp_path):
    for which in (("--tasks", SWISH), ("--env", "CudaKernel-Bundled-v0")):
        code, _, err = bench(capsys, "--agent", "scripted", *which, "--env-kwargs", '{"bogus": 1}',
                             "--out", str(tmp_path / which[0].strip("-")))
        assert code == 2 and "Traceback" not in err
        assert "the env does not take an argument given" in err and "(--env-kwargs keys: bogus)" in err
        assert "was raised from the environment creator" not in err  # gym's repr of every argument


def test_bench_out_that_is_a_file_or_cannot_be_created(capsys, a_file):
    code, _, err = bench(capsys, "--agent", "scripted", "--tasks", SWISH, "--out", str(a_file))
    assert code == 2 and f"expected --out to be a folder, but {a_file} is a file" in err
    code, _, err = bench(capsys, "--agent", "scripted", "--tasks", SWISH, "--out", str(a_file / "run"))
    assert code == 2 and f"cannot create the folder {a_file / 'run'} (--out): {a_file} is a file" in err
    assert "Traceback" not in err


def test_bench_negative_seed_is_refused_before_the_run_starts(capsys, tmp_path):
    out = tmp_path / "run"
    code, _, err = bench(capsys, "--agent", "scripted", "--tasks", SWISH, "--seed", "-3", "--out", str(out))
    assert code == 2 and "expected --seed >= 0" in err and "Traceback" not in err
    assert not (out / MANIFEST).exists()


def test_bench_a_task_named_twice_is_refused(capsys, tmp_path):
    code, _, err = bench(capsys, "--agent", "scripted", "--tasks", SWISH, SWISH, "--out", str(tmp_path / "run"))
    assert code == 2 and f"--tasks names {SWISH} more than once" in err and "use -k" in err


def test_bench_new_run_that_fails_before_any_episode_leaves_no_run_behind(capsys, tmp_path):
    out = tmp_path / "run"
    code, _, err = bench(capsys, "--agent", "scripted", "--tasks", SWISH, "--tokenizer", "no-such-tokenizer",
                         "--out", str(out))
    assert code == 2 and "expected a tokenizer spec" in err
    assert not (out / MANIFEST).exists() and not (out / EPISODES).exists()
    code, _, err = bench(capsys, "--agent", "scripted", "--tasks", SWISH, "--out", str(out))
    assert code == 0, err  # not "already holds a run"


def test_bench_without_a_gpu_says_nothing_was_checked(capsys, tmp_path):
    code, out, _ = run_cli(capsys, "bench", "--judge", "bench_journals:cpu_judge", "--no-progress", "--agent",
                           "scripted", "--tasks", SWISH, "--out", str(tmp_path / "run"))
    assert code == 0
    assert "no GPU: the judge built each solution but checked and timed none (tier 0, not evaluated)" in out


def test_bench_interrupted_with_ctrl_c_keeps_finished_episodes_and_says_how_to_resume(tmp_path):
    out = tmp_path / "run"
    command = slow_bench_command(out, 4)
    proc = started_slow_bench(out, 4, text=True)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in err, err
    kept = read_entries(out)
    assert 2 <= len(kept) < 8
    assert f"{len(kept)} finished episode(s) are kept" in err and f"cudagym bench --resume --out {out}" in err
    resumed = subprocess.run([*command[:3], "bench", "--resume", "--no-progress", "--out", str(out)], cwd=ROOT,
                             env=child_env(), capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert len(read_entries(out)) == 8


# ---------------------------------------------------------------------------------------------- damaged run folders

def damage_journal_with_bytes_that_are_not_utf8(run: Path) -> None:
    """Append a complete line that is not UTF-8."""
    with open(run / EPISODES, "ab") as fh:
        fh.write(b"\xff\xfe not text\n")


def journal_is_a_folder(run: Path) -> None:
    """Put a folder where the journal is."""
    (run / EPISODES).unlink()
    (run / EPISODES).mkdir()


def plan_with_tasks_of_another_type(run: Path) -> None:
    """Give the manifest's plan a ``tasks`` that is a number."""
    manifest = json.loads((run / MANIFEST).read_text())
    manifest["plan"]["tasks"] = 5
    (run / MANIFEST).write_text(json.dumps(manifest))


@pytest.mark.parametrize(("damage", "expected"), [
    (damage_journal_with_bytes_that_are_not_utf8, "episodes.jsonl:7: expected a journal line (UTF-8 JSON), got "
                                                  "bytes that are not UTF-8"),
    (journal_is_a_folder, "episodes.jsonl to be the run's journal file, found a folder"),
    (plan_with_tasks_of_another_type, "manifest.json: expected the plan's 'tasks' to be list (or null), got int 5"),
])
@pytest.mark.parametrize("command", ["report", "export", "resume"])
def test_a_damaged_run_folder_is_named_by_every_command(capsys, run_dir, tmp_path, damage, expected, command):
    damage(run_dir)
    argv = {
        "report": ("report", str(run_dir), "--no-plots"),
        "export": ("export", str(run_dir), "--format", "rft", "--out", str(tmp_path / "rft.jsonl")),
        "resume": ("bench", "--no-progress", "--resume", "--out", str(run_dir)),
    }[command]
    err = refused(capsys, *argv)
    assert expected in err


# ---------------------------------------------------------------------------------------------- export and report

@pytest.mark.parametrize("name", [EPISODES, MANIFEST])
def test_export_out_onto_the_runs_own_files_is_refused_and_the_run_kept(capsys, run_dir, name):
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    err = refused(capsys, "export", str(run_dir), "--format", "rft", "--out", str(run_dir / ".." / "run" / name))
    assert f"is the run's own {name}; writing it would destroy the run" in err
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before


def test_export_out_that_is_a_folder_or_cannot_be_created(capsys, run_dir, tmp_path, a_file):
    err = refused(capsys, "export", str(run_dir), "--format", "rft", "--out", str(tmp_path))
    assert f"expected --out to be a file, but {tmp_path} is a folder" in err
    err = refused(capsys, "export", str(run_dir), "--format", "rft", "--out", str(a_file / "rft.jsonl"))
    assert f"cannot create the folder {a_file} (--out {a_file / 'rft.jsonl'}): {a_file} is a file" in err
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")] == []


def test_report_out_that_is_a_file_or_cannot_be_created(capsys, run_dir, a_file):
    err = refused(capsys, "report", str(run_dir), "--no-plots", "--out", str(a_file))
    assert f"expected --out to be a folder, but {a_file} is a file" in err
    err = refused(capsys, "report", str(run_dir), "--no-plots", "--out", str(a_file / "report"))
    assert f"cannot create the folder {a_file / 'report'} (--out): {a_file} is a file, not a folder" in err
