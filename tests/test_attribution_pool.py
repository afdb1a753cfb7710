"""The kernel attribution gate through the real worker pool and sandbox on the CPU path, with a stand-in for ``ncu``.

This host has no GPU and no Nsight Compute, so ``STAND_IN`` plays ``ncu``'s two halves at their command lines.
Launched (``--mode=launch``, inside the attributed runner's sandbox), it listens on the sandbox's own loopback as
the tool's injection does and runs the real attributed runner (confined, loading the candidate, running its
forwards); attaching (``--mode=attach``, started by the lane outside the sandbox in the sandbox's network
namespace) it connects there and prints a report in ``ncu --csv``'s format, whose kernels the test names
(``REPORT_ENV``): what the real tool would have seen on a GPU. Under test is everything around the tool: when the
gate runs, that the front end reaches the runner through the sandbox's network alone, who decides (the front end's
report, read by the lane), and the verdicts. That the real tool names the kernels is the GPU's to show
(``benchmarks/attribution_probe.py``).
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from split_pools import cpu_split_pool
from test_sanitizer_pool import HONEST, TASK, ZEROS  # the tiny relu task, an honest answer and a wrong one

from cudagym.judge import attribution
from cudagym.judge.interface import EvalMode
from cudagym.judge.job import Job, KnownBaselines
from cudagym.judge.protocol import CUDA_AGENT, CUDAGYM_V0, Protocol
from cudagym.judge.records import BuildResult, BuildStatus, EvalResult, EvalStatus
from cudagym.judge.worker import WorkerPool
from cudagym.solution import Solution
from cudagym.task import make_task

REPORT_ENV = "CUDAGYM_TEST_NCU_KERNELS"  # a JSON file: the kernels the stand-in's report names, in launch order
PORT = 49152

STAND_IN = '''#!{python}
"""Stand-in for ncu (tests only): launch a program behind a loopback listener, or attach to one and report."""
import csv, io, json, os, socket, subprocess, sys

if sys.argv[1] == "--mode=launch":
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", {port}))
    server.listen(1)
    program = subprocess.Popen(sys.argv[2:])  # its output goes where the tool's own does
    code = program.wait()
    server.settimeout(60)
    conn, _ = server.accept()
    conn.sendall(f"{{code}} {{program.pid}}".encode())
    conn.close()
    sys.exit(code if code >= 0 else 128 - code)
assert sys.argv[1] == "--mode=attach", sys.argv
try:
    conn = socket.create_connection(("127.0.0.1", {port}), timeout=2)
except OSError as exc:
    print("==ERROR== could not connect:", exc)
    sys.exit(1)
conn.settimeout(120)
code, pid = conn.recv(64).decode().split()
print("==PROF== Disconnected from process", pid, "(exit status", code + ")")
out = io.StringIO()
writer = csv.writer(out, quoting=csv.QUOTE_ALL)
writer.writerow(["ID", "Process ID", "Process Name", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value"])
for i, (name, us, *other) in enumerate(json.loads(open(os.environ["{report_env}"]).read())):
    process = int(pid) + 1 if other else pid  # a row marked "other": a process beside the program
    writer.writerow([i, process, "python3", name, "gpu__time_duration.sum", "nsecond", f"{{us * 1000:,.0f}}"])
print(out.getvalue(), end="")
'''


# the runner's CUDA set-up before the candidate loads, then each forward between the judge's markers
SETUP = [("void at::native::vectorized_elementwise_kernel<4, FillFunctor<float>>", 1.5),
         ("void at::native::vectorized_elementwise_kernel<4, CUDAFunctorOnSelf_add<float>>", 1.6)]
MARK = (attribution.MARK_KERNEL, 1.0)
OWN = ("relu_kernel(const float *, float *, long long)", 2.0)
TORCH = ("void at::native::vectorized_elementwise_kernel<4, clamp_min_scalar_kernel_impl>", 2.0)
INPUTS = ("void at::native::distribution_elementwise_grid_stride_kernel<float, 4>", 3.0)


def report(*forwards: list[tuple]) -> list[tuple]:
    rows = list(SETUP)
    for kernels in forwards:
        rows += [INPUTS, MARK, *kernels, MARK]
    return rows


# The timing claims are not under test here (see test_sanitizer_pool.py): the split's clock check is wide open.
GATED = CUDAGYM_V0.with_changes(id="test-attribution", guards=(), num_inputs=2, warmup_runs=1, warmup_ms=0.0,
                                min_runs=5, max_runs=5, target_ci_pct=0.0, eval_timeout_s=240.0,
                                extra={"claim_slack_us": 1e6, "attribution": "ncu"})
# the same under the cuda-agent preset's timing (the runner's profiler sums its kernels: the claim the gate bounds)
GATED_PROFILED = CUDA_AGENT.with_changes(id="test-attribution-profiled", guards=(), num_inputs=2, warmup_runs=1,
                                         eval_timeout_s=240.0, extra={"claim_slack_us": 1e6, "attribution": "ncu"})


pool = pytest.fixture(scope="module", name="pool")(cpu_split_pool)


@pytest.fixture
def ncu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from cudagym.judge import confine

    if confine.mode() != "bwrap":
        pytest.skip("the gate needs the bubblewrap sandbox (CI installs it)")
    tool = tmp_path / "nsight" / "bin" / "ncu"
    tool.parent.mkdir(parents=True)
    tool.write_text(STAND_IN.format(python=sys.executable, port=PORT, report_env=REPORT_ENV))
    tool.chmod(0o755)
    monkeypatch.setenv(attribution.BINARY_ENV, str(tool))
    return tool


def judge(pool: WorkerPool, candidate: str, kernels: list[tuple[str, float]], tmp_path: Path,
          monkeypatch: pytest.MonkeyPatch, mode: EvalMode = EvalMode.SUBMIT, protocol: Protocol = GATED) -> EvalResult:
    named = tmp_path / "kernels.json"
    named.write_text(json.dumps(kernels))
    monkeypatch.setenv(REPORT_ENV, str(named))
    job = Job(
        job_id=f"attribution-{mode.value}-{len(kernels)}",
        task=make_task(textwrap.dedent(TASK), id="test/attribution", suite="test", level=1, name="relu",
                       origin="test"),
        solution=Solution("inline", {"model_new.py": textwrap.dedent(candidate)}),
        build=BuildResult(BuildStatus.OK, "inline"),
        mode=mode,
        protocol=protocol,
        baselines=KnownBaselines(),
    )
    return pool.submit(job).result(timeout=600)


def _gate_notes(result: EvalResult) -> list[str]:
    return [n for n in result.notes if n.startswith(attribution.RULE)]


@pytest.mark.parametrize("protocol", [GATED, GATED_PROFILED], ids=["events", "profiler"])
def test_own_kernels_seen_from_outside_leave_a_passing_submit_passing(pool, ncu, tmp_path, monkeypatch,
                                                                      protocol) -> None:
    result = judge(pool, HONEST, report([OWN], [OWN], [OWN]), tmp_path, monkeypatch, protocol=protocol)
    assert result.status is EvalStatus.OK, result.message + result.log[-3000:]
    notes = _gate_notes(result)
    assert len(notes) == 1 and "saw 2 judged forward(s) of 1 kernel(s)" in notes[0], notes
    assert "relu_kernel" in notes[0]


def test_torch_doing_the_work_is_a_violation_named_for_the_gate(pool, ncu, tmp_path, monkeypatch) -> None:
    result = judge(pool, HONEST, report([OWN], [TORCH], [TORCH]), tmp_path, monkeypatch)
    assert result.status is EvalStatus.RULE_VIOLATION, result.message + result.log[-3000:]
    assert [v.guard for v in result.violations] == [attribution.RULE]
    message = result.violations[0].message
    assert message.startswith("in forward 2 profiled from outside the runner, your kernels and cuBLAS/cuDNN did "
                              "only 0%")
    assert "clamp_min_scalar_kernel_impl" in message


def test_a_marker_launched_by_the_candidate_is_a_violation(pool, ncu, tmp_path, monkeypatch) -> None:
    # a fake end marker early in forward 2 would leave the torch kernel after it outside every forward
    result = judge(pool, HONEST, report([OWN], [OWN, MARK, TORCH, MARK], [OWN]), tmp_path, monkeypatch)
    assert result.status is EvalStatus.RULE_VIOLATION, result.message + result.log[-3000:]
    assert "the judge's marker kernel ran 8 times where the judge launched it 6 times" in result.violations[0].message


@pytest.mark.parametrize("protocol", [GATED, GATED_PROFILED], ids=["events", "profiler"])
def test_profiled_work_far_beyond_the_timed_median_is_a_violation(pool, ncu, tmp_path, monkeypatch, protocol) -> None:
    slow = ("relu_kernel(const float *, float *, long long)", 5e6)  # 5 s of kernels against a timed call of µs
    result = judge(pool, HONEST, report([slow], [slow], [slow]), tmp_path, monkeypatch, protocol=protocol)
    assert result.status is EvalStatus.RULE_VIOLATION, result.message + result.log[-3000:]
    assert "the timed calls ran other work than the profiled ones" in result.violations[0].message


def test_a_report_without_kernels_is_the_tools_failure_not_the_candidates(pool, ncu, tmp_path, monkeypatch) -> None:
    result = judge(pool, HONEST, [], tmp_path, monkeypatch)
    assert result.status is EvalStatus.INFRA_ERROR and not result.violations, result.message
    assert result.message.startswith("kernel_attribution: Nsight Compute's front end named no kernel")


def test_markers_missing_once_the_tool_profiles_are_the_candidates(pool, ncu, tmp_path, monkeypatch) -> None:
    result = judge(pool, HONEST, report([OWN])[:-1], tmp_path, monkeypatch)
    assert result.status is EvalStatus.RULE_VIOLATION, result.message + result.log[-3000:]
    assert "the profile holds 1 of the 6 marker launches" in result.violations[0].message


def test_kernels_of_another_process_are_a_violation(pool, ncu, tmp_path, monkeypatch) -> None:
    # a process the candidate started inherits the injection: its own kernels would pad the forward's
    helper = ("relu_kernel(const float *, float *, long long)", 50.0, "other")
    result = judge(pool, HONEST, report([OWN], [TORCH, helper], [TORCH, helper]), tmp_path, monkeypatch)
    assert result.status is EvalStatus.RULE_VIOLATION, result.message + result.log[-3000:]
    message = result.violations[0].message
    assert message.startswith("2 kernel(s) of another process than the runner ran under the profiler"), message


# Flood the output only in the attributed runner (its argv names the gate's module): killed for it, after it loaded
FLOODS_UNDER_THE_TOOL = HONEST.replace("        return torch.clamp(x, min=0.0)", """        import os, sys
        if sys.argv[0].endswith("attribution.py"):
            chunk = b"x" * (1 << 20)
            for _ in range(64):
                os.write(1, chunk)
        return torch.clamp(x, min=0.0)""")


def test_a_runner_killed_for_its_output_is_the_candidates_failure(pool, ncu, tmp_path, monkeypatch) -> None:
    result = judge(pool, FLOODS_UNDER_THE_TOOL, report([OWN], [OWN], [OWN]), tmp_path, monkeypatch)
    assert result.status is EvalStatus.RULE_VIOLATION, result.message + result.log[-3000:]
    message = result.violations[0].message
    assert message.startswith("the candidate's forwards under Nsight Compute did not finish (wrote more than"), message


def test_verify_and_a_failed_submit_run_no_gate(pool, ncu, tmp_path, monkeypatch) -> None:
    result = judge(pool, HONEST, report([TORCH], [TORCH], [TORCH]), tmp_path, monkeypatch, EvalMode.VERIFY)
    assert result.status is EvalStatus.OK and not _gate_notes(result), result.message
    result = judge(pool, ZEROS, report([TORCH], [TORCH], [TORCH]), tmp_path, monkeypatch)
    assert result.status is EvalStatus.INCORRECT and not _gate_notes(result), result.message


def test_a_host_without_ncu_gets_a_clear_message(pool, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(attribution.BINARY_ENV, str(tmp_path / "no" / "ncu"))
    result = judge(pool, HONEST, report([OWN], [OWN], [OWN]), tmp_path, monkeypatch)
    assert result.status is EvalStatus.INFRA_ERROR and not result.violations
    assert result.message.startswith("expected CUDAGYM_NCU to name the ncu executable")
    assert "Traceback" not in result.message


def test_the_front_end_reaches_the_runner_only_through_the_sandboxs_network(pool, ncu, tmp_path, monkeypatch) -> None:
    """An ``nsenter`` that stays in the host's network: the runner's listener is out of its reach (the sandbox
    keeps its private network), so the tool named nothing, and that is the tool's failure, not a pass."""
    fake = tmp_path / "bin" / "nsenter"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nwhile [ \"$1\" != \"--\" ]; do shift; done\nshift\nexec \"$@\"\n")
    fake.chmod(0o755)
    real_which = attribution.shutil.which
    monkeypatch.setattr(attribution.shutil, "which", lambda name: str(fake) if name == "nsenter" else real_which(name))
    monkeypatch.setattr(attribution, "ATTACH_TRIES_S", 3.0)
    result = judge(pool, HONEST, report([OWN], [OWN], [OWN]), tmp_path, monkeypatch)
    assert result.status is EvalStatus.INFRA_ERROR and not result.violations, result.message
    assert "named no kernel" in result.message and "could not connect" in result.message
