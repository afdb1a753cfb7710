"""Faults on a GPU, through LocalJudge with the real build stage and harness: each gives a clear -1-tier
result within the timeout, the runner process that ran it (and whatever it started) is gone, and the next job on
that GPU (the bundled Swish reference solution) is correct.

GPU faults are folders under tests/faults/ in the ``extension`` format (illegal address, endless kernel,
device OOM); the host faults of test_worker_faults.py run here too, as the ``model_new.py`` of an otherwise
valid Swish solution. Guards are off (a guard firing first would hide the fault) and VERIFY mode is used.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from faults import FAULTS_DIR

from cudagym.judge.interface import EvalMode
from cudagym.judge.local import LocalJudge, probe_gpus
from cudagym.judge.protocol import DEFAULT_PROTOCOL
from cudagym.judge.records import EvalStatus
from cudagym.judge.sandbox import GiB, MiB, SandboxPolicy
from cudagym.judge.split import RUNNER_MODULE
from cudagym.judge.worker import PoolOptions
from cudagym.solution import Solution

pytestmark = pytest.mark.gpu

TIMEOUT_S = 30.0
PROTOCOL = DEFAULT_PROTOCOL.with_changes(id="cudagym-faults-test", guards=(), eval_timeout_s=TIMEOUT_S)
POLICY = SandboxPolicy(max_processes=64, host_rss_bytes=16 * GiB, file_size_bytes=256 * MiB, disk_bytes=1 * GiB,
                       output_bytes=16 * MiB)
TASK_ID = "bundled/L1/01_Swish"

# fault -> (statuses it may end in, regex its message must match)
FAULTS = {
    "gpu_illegal_address": ({EvalStatus.RUNTIME_ERROR, EvalStatus.CRASHED}, r"illegal memory access"),
    "gpu_kernel_loop": ({EvalStatus.TIMEOUT}, r"timed out after 30 s"),
    "gpu_device_oom": ({EvalStatus.RUNTIME_ERROR}, r"(?i)out of memory"),
    "segfault": ({EvalStatus.CRASHED}, r"SIGSEGV"),
    "exit_os": ({EvalStatus.CRASHED}, r"exited with status 3"),
    "exit_sys": ({EvalStatus.CRASHED, EvalStatus.RUNTIME_ERROR}, r"status 4|exit\(4\)|SystemExit: 4"),
    "crash_at_import": ({EvalStatus.RUNTIME_ERROR}, r"failed while importing"),
    "stdout_flood": ({EvalStatus.CRASHED}, r"MiB to stdout/stderr"),
    "host_loop": ({EvalStatus.TIMEOUT}, r"timed out after 30 s"),
    "host_oom": ({EvalStatus.CRASHED}, r"of host memory"),
    "fork_bomb": ({EvalStatus.CRASHED}, r"processes"),
    "disk_fill": ({EvalStatus.RUNTIME_ERROR}, r"File too large"),
}


@pytest.fixture(scope="module")
def swish():
    from cudagym.sources.bundled import BundledSource

    source = BundledSource()
    return source.get(TASK_ID), source.solution(TASK_ID)


@pytest.fixture(scope="module")
def judge():
    first_gpu = list(probe_gpus("auto").device_ids[:1])
    options = PoolOptions(policy=POLICY)
    # the user cache (CUDAGYM_CACHE_DIR): the Swish build is shared with the other GPU tests, not redone
    with LocalJudge(PROTOCOL, devices=first_gpu, pool_options=options) as j:
        yield j


def stray_runner_processes(judge: LocalJudge) -> set[int]:
    """Processes started as runners (bubblewrap's, the runner's, any it forked) that no spare runner owns."""
    spares = {runner.proc.pid for runner in judge.pipeline.gpus._pool._lanes[0].runners}
    parent, runners = {}, set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            parent[int(proc.name)] = int(stat[stat.rindex(")") + 2:].split()[1])
            if RUNNER_MODULE.encode() in (proc / "cmdline").read_bytes():
                runners.add(int(proc.name))
        except (OSError, ValueError):  # gone meanwhile
            pass

    def owned(pid: int) -> bool:
        while pid > 1 and pid not in spares:
            pid = parent.get(pid, 0)
        return pid in spares

    return {pid for pid in runners if not owned(pid)}


def fault_solution(name: str, reference: Solution) -> Solution:
    folder = FAULTS_DIR / name
    if folder.is_dir():
        files = {p.relative_to(folder).as_posix(): p.read_text() for p in folder.rglob("*") if p.is_file()
                 and "__pycache__" not in p.parts}
        return Solution("extension", files)
    return Solution("extension", {**reference.files, "model_new.py": (FAULTS_DIR / f"{name}.py").read_text()})


def test_the_reference_solution_passes_before_any_fault(judge, swish):
    task, reference = swish
    result = judge.evaluate(task, reference, EvalMode.VERIFY)
    assert result.status is EvalStatus.OK, result.message
    info = judge.workers()[0]
    print(f"worker sandbox on this host: {info.sandbox}")
    assert info.sandbox is not None


@pytest.mark.parametrize("name", list(FAULTS))
def test_gpu_fault_gives_a_clear_result_and_the_next_job_on_that_gpu_is_correct(judge, swish, name):
    task, reference = swish
    statuses, pattern = FAULTS[name]
    assert PoolOptions(policy=POLICY).uses_runner  # the candidate runs in a runner, never in the worker
    assert not stray_runner_processes(judge)
    started = time.monotonic()
    result = judge.evaluate(task, fault_solution(name, reference), EvalMode.VERIFY)
    elapsed = time.monotonic() - started
    print(f"{name}: {result.status.value} in {elapsed:.1f} s: {result.message.splitlines()[0]}")
    assert result.build.ok, result.build.message
    assert result.status in statuses, result.message
    assert re.search(pattern, result.message), result.message
    assert elapsed < TIMEOUT_S + 120
    good = judge.evaluate(task, reference, EvalMode.VERIFY)
    assert good.status is EvalStatus.OK, good.message
    # the runner that ran the fault is gone with whatever it started: only the spares' processes are left
    assert not stray_runner_processes(judge), sorted(stray_runner_processes(judge))
