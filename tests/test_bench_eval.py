"""``cudagym eval PATH --task ID``: the three formats and model_new.py read, the table, --json, exit codes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cudagym.bench.evaluate import detect_format, read_solution
from cudagym.cli import main
from cudagym.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "cudagym" / "templates" / "examples" / "abs"
TASK = "bundled/L1/01_Swish"


def evaluate(*args: str, judge: str = "bench_journals:fake_judge") -> int:
    return main(["eval", *args, "--judge", judge])


@pytest.mark.parametrize("fmt", ["extension", "inline", "raw"])
def test_each_example_folder_is_read_in_its_own_format(fmt):
    solution = read_solution(EXAMPLES / fmt)
    assert solution.format == fmt and "model_new.py" in solution.files
    assert detect_format(EXAMPLES / fmt) == fmt


def test_the_kernels_folder_decides_when_model_new_names_no_loader(tmp_path):
    (tmp_path / "kernels").mkdir()
    (tmp_path / "model_new.py").write_text("class ModelNew: pass\n")
    assert detect_format(tmp_path) == "inline"
    (tmp_path / "kernels" / "op.cu").write_text("")
    assert detect_format(tmp_path) == "raw"
    (tmp_path / "kernels" / "op_binding.cpp").write_text("")
    assert detect_format(tmp_path) == "extension"


def test_a_single_model_new_py_is_the_inline_format(tmp_path):
    path = tmp_path / "model_new.py"
    path.write_text((EXAMPLES / "inline" / "model_new.py").read_text())
    assert read_solution(path).format == "inline"
    with pytest.raises(ConfigError, match="inline format"):
        read_solution(path, "raw")
    with pytest.raises(ConfigError, match="found nothing"):
        read_solution(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="expected .*/model_new.py"):
        read_solution(tmp_path / "empty")


def test_a_correct_solution_prints_the_table_and_exits_0(capsys):
    assert evaluate(str(EXAMPLES / "extension"), "--task", TASK) == 0
    out = capsys.readouterr().out
    assert "extension format, 3 file(s)) against bundled/L1/01_Swish, submit mode" in out
    for part in ("Submit: PASS", "Build OK", "Correctness: 5/5 inputs pass", "Timing (microseconds",
                 "1.11x", "Tier: 2 (faster than eager, not than torch.compile)", "Guards: no guard fired",
                 "Precision: baselines and candidate ran with TF32 off"):
        assert part in out


def test_json_is_the_whole_verdict_with_its_tier(capsys):
    assert evaluate(str(EXAMPLES / "raw"), "--task", TASK, "--json", "--mode", "profile") == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["tier"], data["reward"], data["format"], data["mode"]) == (2, 2.0, "raw", "profile")
    assert data["result"]["status"] == "ok" and len(data["result"]["checks"]) == 5


def test_a_wrong_solution_exits_1(capsys):
    assert evaluate(str(EXAMPLES / "inline"), "--task", TASK, judge="bench_journals:wrong_judge") == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "Tier: -1 (failed)" in out


def test_without_a_gpu_it_says_so_and_shows_the_build(capsys):
    assert evaluate(str(EXAMPLES / "raw"), "--task", TASK, judge="bench_journals:cpu_judge") == 0
    out = capsys.readouterr().out
    assert "NO GPU FOUND: only the build ran" in out and "Build OK" in out and "Tier: 0 (not evaluated)" in out
    assert evaluate(str(EXAMPLES / "raw"), "--task", TASK, judge="bench_journals:failing_build_judge") == 1
    assert 'kernels/relu.cu:12:5: error: identifier "x" is undefined' in capsys.readouterr().out


def test_usage_errors_exit_2(tmp_path, capsys):
    assert evaluate(str(EXAMPLES / "raw"), "--task", "bundled/L1/99_Nothing") == 2
    assert "bundled/L1/99_Nothing" in capsys.readouterr().err
    assert evaluate(str(tmp_path / "missing"), "--task", TASK) == 2
    assert "expected a solution folder or a model_new.py" in capsys.readouterr().err
    assert evaluate(str(EXAMPLES / "raw"), "--task", TASK, "--mode", "fast") == 2


def test_a_reference_file_can_be_the_task(capsys):
    assert evaluate(str(EXAMPLES / "raw"), "--task", str(EXAMPLES / "task.py"), "--mode", "verify") == 0
    out = capsys.readouterr().out
    assert "against file/task, verify mode" in out and "Timing" not in out


HAS_NVCC = bool(shutil.which("nvcc")) or Path("/usr/local/cuda/bin/nvcc").exists()


@pytest.mark.skipif(not HAS_NVCC or not shutil.which("bwrap"), reason="needs nvcc and bubblewrap")
def test_the_real_judge_builds_and_says_no_gpu_on_a_cpu_host():
    # its own process: the process-wide default judge of this one may be another test's stand-in
    run = subprocess.run([sys.executable, "-m", "cudagym.cli", "eval", str(EXAMPLES / "raw"), "--task",
                          str(EXAMPLES / "task.py")], cwd=ROOT, capture_output=True, text=True, timeout=600)
    if "NO GPU FOUND" not in run.stdout:
        pytest.skip("this host has a GPU: the GPU tests cover the judged path")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Build OK (raw format" in run.stdout and "Isolation: bubblewrap" in run.stdout
