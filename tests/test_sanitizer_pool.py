"""The compute-sanitizer gates through the real worker pool on the CPU path, with a stand-in for the tool.

This host has no GPU and no compute-sanitizer, so ``STAND_IN`` plays the tool's part at its command line:
it takes the options the lane passes, runs the sanitized runner under them (the real one: confined, loading
the candidate, calling it on the protocol's correctness inputs), then writes a report in compute-sanitizer's
format and exits as the tool does: ``memcheck`` always finds two errors, every other tool none. What is under
test is everything around the tool: when the gates run, the confinement, who decides (the exit status and
the report, not the runner), and what a candidate can do about it from inside.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from split_pools import cpu_split_pool

from cudagym.judge.interface import EvalMode
from cudagym.judge.job import Job, KnownBaselines
from cudagym.judge.protocol import CUDAGYM_V0
from cudagym.judge.records import BuildResult, BuildStatus, EvalResult, EvalStatus
from cudagym.judge.sanitizer import BINARY_ENV
from cudagym.judge.worker import WorkerPool
from cudagym.solution import Solution
from cudagym.task import make_task

STAND_IN = '''#!{python}
"""Stand-in for compute-sanitizer (tests only): run the program, then report as the tool would."""
import subprocess
import sys

args, opts = sys.argv[1:], {{}}
while args and args[0].startswith("--"):
    opts[args[0]], args = args[1], args[2:]
code = subprocess.run(args).returncode
with open(opts["--log-file"], "a") as log:
    log.write("========= COMPUTE-SANITIZER\\n")
    if opts["--tool"] == "memcheck":
        for thread in (255, 254):
            log.write("========= Invalid __global__ read of size 4 bytes\\n"
                      "=========     at relu_kernel(const float *, float *, long long)+0x1f0\\n"
                      "=========         in /home/judge/work/kernels/relu.cu:27\\n"
                      f"=========     by thread ({{thread}},0,0) in block (3,0,0)\\n"
                      "=========     Access to 0x7f3a5c000fa0 is out of bounds\\n"
                      "=========\\n")
        log.write("========= ERROR SUMMARY: 2 errors\\n")
        sys.exit(int(opts["--error-exitcode"]))
    log.write("========= ERROR SUMMARY: 0 errors\\n")
sys.exit(code if code >= 0 else 128 - code)
'''

TASK = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(8, 32)]

def get_init_inputs():
    return []
'''

HONEST = '''
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        return torch.clamp(x, min=0.0)
'''

ZEROS = HONEST.replace("torch.clamp(x, min=0.0)", "torch.zeros_like(x)")

# Behave only where the judge compares: fail on the third call of the sanitized run (the runner's argv[0] tells).
FAILS_UNDER_THE_TOOL = '''
import sys
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    calls = 0

    def forward(self, x):
        ModelNew.calls += 1
        if sys.argv[0].endswith("sanitizer.py") and ModelNew.calls == 3:
            raise RuntimeError(f"call {ModelNew.calls} under the tool")
        return torch.clamp(x, min=0.0)
'''

# Kill the tool's front end (this process's parent) before it can report what it saw.
KILLS_THE_TOOL = '''
import os
import signal
import sys
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        if sys.argv[0].endswith("sanitizer.py"):
            os.kill(os.getppid(), signal.SIGKILL)
        return torch.clamp(x, min=0.0)
'''

# Leave quietly, status 0, before the checked calls are done: the tool saw nothing wrong, because nothing ran.
EXITS_EARLY = KILLS_THE_TOOL.replace("os.kill(os.getppid(), signal.SIGKILL)", "os._exit(0)")

# The timing claims are not under test here: on a small loaded host (other test runs beside this one) the
# split's clock check can fire on an honest candidate, so its allowance is wide open.
GATED = CUDAGYM_V0.with_changes(id="test-sanitizer", guards=(), num_inputs=2, warmup_runs=1, warmup_ms=0.0,
                                min_runs=5, max_runs=5, target_ci_pct=0.0, scaled_inputs=(4.0,),
                                eval_timeout_s=240.0, extra={"claim_slack_us": 1e6})


pool = pytest.fixture(scope="module", name="pool")(cpu_split_pool)


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    tool = tmp_path / "sanitizer" / "bin" / "compute-sanitizer"
    tool.parent.mkdir(parents=True)
    tool.write_text(STAND_IN.format(python=sys.executable))
    tool.chmod(0o755)
    monkeypatch.setenv(BINARY_ENV, str(tool))
    return tool


def judge(pool: WorkerPool, candidate: str, tools: tuple[str, ...], mode: EvalMode = EvalMode.SUBMIT) -> EvalResult:
    job = Job(
        job_id=f"sanitizer-{'-'.join(tools)}-{mode.value}",
        task=make_task(textwrap.dedent(TASK), id="test/sanitizer", suite="test", level=1, name="relu",
                       origin="test"),
        solution=Solution("inline", {"model_new.py": textwrap.dedent(candidate)}),
        build=BuildResult(BuildStatus.OK, "inline"),
        mode=mode,
        protocol=GATED.with_changes(sanitizer=tools),
        baselines=KnownBaselines(),
    )
    return pool.submit(job).result(timeout=600)


def _gate_notes(result: EvalResult) -> list[str]:
    return [n for n in result.notes if "compute-sanitizer" in n]


def test_a_clean_gate_leaves_a_passing_submit_passing_with_a_note(pool: WorkerPool, stand_in: Path) -> None:
    result = judge(pool, HONEST, ("initcheck",))
    assert result.status is EvalStatus.OK, result.message + result.log[-3000:]
    assert _gate_notes(result) == [n for n in result.notes if n.startswith("compute-sanitizer initcheck: no errors")]
    assert len(_gate_notes(result)) == 1 and result.candidate.runs == 5


def test_errors_the_tool_reports_reject_the_submit_with_the_rule_named(pool: WorkerPool, stand_in: Path) -> None:
    result = judge(pool, HONEST, ("memcheck", "initcheck"))
    assert result.status is EvalStatus.RULE_VIOLATION, result.message + result.log[-3000:]
    assert [v.guard for v in result.violations] == ["sanitizer_memcheck"]
    message = result.violations[0].message
    assert message.startswith("compute-sanitizer memcheck found 2 errors in the candidate's checked calls")
    assert "Invalid __global__ read of size 4 bytes; at relu_kernel" in message and "in relu.cu:27" in message
    assert "/home/judge" not in message
    assert any(n.startswith("compute-sanitizer initcheck: no errors") for n in result.notes)


def test_verify_and_profile_run_no_gate(pool: WorkerPool, stand_in: Path) -> None:
    for mode in (EvalMode.VERIFY, EvalMode.PROFILE):
        result = judge(pool, HONEST, ("memcheck",), mode)
        assert result.status is EvalStatus.OK and not _gate_notes(result), result.message


def test_a_candidate_that_already_failed_is_not_gated(pool: WorkerPool, stand_in: Path) -> None:
    result = judge(pool, ZEROS, ("memcheck",))
    assert result.status is EvalStatus.INCORRECT and not _gate_notes(result), result.message


def test_a_candidate_that_fails_only_under_the_tool_is_rejected(pool: WorkerPool, stand_in: Path) -> None:
    result = judge(pool, FAILS_UNDER_THE_TOOL, ("initcheck",))
    assert result.status is EvalStatus.RULE_VIOLATION, result.message + result.log[-3000:]
    assert [v.guard for v in result.violations] == ["sanitizer_initcheck"]
    message = result.violations[0].message
    assert "failed under compute-sanitizer initcheck (exit status 1), where they had passed without it" in message
    assert "RuntimeError: call 3 under the tool" in message  # its third call: the scaled set ran too


def test_killing_the_tool_from_inside_is_a_failure_not_a_pass(pool: WorkerPool, stand_in: Path) -> None:
    result = judge(pool, KILLS_THE_TOOL, ("initcheck",))
    assert result.status is EvalStatus.RULE_VIOLATION, result.message + result.log[-3000:]
    assert [v.guard for v in result.violations] == ["sanitizer_initcheck"]
    assert "killed by signal 9" in result.violations[0].message


def test_a_host_without_the_tool_gets_a_clear_message(pool: WorkerPool, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BINARY_ENV, str(tmp_path / "no" / "compute-sanitizer"))
    result = judge(pool, HONEST, ("memcheck",))
    assert result.status is EvalStatus.INFRA_ERROR and not result.violations
    assert result.message.startswith("protocol test-sanitizer gates SUBMIT on compute-sanitizer (memcheck)")
    assert "Traceback" not in result.message


def test_exiting_early_with_status_zero_is_not_a_pass(pool: WorkerPool, stand_in: Path) -> None:
    result = judge(pool, EXITS_EARLY, ("initcheck",))
    assert result.status is EvalStatus.RULE_VIOLATION, result.message + result.log[-3000:]
    assert "exited before its checked calls were done" in result.violations[0].message
