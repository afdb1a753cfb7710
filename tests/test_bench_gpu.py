"""GPU: ``cudagym eval`` of a bundled reference solution, ``cudagym bench`` + ``report`` over two bundled tasks.

Each runs in its own process with the real local judge (the process-wide default judge of the test process
may be another test's stand-in).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = ROOT / "envs" / "bundled" / "solutions" / "L1" / "01_Swish"
TASKS = ["bundled/L1/01_Swish", "bundled/L2/01_GemmGeluScaleShift"]


def cudagym(*args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cudagym.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.gpu
def test_eval_of_a_bundled_reference_solution_passes_with_a_tier():
    run = cudagym("eval", str(SOLUTION), "--task", TASKS[0], "--json")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    data = json.loads(run.stdout)
    assert data["result"]["status"] == "ok" and data["tier"] >= 1 and data["evaluated"]
    assert data["result"]["candidate"]["runs"] > 0 and data["result"]["isolation"]["network_isolated"]


@pytest.mark.gpu
def test_bench_and_report_over_two_bundled_tasks(tmp_path):
    out = tmp_path / "run"
    run = cudagym("bench", "--agent", "scripted", "--tasks", *TASKS, "--parallel", "2", "--no-progress",
                  "--out", str(out))
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    lines = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    assert sorted(x["task_id"] for x in lines) == sorted(TASKS)
    assert all(x["summary"]["final"]["tier"] >= 1 for x in lines), [x["summary"]["final"] for x in lines]
    report = cudagym("report", str(out), "--no-plots")
    assert report.returncode == 0 and "| **overall** | 2 | 2 | 100.0% |" in report.stdout, report.stdout
