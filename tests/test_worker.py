"""Worker pool lifecycle on CPU with stand-in job functions: results, timeouts, group kills, replacement,
recycling, channel hardening, the sandbox as a job sees it, and closing."""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from faults import FAULTS_DIR, make_job, process_alive, processes_running, script

from cudagym.judge.records import EvalStatus
from cudagym.judge.sandbox import MiB, SandboxPolicy, prepare_workdir
from cudagym.judge.worker import PoolOptions, WorkerPool
from cudagym.solution import Solution

# which worker ran a job: its private root folder (a confined worker's pid is its PID namespace's, not the host's)
PID = "import os, sys\ndef run():\n    return os.path.basename(sys.argv[sys.argv.index('--root') + 1])\n"


def options(**changes) -> PoolOptions:
    base = dict(job_fn="jobs:run_script", pythonpath=(str(FAULTS_DIR),), startup_timeout_s=120.0)
    base.update(changes)
    return PoolOptions(**base)


@pytest.fixture
def pool():
    with WorkerPool(["0"], options=options()) as p:
        yield p


def run(pool: WorkerPool, source: str, **kw) -> object:
    return pool.submit(make_job(script(source), **kw)).result(timeout=300)


def test_a_job_runs_in_the_worker_and_its_output_comes_back_in_the_log(pool):
    result = run(pool, "def run():\n    print('hello from the candidate')\n    return 6 * 7\n")
    assert result.status is EvalStatus.OK and result.message == "42"
    assert "hello from the candidate" in result.log
    assert result.protocol_id == "test-fast"


def test_each_job_gets_only_its_own_output(pool):
    jobs = [make_job(script(f"def run():\n    print('marker-{i}')\n    return {i}\n")) for i in range(4)]
    results = [pool.submit(j).result(timeout=300) for j in jobs]
    for i, result in enumerate(results):
        assert f"marker-{i}" in result.log
        assert not any(f"marker-{k}" in result.log for k in range(4) if k != i)


def test_the_lane_counts_its_jobs_and_the_time_it_spent_on_them(pool):
    before = pool.info()[0]
    assert (before.lane_jobs, before.busy_s) == (0, 0.0)
    seen: list[float] = []
    future = pool.submit(make_job(script("import time\ndef run():\n    time.sleep(0.3)\n    return 1\n")))
    future.add_done_callback(lambda f: (time.sleep(0.2), seen.append(1.0)))  # runs on the lane's thread
    assert future.result(timeout=300).status is EvalStatus.OK
    deadline = time.monotonic() + 10
    while pool.info()[0].lane_jobs < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    after = pool.info()[0]
    assert after.lane_jobs == 1 and seen == [1.0]
    assert after.callbacks_s >= 0.2 and after.busy_s >= 0.3 + after.callbacks_s - 0.05
    assert 0.0 < after.teardown_s < after.busy_s - after.callbacks_s  # after the verdict, before the hand-off


def test_timeout_kills_the_worker_group_and_the_next_job_gets_a_new_worker(pool):
    before = run(pool, PID).message
    worker_pid = pool.info()[0].pid
    source = ("import subprocess, time\ndef run():\n    p = subprocess.Popen(['sleep', '1000.4242'])\n"
              "    time.sleep(1000)\n")
    started = time.monotonic()
    result = run(pool, source, timeout_s=5)
    assert result.status is EvalStatus.TIMEOUT
    assert "timed out after 5 s" in result.message and time.monotonic() - started < 60
    assert not processes_running("1000.4242") and not process_alive(worker_pid)
    after = run(pool, PID)
    assert after.status is EvalStatus.OK and after.message != before


def test_a_crash_gives_one_clear_result_and_a_replacement(pool):
    result = run(pool, "import os\ndef run():\n    print('about to exit')\n    os._exit(7)\n")
    assert result.status is EvalStatus.CRASHED
    assert "exited with status 7" in result.message and "about to exit" in result.message
    assert pool.info()[0].generation == 2
    assert run(pool, PID).status is EvalStatus.OK


def test_spare_workers_take_over_oldest_first_so_a_burst_of_crashes_waits_for_no_start_up():
    crash = "import os\ndef run():\n    os._exit(7)\n"
    with WorkerPool(["0"], options=options(spare_workers=3)) as pool:
        first = run(pool, PID).message
        lane = pool._lanes[0]
        spares = [w.root.name for w in lane.spares]
        assert len(spares) == 3 and first not in spares
        took_over = []
        for _ in range(3):
            assert run(pool, crash).status is EvalStatus.CRASHED
            took_over.append(run(pool, PID).message)
            assert len(lane.spares) == 3, "the spares are topped up after each replacement"
        assert took_over == spares
        assert pool.info()[0].generation == 4


def test_without_spares_a_replacement_starts_when_needed():
    with WorkerPool(["0"], options=options(spare_workers=0)) as pool:
        first = run(pool, PID).message
        assert pool._lanes[0].spares == []
        assert run(pool, "import os\ndef run():\n    os._exit(7)\n").status is EvalStatus.CRASHED
        assert run(pool, PID).message != first


@pytest.mark.parametrize(("changes", "named"), [
    ({"spare_workers": -1}, "spare_workers"), ({"spare_workers": 17}, "spare_workers"),
    ({"max_jobs_per_worker": 0}, "max_jobs_per_worker"), ({"spare_runners": 0}, "spare_runners"),
    ({"spare_runners": 17}, "spare_runners")])
def test_pool_options_out_of_range_are_a_config_error(changes, named):
    from cudagym.errors import ConfigError

    with pytest.raises(ConfigError, match=named):
        WorkerPool(["0"], options=options(**changes))


def test_spare_runners_left_open_are_three_quarters_of_the_cores_shared_among_the_gpus(monkeypatch):
    from cudagym.judge import worker

    for cores, gpus, expected in ((16, 1, 12), (2, 1, 2), (32, 2, 12), (128, 8, 12), (8, 4, 2), (12, 1, 9),
                                  (64, 1, 12)):
        monkeypatch.setattr(worker.os, "sched_getaffinity", lambda _pid, n=cores: set(range(n)))
        assert worker.default_spare_runners(gpus) == expected, (cores, gpus)
    monkeypatch.setattr(worker.os, "sched_getaffinity", lambda _pid: set(range(12)))
    with WorkerPool(["0", "1"], options=options()) as pool:  # the pool's own GPUs share the cores
        assert pool.options.spare_runners == 4
    with WorkerPool(["0"], options=options(spare_runners=5)) as pool:  # a given count stands
        assert pool.options.spare_runners == 5


def test_workers_are_recycled_after_n_jobs():
    with WorkerPool(["0"], options=options(max_jobs_per_worker=2)) as pool:
        pids = [run(pool, PID).message for _ in range(5)]
    assert pids[0] == pids[1] != pids[2] == pids[3] != pids[4]


def test_failed_jobs_retire_their_worker_unless_told_otherwise():
    failing = "def run():\n    raise ValueError('bad candidate')\n"
    for retire, same in ((True, False), (False, True)):
        with WorkerPool(["0"], options=options(retire_on_failure=retire)) as pool:
            first = run(pool, PID).message
            assert run(pool, failing).status is EvalStatus.RUNTIME_ERROR
            assert (run(pool, PID).message == first) is same


def test_a_job_function_that_raises_is_an_infra_error_with_its_traceback():
    with WorkerPool(["0"], options=options(job_fn="jobs:raise_error")) as pool:
        result = run(pool, PID)
    assert result.status is EvalStatus.INFRA_ERROR
    assert "stand-in harness bug" in result.message and "Traceback" in result.message


def test_a_worker_that_cannot_start_fails_the_job_with_its_output():
    with WorkerPool(["0"], options=options(job_fn="no_such_module:run_job")) as pool:
        result = run(pool, PID)
    assert result.status is EvalStatus.INFRA_ERROR
    assert "failed to start" in result.message and "No module named 'no_such_module'" in result.message


def test_jobs_spread_over_devices_and_every_submitter_gets_its_result():
    source = ("import os, time\ndef run():\n    time.sleep(0.3)\n"
              "    return os.environ['CUDA_VISIBLE_DEVICES'] + ':' + str(os.getpid())\n")
    with WorkerPool(["0", "1"], options=options()) as pool, ThreadPoolExecutor(4) as submitters:
        futures = list(submitters.map(lambda _: pool.submit(make_job(script(source))), range(8)))
        results = [f.result(timeout=300) for f in futures]
    assert all(r.status is EvalStatus.OK for r in results)
    assert {r.message.split(":")[0] for r in results} == {"0", "1"}


def test_exactly_one_result_per_job_under_mixed_faults():
    sources = [
        PID,
        "import os\ndef run():\n    os._exit(1)\n",
        "def run():\n    raise RuntimeError('x')\n",
        "import time\ndef run():\n    time.sleep(100)\n",
    ]
    jobs = [make_job(script(sources[i % 4]), timeout_s=4) for i in range(12)]
    with WorkerPool(["0", "1"], options=options()) as pool:
        futures = [pool.submit(j) for j in jobs]
        results = [f.result(timeout=300) for f in futures]
    expected = [EvalStatus.OK, EvalStatus.CRASHED, EvalStatus.RUNTIME_ERROR, EvalStatus.TIMEOUT]
    assert [r.status for r in results] == [expected[i % 4] for i in range(12)]


def test_output_floods_are_killed_and_the_log_stays_capped():
    policy = SandboxPolicy(output_bytes=4 * MiB, log_bytes=8192)
    with WorkerPool(["0"], options=options(policy=policy)) as pool:
        result = run(pool, "import sys\ndef run():\n    while True:\n        sys.stdout.write('y' * 65536)\n")
        assert result.status is EvalStatus.CRASHED and "stdout/stderr" in result.message
        assert len(result.log) <= 8192 + 200
        assert run(pool, PID).status is EvalStatus.OK


def test_a_forged_or_garbled_result_is_rejected(pool):
    forge = (
        "import json, os, sys\n"
        "def run():\n"
        "    fd = int(sys.argv[sys.argv.index('--results-fd') + 1])\n"
        "    body = json.dumps({'kind': 'result', 'seq': 0, 'nonce': 'guess', 'job_id': 'x', 'healthy': True,\n"
        "                       'result': {'status': 'ok', 'speedup_vs_eager': 100.0}}).encode()\n"
        "    os.write(fd, len(body).to_bytes(4, 'big') + body)\n"
        "    return 'should not count'\n"
    )
    result = run(pool, forge)
    assert result.status is EvalStatus.RUNTIME_ERROR and "malformed" in result.message
    garble = ("import os, sys\ndef run():\n    fd = int(sys.argv[sys.argv.index('--results-fd') + 1])\n"
              "    os.write(fd, b'\\x00\\x00\\x00\\x04junk')\n    return 1\n")
    assert run(pool, garble).status is EvalStatus.RUNTIME_ERROR
    assert run(pool, PID).status is EvalStatus.OK


def test_the_job_runs_sandboxed(tmp_path, monkeypatch, loopback_listener):
    monkeypatch.setenv("HF_TOKEN", "hf_do_not_leak")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:3128")
    policy = SandboxPolicy(file_size_bytes=16 * MiB, open_files=512)
    solution = Solution("extension", {"model_new.py": "import cuda_extension\n"})
    env = {"CUDAGYM_TEST_LISTEN_PORT": str(loopback_listener.port)}
    with WorkerPool(["5"], options=options(job_fn="jobs:report_sandbox", policy=policy, env=env)) as pool:
        workdir = prepare_workdir(tmp_path / "work", solution)
        job = make_job(solution)
        job = dataclasses.replace(job, workdir=str(workdir), protocol=job.protocol.with_changes(guards=()))
        result = pool.submit(job).result(timeout=300)
        info = pool.info()[0]
    facts = json.loads(result.message)
    assert "hf_do_not_leak" not in facts["environ_at_exec"] and "HTTPS_PROXY" not in facts["env"]
    assert facts["env"]["CUDA_VISIBLE_DEVICES"] == "5"
    assert facts["env"]["TORCHINDUCTOR_COMPILE_THREADS"] == "1"  # no compile pool outliving a job's TMPDIR
    assert facts["cwd"] == "<workspace>"  # the worker's own copy, its host path scrubbed from the result
    assert {"model_new.py", "binding.cpp", "binding_registry.h"} <= set(facts["files"])
    assert facts["env"]["HOME"] != os.environ.get("HOME") and os.path.basename(facts["env"]["HOME"]) == "home"
    assert (facts["fsize"], facts["nofile"], facts["core"]) == (16 * MiB, 512, 0)
    assert facts["pgid"] == facts["sid"] == 1  # the sandbox's own session and group, led by bubblewrap's init
    assert info.isolation is not None and info.isolation.confined and info.isolation.pid_namespace
    assert facts["pid"] != info.pid  # its own PID namespace: the host's processes do not exist for it
    assert facts["network"] != "reachable" and info.network_isolated and not loopback_listener.accepted
    assert facts["judge_writable"] is False
    assert result.isolation == info.isolation


def test_tampered_protected_files_are_a_rule_violation_before_any_candidate_code(tmp_path):
    solution = Solution("extension", {"model_new.py": "def run():\n    return 'ran'\n"})
    workdir = prepare_workdir(tmp_path / "work", solution)
    (workdir / "binding.cpp").chmod(0o644)
    (workdir / "binding.cpp").write_text("// not the judge's binding\n")
    job = make_job(solution)
    with WorkerPool(["0"], options=options()) as pool:
        result = pool.submit(dataclasses.replace(job, workdir=str(workdir))).result(timeout=300)
    assert result.status is EvalStatus.RULE_VIOLATION
    assert result.violations[0].guard == "protected_files" and "binding.cpp" in result.message


def test_close_answers_queued_jobs_and_is_idempotent():
    pool = WorkerPool(["0"], options=options())
    slow = pool.submit(make_job(script("import time\ndef run():\n    time.sleep(100)\n")))
    queued = [pool.submit(make_job(script(PID))) for _ in range(3)]
    time.sleep(0.5)
    threading.Thread(target=pool.close).start()
    pool.close()
    results = [f.result(timeout=120) for f in (slow, *queued)]
    assert all(r.status is EvalStatus.INFRA_ERROR for r in results)
    assert pool.submit(make_job(script(PID))).result().status is EvalStatus.INFRA_ERROR


def test_a_pool_without_devices_answers_no_gpu():
    with WorkerPool([], options=options()) as pool:
        assert pool.submit(make_job(script(PID))).result().status is EvalStatus.NO_GPU
