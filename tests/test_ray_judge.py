"""RayJudge on CPU: ray.init(num_cpus=2), one actor with a faked GPU running the real worker pool with a
stand-in job function; builds as Ray tasks; an actor killed mid-job restarts and the job runs once more."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest
from faults import FAULTS_DIR, relu_task, script

from cudagym.errors import ConfigError
from cudagym.judge.gpus import GpuProbe
from cudagym.judge.interface import EvalMode
from cudagym.judge.records import EvalStatus, Hardware
from cudagym.judge.worker import PoolOptions

TESTS = Path(__file__).resolve().parent
FAKE_GPU = GpuProbe(("0",), Hardware(gpu="Fake GPU 80GB", compute_capability="9.0", torch="9.9.9+fake"))


def test_without_ray_the_error_says_how_to_install_it(monkeypatch):
    from cudagym.judge.ray_judge import RayJudge

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ConfigError, match=r'pip install "cudagym\[ray\]"'):
        RayJudge()


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    path = f"{TESTS}:{FAULTS_DIR}"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": path}})
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def judge(ray_cluster, tmp_path_factory):
    from cudagym.judge.ray_judge import RayJudge

    options = PoolOptions(job_fn="jobs:run_script", pythonpath=(str(FAULTS_DIR),), startup_timeout_s=180.0)
    with RayJudge("cudagym", actors=1, gpus_per_actor=0, gpus=FAKE_GPU, pool_options=options,
                  build_fn="ray_stand_ins:build", cache_dir=str(tmp_path_factory.mktemp("cache")),
                  max_restarts=2) as j:
        yield j


def test_ray_judge_runs_the_pipeline_with_build_tasks_and_a_gpu_actor(judge):
    assert judge.hardware().gpu == "Fake GPU 80GB"
    good = judge.evaluate(relu_task(), script("def run():\n    return 'on the actor'\n"), EvalMode.VERIFY)
    assert good.status is EvalStatus.OK and good.message == "on the actor", good.message
    assert good.build.artifact_key.startswith("k-") and good.hardware.gpu == "Fake GPU 80GB"
    broken = judge.evaluate(relu_task(), script("BROKEN"))
    assert broken.status is EvalStatus.BUILD_FAILED


def test_a_job_whose_actor_dies_runs_once_more_on_the_restarted_actor(judge, ray_cluster):
    gpus = judge.pipeline.gpus
    actor = gpus.actors[0]
    before = ray_cluster.get(actor.pid.remote())
    slow = script("import time\ndef run():\n    time.sleep(4)\n    return 'survived'\n")
    future = judge.submit(relu_task(), slow, EvalMode.VERIFY)
    killer = threading.Timer(1.5, lambda: ray_cluster.kill(actor, no_restart=False))
    killer.start()
    result = future.result(timeout=300)
    killer.join()
    assert result.status is EvalStatus.OK and result.message == "survived", result.message
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            after = ray_cluster.get(actor.pid.remote(), timeout=10)
            break
        except Exception:  # still restarting
            time.sleep(0.5)
    assert after != before  # a new actor process answered


@pytest.mark.gpu
def test_ray_judge_with_one_gpu_actor_judges_the_bundled_suite(tmp_path):
    ray = pytest.importorskip("ray")
    from cudagym.judge.ray_judge import RayJudge
    from cudagym.sources.bundled import BundledSource

    source = BundledSource()
    ids = [t.id for t in source.tasks()]
    ray.init(include_dashboard=False, log_to_driver=False)
    try:
        with RayJudge("cudagym", actors=1, cache_dir=str(tmp_path)) as judge:
            assert judge.has_gpu, judge.hardware()
            futures = {i: judge.submit(source.get(i), source.solution(i), EvalMode.PROFILE) for i in ids}
            results = {i: f.result(timeout=1800) for i, f in futures.items()}
    finally:
        ray.shutdown()
    bad = {i: f"{r.status.value}: {r.message.splitlines()[0] if r.message else ''}" for i, r in results.items()
           if not r.correct}
    print(f"RayJudge, one GPU actor: {len(ids) - len(bad)} of {len(ids)} bundled tasks correct")
    assert not bad, bad
