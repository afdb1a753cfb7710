"""Stand-in job functions for worker tests: what the harness does, reduced to the parts the tests need.

The worker imports this module by name (``jobs:run_model``) with tests/faults on its PYTHONPATH, so the
process management is tested without the real harness and without a GPU.
"""

from __future__ import annotations

import importlib.util
import json
import os
import resource
import sys
import time
from pathlib import Path

from cudagym.judge.job import Job
from cudagym.judge.records import EvalResult, EvalStatus


def _result(job: Job, status: EvalStatus, message: str) -> EvalResult:
    return EvalResult(status=status, message=message, build=job.build, protocol_id=job.protocol.id)


def _load_candidate(job: Job):
    path = Path.cwd() / "model_new.py"
    spec = importlib.util.spec_from_file_location(f"candidate_{job.job_id.replace('-', '_')}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_script(job: Job) -> EvalResult:
    """Import model_new.py from the working folder and call its ``run()``; OK with the value as message.

    The pipeline's clean baseline job (the task's reference, which has no ``run()``) is OK with nothing timed.
    """
    if job.job_id.startswith("baselines:"):
        return _result(job, EvalStatus.OK, "the baselines' job: this stand-in times nothing")
    try:
        value = _load_candidate(job).run()
    except Exception as exc:
        return _result(job, EvalStatus.RUNTIME_ERROR, f"{type(exc).__name__}: {exc}")
    return _result(job, EvalStatus.OK, str(value))


def report_sandbox(job: Job) -> EvalResult:
    """OK with a JSON message describing the process the job runs in (env, cwd, limits, network)."""
    import socket

    port = int(os.environ.get("CUDAGYM_TEST_LISTEN_PORT", "0"))  # a loopback port the test listens on
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        network = "reachable"
    except OSError as exc:
        network = f"unreachable: {exc}"
    facts = {
        "pid": os.getpid(),
        "pgid": os.getpgid(0),
        "sid": os.getsid(0),
        "cwd": os.getcwd(),
        "files": sorted(os.listdir(".")),
        "env": dict(os.environ),
        "environ_at_exec": open("/proc/self/environ", "rb").read().decode(errors="replace"),
        "fsize": resource.getrlimit(resource.RLIMIT_FSIZE)[0],
        "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        "core": resource.getrlimit(resource.RLIMIT_CORE)[0],
        "cpu": resource.getrlimit(resource.RLIMIT_CPU)[0],
        "network": network,
        "judge_writable": _writable(Path(__import__("cudagym").__file__).parent / "probe.tmp"),
        "sys_path": sys.path,
        "time": time.time(),
    }
    return _result(job, EvalStatus.OK, json.dumps(facts))


def _writable(path: Path) -> bool:
    try:
        path.write_text("x")
    except OSError:
        return False
    path.unlink()
    return True


def raise_error(job: Job) -> EvalResult:
    """A job function with a bug: raises instead of returning a result."""
    raise ValueError("stand-in harness bug")


def forge_baselines(job: Job) -> EvalResult:
    """A candidate that forges its result's baseline times (100x slower eager); the reference job is honest."""
    from cudagym.judge.records import Hardware, TimingStats

    honest = "ModelNew = Model" in job.solution.files.get("model_new.py", "")
    eager = TimingStats(median_us=100.0 if honest else 10_000.0, runs=10)
    return EvalResult(status=EvalStatus.OK, message="honest" if honest else "forged", build=job.build,
                      candidate=TimingStats(median_us=50.0, runs=10), eager=eager, compiled=eager,
                      protocol_id=job.protocol.id, hardware=Hardware(gpu="Fake GPU 80GB", torch="9.9.9+fake"))


def fake_timing(job: Job) -> EvalResult:
    """A PROFILE stand-in: made-up times; cached baselines (``job.baselines``) are used, not re-timed.

    The yardstick (the reference in the runner) likewise: the cached one, else 120 us over 20 calls, 3 of them late.
    SUBMIT times everything again, as the harness does.
    """
    from cudagym.judge.interface import EvalMode
    from cudagym.judge.records import EvalCost, Hardware, TimingStats, Yardstick

    bump = int(job.task.content_hash[:4], 16) % 50
    submit = job.mode is EvalMode.SUBMIT
    cached = job.baselines.known and not submit
    eager = job.baselines.eager if cached else TimingStats(median_us=100.0 + bump, runs=10)
    compiled = job.baselines.compiled if cached else TimingStats(median_us=80.0 + bump, runs=10)
    yardstick = job.baselines.yardstick if not submit else Yardstick()
    own, late, calls = (yardstick.time, yardstick.late_calls, yardstick.calls) if yardstick.measured else \
        (TimingStats(median_us=120.0 + bump, runs=20), 3, 20)
    return EvalResult(
        status=EvalStatus.OK, message="cached baselines" if cached else "timed baselines", build=job.build,
        candidate=TimingStats(median_us=50.0, runs=10), eager=eager, compiled=compiled,
        protocol_id=job.protocol.id, hardware=Hardware(gpu="Fake GPU 80GB", torch="9.9.9+fake"),
        runner_reference=own, runner_reference_disputed=yardstick.disputed if yardstick.measured else "",
        cost=EvalCost(late_reference_calls=late, reference_calls=calls),
    )
