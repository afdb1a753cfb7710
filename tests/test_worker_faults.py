"""Host-side faults of candidate code, on CPU: each gives a clear -1-tier status within its timeout, the
worker is replaced, and the next job on that worker lane is correct.

Each candidate is a file under tests/faults/ opening with a comment naming its fault; the worker runs it
through a stand-in of the harness (``model_jobs:run_model``: import model_new.py, run ModelNew and the
reference on one CPU input, compare). The GPU faults, and these faults through the real harness, are in
test_worker_faults_gpu.py.
"""

from __future__ import annotations

import time

import pytest
from faults import FAULTS_DIR, candidate, make_job

from cudagym.judge.records import EvalStatus
from cudagym.judge.sandbox import MiB, SandboxPolicy
from cudagym.judge.worker import PoolOptions, WorkerPool

# The worker with torch imported holds ~300 MiB; the limits leave room for that and stop faults fast.
POLICY = SandboxPolicy(
    max_processes=32, host_rss_bytes=1024 * MiB, file_size_bytes=64 * MiB, disk_bytes=256 * MiB,
    output_bytes=8 * MiB, log_bytes=16 * 1024,
)

# fault file -> (status, words the message must hold, job timeout in seconds)
FAULTS = {
    "segfault": (EvalStatus.CRASHED, "SIGSEGV", 120),
    "exit_os": (EvalStatus.CRASHED, "exited with status 3", 120),
    "exit_sys": (EvalStatus.CRASHED, "exited with status 4", 120),
    "crash_at_import": (EvalStatus.RUNTIME_ERROR, "failed while importing", 120),
    "stdout_flood": (EvalStatus.CRASHED, "MiB to stdout/stderr", 120),
    "host_loop": (EvalStatus.TIMEOUT, "timed out after 4 s", 4),
    "host_oom": (EvalStatus.CRASHED, "of host memory", 300),
    "fork_bomb": (EvalStatus.CRASHED, "processes", 300),
    "disk_fill": (EvalStatus.RUNTIME_ERROR, "File too large", 120),
    "disk_fill_files": (EvalStatus.CRASHED, "to disk", 300),
}


@pytest.fixture(scope="module")
def pool():
    options = PoolOptions(job_fn="model_jobs:run_model", pythonpath=(str(FAULTS_DIR),), policy=POLICY,
                          startup_timeout_s=180.0)
    with WorkerPool(["0"], options=options) as p:
        assert p.submit(make_job(candidate("good_relu"))).result().status is EvalStatus.OK
        yield p


def test_every_fault_file_names_its_fault():
    for name in FAULTS:
        assert (FAULTS_DIR / f"{name}.py").read_text().startswith("# Fault: ")


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_fault_gives_a_clear_result_and_the_next_job_is_correct(pool, name):
    status, words, timeout_s = FAULTS[name]
    generation = pool.info()[0].generation
    started = time.monotonic()
    result = pool.submit(make_job(candidate(name), timeout_s=timeout_s)).result()
    elapsed = time.monotonic() - started
    assert result.status is status, result.message
    assert words in result.message
    assert elapsed < timeout_s + 60  # within the job's timeout, plus the kill and the log
    assert len(result.log) <= POLICY.log_bytes + 200
    good = pool.submit(make_job(candidate("good_relu"))).result()
    assert good.status is EvalStatus.OK, good.message
    assert pool.info()[0].generation > generation  # the faulty worker was replaced
