from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import OPS6K_ROWS, kernelbench_problem

from cudagym import cli
from cudagym.sources.kernelbench import KernelBenchSource

pytestmark = pytest.mark.usefixtures("offline_data_env")


@pytest.fixture
def kb_env(kernelbench_tree, monkeypatch):
    monkeypatch.setenv("CUDAGYM_KERNELBENCH_DIR", str(kernelbench_tree))
    return kernelbench_tree


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_help_lists_every_command(capsys):
    code, out, _ = run_cli(capsys, "--help")
    assert code == 0
    for name in ("tasks", "demo", "baselines"):
        assert name in out
    code, _, err = run_cli(capsys)
    assert code == 2 and "usage: cudagym" in err


def test_version(capsys):
    from cudagym import __version__

    code, out, _ = run_cli(capsys, "--version")
    assert code == 0 and __version__ in out


def test_python_dash_m_cudagym_is_the_command():
    run = subprocess.run([sys.executable, "-m", "cudagym", "--version"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.startswith("cudagym "), run.stdout + run.stderr


def test_unknown_command_exits_2(capsys):
    code, out, err = run_cli(capsys, "frobnicate")
    assert code == 2 and out == ""
    assert "unknown command 'frobnicate'; expected one of: tasks, demo, baselines" in err


def test_command_whose_module_is_absent_exits_2_without_traceback(capsys, monkeypatch):
    monkeypatch.setitem(cli.COMMANDS, "demo", cli.Command("cudagym._not_written_yet", "demo"))
    code, _, err = run_cli(capsys, "demo")
    assert code == 2
    assert "`cudagym demo` is not available in this install (module cudagym._not_written_yet not found)" in err
    assert "Traceback" not in err


def test_command_whose_dependency_is_missing_names_it(capsys, monkeypatch, tmp_path):
    (tmp_path / "needs_missing_dep.py").write_text("import surely_not_installed_pkg\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(cli.COMMANDS, "baselines", cli.Command("needs_missing_dep", "x"))
    code, _, err = run_cli(capsys, "baselines")
    assert code == 2 and "needs the module 'surely_not_installed_pkg'" in err


def test_command_module_without_configure_run(capsys, monkeypatch, tmp_path):
    (tmp_path / "half_command.py").write_text("def run(args):\n    return 0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(cli.COMMANDS, "demo", cli.Command("half_command", "x"))
    code, _, err = run_cli(capsys, "demo")
    assert code == 2 and "missing configure" in err


def test_subcommand_exit_code_and_args_are_passed_through(capsys, monkeypatch, tmp_path):
    (tmp_path / "echo_command.py").write_text(
        "def configure(parser):\n    parser.add_argument('--code', type=int, default=0)\n\n"
        "def run(args):\n    print('ran', args.code)\n    return args.code\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(cli.COMMANDS, "demo", cli.Command("echo_command", "x"))
    assert run_cli(capsys, "demo", "--code", "5")[:2] == (5, "ran 5\n")
    code, _, err = run_cli(capsys, "demo", "--bogus")
    assert code == 2 and "unrecognized arguments: --bogus" in err


def test_tasks_list_json(capsys, kb_env):
    code, out, _ = run_cli(capsys, "tasks", "list", "--suite", "kernelbench", "--level", "1", "--json")
    assert code == 0
    listed = json.loads(out)
    expected = KernelBenchSource(1, root=kb_env).tasks()
    assert [e["id"] for e in listed] == [t.id for t in expected]
    assert listed[0] == {
        "id": expected[0].id, "suite": "kernelbench", "level": 1, "name": expected[0].name,
        "content_hash": expected[0].content_hash, "ops": list(expected[0].ops),
    }


def test_tasks_list_table(capsys, kb_env):
    code, out, _ = run_cli(capsys, "tasks", "list", "--suite", "kernelbench", "--level", "4")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["ID", "LEVEL", "HASH", "OPS"]
    assert len(lines) == 1 + 20 + 1
    first = KernelBenchSource(4, root=kb_env).tasks()[0]
    assert lines[1].split()[:3] == [first.id, "4", first.short_hash]
    assert lines[-1].startswith("20 task(s) from KernelBench checkout")


def test_tasks_list_ops6k_level_means_number_of_ops(capsys, ops6k_parquet, monkeypatch):
    monkeypatch.setenv("CUDAGYM_OPS6K_PARQUET", str(ops6k_parquet))
    code, out, _ = run_cli(capsys, "tasks", "list", "--suite", "ops6k", "--level", "2", "--json")
    assert code == 0
    listed = json.loads(out)
    assert len(listed) == sum(1 for _, ds in OPS6K_ROWS if ds == "torch#2")
    assert {e["level"] for e in listed} == {2}
    assert listed[0]["ops"] == ["Conv2d", "ReLU"]


def test_tasks_show_text(capsys, kb_env):
    stem, source = kernelbench_problem(2, 33)
    code, out, _ = run_cli(capsys, "tasks", "show", f"L2/{stem}")
    assert code == 0
    task = KernelBenchSource(2, root=kb_env).get(f"L2/{stem}")
    assert f"content hash: {task.content_hash}" in out
    assert "suite:        kernelbench" in out and "level:        2" in out
    assert f"ops:          {', '.join(task.ops)}" in out
    assert f"origin:       {task.metadata['origin']}" in out
    assert out.rstrip("\n").endswith(source.rstrip("\n"))


def test_tasks_show_json(capsys, kb_env):
    stem, _ = kernelbench_problem(3, 7)
    code, out, _ = run_cli(capsys, "tasks", "show", f"L3/{stem}", "--json")
    assert code == 0
    assert json.loads(out) == KernelBenchSource(3, root=kb_env).get(f"L3/{stem}").to_dict()


def test_tasks_errors_exit_2_with_a_message(capsys, kb_env):
    code, out, err = run_cli(capsys, "tasks", "show", "L1/999_Nothing")
    assert code == 2 and out == ""
    assert "no task 'L1/999_Nothing'" in err and "Traceback" not in err
    code, _, err = run_cli(capsys, "tasks", "show", "nonsense")
    assert code == 2 and "cannot tell the suite" in err
    code, _, err = run_cli(capsys, "tasks", "list", "--suite", "nope")
    assert code == 2 and "invalid choice: 'nope'" in err
    code, _, err = run_cli(capsys, "tasks")
    assert code == 2 and "required" in err


def test_tasks_missing_data_exits_2_saying_how_to_provide_it(capsys):
    code, _, err = run_cli(capsys, "tasks", "list", "--suite", "ops6k")
    assert code == 2
    assert "CUDAGYM_OPS6K_PARQUET" in err and "--path <path>" in err and "Traceback" not in err


def test_console_script_runs_in_a_real_process(kernelbench_tree, tmp_path):
    exe = shutil.which("cudagym")
    argv = [exe] if exe else [sys.executable, "-m", "cudagym.cli"]
    env = {**os.environ, "CUDAGYM_KERNELBENCH_DIR": str(kernelbench_tree)}
    stem, _ = kernelbench_problem(1, 19)
    done = subprocess.run([*argv, "tasks", "show", f"L1/{stem}", "--json"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["id"] == f"L1/{stem}"
    failed = subprocess.run([*argv, "tasks", "show", "L1/999_Nothing"], env=env, capture_output=True,
                            text=True, timeout=120)
    assert failed.returncode == 2 and "Traceback" not in failed.stderr


def test_closed_stdout_pipe_exits_quietly(kernelbench_tree):
    exe = shutil.which("cudagym")
    argv = [exe] if exe else [sys.executable, "-m", "cudagym.cli"]
    env = {**os.environ, "CUDAGYM_KERNELBENCH_DIR": str(kernelbench_tree)}
    proc = subprocess.Popen([*argv, "tasks", "list", "--suite", "kernelbench"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # the reader goes away before the listing is written, like `| head -0`
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert "Traceback" not in err and "BrokenPipeError" not in err
