"""LocalJudge on CPU: the NO_GPU path, build failures and build caching, and (with a faked GPU and stand-in
workers) the worker path with hardware, baselines, journal resume, workdir cleanup and the shared judge."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest
from faults import FAULTS_DIR, candidate, relu_task, script

import cudagym.judge.local as local
from cudagym.errors import ConfigError
from cudagym.judge.interface import EvalMode
from cudagym.judge.local import GpuProbe, LocalJudge, default_judge, probe_gpus
from cudagym.judge.protocol import DEFAULT_PROTOCOL
from cudagym.judge.records import BuildResult, BuildStatus, EvalStatus, Hardware
from cudagym.judge.worker import PoolOptions

FAKE_GPU = GpuProbe(("0",), Hardware(gpu="Fake GPU 80GB", compute_capability="9.0", torch="9.9.9+fake"))


class CountingBuild:
    """A build stage stand-in: OK unless model_new.py says BROKEN; counts calls."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.calls = 0
        self.delay_s = delay_s
        self.lock = threading.Lock()

    def __call__(self, task, solution, protocol) -> BuildResult:
        with self.lock:
            self.calls += 1
        time.sleep(self.delay_s)
        if "BROKEN" in solution.files.get("model_new.py", ""):
            return BuildResult(BuildStatus.COMPILE_ERROR, solution.format, message="model_new.py:1: error: BROKEN")
        return BuildResult(BuildStatus.OK, solution.format, artifact_key="k")


def fake_gpu_judge(tmp_path, job_fn: str = "model_jobs:run_model", **kw) -> LocalJudge:
    options = PoolOptions(job_fn=job_fn, pythonpath=(str(FAULTS_DIR),), startup_timeout_s=180.0)
    kw.setdefault("build_fn", CountingBuild())
    return LocalJudge("cudagym", gpus=FAKE_GPU, pool_options=options, cache_dir=tmp_path / "cache", **kw)


# ---------------------------------------------------------------------------------------------- no GPU


def test_without_a_gpu_the_judge_builds_and_answers_no_gpu(tmp_path):
    build = CountingBuild()
    with LocalJudge(devices="none", build_fn=build, cache_dir=tmp_path) as judge:
        assert not judge.has_gpu and judge.hardware().gpu == "none"
        result = judge.evaluate(relu_task(), candidate("good_relu"), EvalMode.VERIFY)
        assert result.status is EvalStatus.NO_GPU and result.build.ok and result.build.artifact_key == "k"
        assert "no GPU" in result.message and result.protocol_id == DEFAULT_PROTOCOL.id
        assert judge.workers() == []
        assert judge.build(relu_task(), candidate("good_relu")).ok


def test_the_env_process_never_imports_torch_or_touches_cuda(tmp_path):
    code = (
        "import sys, json\n"
        f"sys.path.insert(0, {str(FAULTS_DIR.parent)!r})\n"
        "from faults import relu_task, candidate\n"
        "from cudagym.judge.local import LocalJudge\n"
        "from cudagym.judge.records import BuildResult, BuildStatus\n"
        "build = lambda t, s, p: BuildResult(BuildStatus.OK, s.format)\n"
        f"with LocalJudge(build_fn=build, cache_dir={str(tmp_path)!r}) as judge:\n"
        "    judge.hardware(); r = judge.evaluate(relu_task(), candidate('good_relu'))\n"
        "print(json.dumps({'torch': 'torch' in sys.modules, 'status': r.status.value}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    facts = json.loads(out.stdout.strip().splitlines()[-1])
    assert facts["torch"] is False
    assert facts["status"] in ("no_gpu", "ok")  # ok only where this machine has a GPU and the harness ran


def test_real_build_on_the_no_gpu_path(tmp_path):
    from cudagym.solution import Solution, get_format

    good = Solution("raw", get_format("raw").example_files())
    broken = Solution("raw", {**good.files, "kernels/relu.cu": good.files["kernels/relu.cu"] + "\nnot C++ at all\n"})
    with LocalJudge(devices="none", cache_dir=tmp_path) as judge:
        ok = judge.evaluate(relu_task(), good, EvalMode.VERIFY)
        bad = judge.evaluate(relu_task(), broken, EvalMode.VERIFY)
    assert ok.status is EvalStatus.NO_GPU and ok.build.ok and ok.build.artifact_path, ok.build.message
    assert bad.status is EvalStatus.BUILD_FAILED and bad.build.status is BuildStatus.COMPILE_ERROR
    assert any(d.file == "kernels/relu.cu" for d in bad.build.diagnostics)


def test_probe_without_devices_needs_no_subprocess():
    assert probe_gpus("none").device_ids == () and probe_gpus([]).hardware.gpu == "none"
    assert local._normalize_devices("0, 2") == ("0", "2") and local._normalize_devices("auto") is None


# ------------------------------------------------------------------------------------------------ builds


def test_a_failed_build_is_a_build_failed_result_with_the_build_attached(tmp_path):
    broken = script("BROKEN\n")
    with LocalJudge(devices="none", build_fn=CountingBuild(), cache_dir=tmp_path) as judge:
        result = judge.evaluate(relu_task(), broken)
    assert result.status is EvalStatus.BUILD_FAILED
    assert result.build.status is BuildStatus.COMPILE_ERROR and "BROKEN" in result.message


def test_builds_are_remembered_and_identical_requests_share_one_build(tmp_path):
    build = CountingBuild(delay_s=0.5)
    with LocalJudge(devices="none", build_fn=build, build_workers=2, cache_dir=tmp_path) as judge:
        futures = [judge.submit(relu_task(), candidate("good_relu"), EvalMode.VERIFY) for _ in range(4)]
        assert all(f.result(timeout=60).build.ok for f in futures)
        judge.build(relu_task(), candidate("good_relu"))
        judge.build(relu_task(), candidate("segfault"))
    assert build.calls == 2


def test_the_build_memo_keys_the_format_and_the_protocols_build_settings(tmp_path):
    from cudagym.judge.local import LocalBuilds
    from cudagym.judge.protocol import DEFAULT_PROTOCOL
    from cudagym.solution import Solution

    build = CountingBuild()
    builds = LocalBuilds(build, tmp_path, workers=1)
    try:
        task, good = relu_task(), candidate("good_relu")
        capped = DEFAULT_PROTOCOL.with_changes(extra={"build_compiler_memory_bytes": 50_000_000})  # the same id
        other_format = Solution("inline" if good.format != "inline" else "raw", dict(good.files))
        for protocol, solution in ((DEFAULT_PROTOCOL, good), (DEFAULT_PROTOCOL, good), (capped, good),
                                   (DEFAULT_PROTOCOL, other_format)):
            builds.build(task, solution, protocol).result(timeout=60)
    finally:
        builds.close()
    assert build.calls == 3  # the repeat answered from the memo; the capped protocol and the other format built


def test_a_crashing_build_stage_is_a_tool_error_and_is_retried(tmp_path):
    calls = []

    def flaky(task, solution, protocol):
        calls.append(1)
        if len(calls) == 1:
            raise OSError("nvcc vanished")
        return BuildResult(BuildStatus.OK, solution.format)

    with LocalJudge(devices="none", build_fn=flaky, cache_dir=tmp_path) as judge:
        first = judge.evaluate(relu_task(), candidate("good_relu"))
        assert first.status is EvalStatus.BUILD_FAILED and first.build.status is BuildStatus.TOOL_ERROR
        assert "nvcc vanished" in first.message
        assert judge.evaluate(relu_task(), candidate("good_relu")).status is EvalStatus.NO_GPU
    assert len(calls) == 2


# ------------------------------------------------------------------------------ worker path (faked GPU)


def test_jobs_run_on_the_workers_with_hardware_filled_and_workdirs_removed(tmp_path):
    with fake_gpu_judge(tmp_path) as judge:
        assert judge.has_gpu and judge.hardware().gpu == "Fake GPU 80GB"
        good = judge.evaluate(relu_task(), candidate("good_relu"), EvalMode.VERIFY)
        crash = judge.evaluate(relu_task(), candidate("segfault"), EvalMode.VERIFY)
        again = judge.evaluate(relu_task(), candidate("good_relu"), EvalMode.VERIFY)
        leftover = list((judge.pipeline.gpus.root / "jobs").iterdir())
        info = judge.workers()
    assert (good.status, crash.status, again.status) == (EvalStatus.OK, EvalStatus.CRASHED, EvalStatus.OK)
    assert good.hardware.gpu == "Fake GPU 80GB" and good.build.artifact_key == "k"
    assert "SIGSEGV" in crash.message
    assert leftover == []
    assert len(info) == 1 and info[0].device == "0" and info[0].generation >= 2


def test_baselines_are_timed_by_a_job_without_candidate_code_and_passed_to_candidates(tmp_path):
    task = relu_task()
    with fake_gpu_judge(tmp_path, job_fn="jobs:fake_timing") as judge:
        first = judge.evaluate(task, candidate("good_relu"))
        assert first.message == "cached baselines"  # the reference's own job timed them first
        stored = judge.baselines.get(local.BaselineKey.of(task, first.hardware, judge.protocol))
        assert stored.known and stored.eager == first.eager and stored.compiled == first.compiled
        # the reference's time in that clean job's runner is kept beside them, with its late calls, and handed on
        assert stored.yardstick.time == first.runner_reference and first.runner_reference.runs == 20
        assert (stored.yardstick.late_calls, stored.yardstick.calls) == (3, 20)
        assert (first.cost.late_reference_calls, first.cost.reference_calls) == (3, 20)
        second = judge.evaluate(task, candidate("segfault"))  # another solution of the same task
        assert second.message == "cached baselines" and second.eager == first.eager


def test_baselines_a_candidate_reports_never_enter_the_cache(tmp_path):
    task = relu_task()
    with fake_gpu_judge(tmp_path, job_fn="jobs:forge_baselines") as judge:
        result = judge.evaluate(task, candidate("good_relu"))
        stored = judge.baselines.get(local.BaselineKey.of(task, result.hardware, judge.protocol))
    assert result.message == "forged"  # the candidate's own job said 10 ms ...
    assert stored.known and stored.eager.median_us == 100.0  # ... the cache holds the reference job's 100 us


def test_a_journaled_job_is_not_run_again(tmp_path):
    journal = tmp_path / "run.jsonl"
    with fake_gpu_judge(tmp_path, job_fn="jobs:fake_timing", journal=journal) as judge:
        first = judge.submit(relu_task(), candidate("good_relu"), job_id="job-1").result(timeout=300)
    build = CountingBuild()
    with fake_gpu_judge(tmp_path, job_fn="jobs:fake_timing", journal=journal, build_fn=build) as judge:
        again = judge.submit(relu_task(), candidate("good_relu"), job_id="job-1").result(timeout=300)
        fresh = judge.submit(relu_task(), candidate("good_relu"), job_id="job-2").result(timeout=300)
    assert again == first and build.calls == 1
    assert fresh.status is EvalStatus.OK
    lines = [json.loads(line) for line in journal.read_text().splitlines()]
    assert [(x["kind"], x["job_id"]) for x in lines if x["kind"] == "result"] == [("result", "job-1"),
                                                                                   ("result", "job-2")]


def test_closing_is_idempotent_and_a_closed_judge_refuses_work(tmp_path):
    judge = LocalJudge(devices="none", build_fn=CountingBuild(), cache_dir=tmp_path)
    with judge:
        pass
    judge.close()
    with pytest.raises(ConfigError, match="closed"):
        judge.evaluate(relu_task(), candidate("good_relu"))


def test_default_judge_handles_share_one_backend_until_the_last_closes(tmp_path):
    first = default_judge("cudagym", devices="none", build_fn=CountingBuild(), cache_dir=tmp_path)
    second = default_judge("kernelbench")
    try:
        assert first.pipeline is second.pipeline and second.protocol.id == "kernelbench-v0.9"
        first.close()
        first.close()
        assert not second.pipeline.closed
        assert second.evaluate(relu_task(), candidate("good_relu")).status is EvalStatus.NO_GPU
    finally:
        second.close()
    assert second.pipeline.closed
    third = default_judge(devices="none", build_fn=CountingBuild(), cache_dir=tmp_path)
    assert third.pipeline is not second.pipeline
    third.close()


# --------------------------------------------------------------------------------------- on a real GPU


@pytest.fixture(scope="module")
def swish():
    from cudagym.sources.bundled import BundledSource

    source = BundledSource()
    return source.get("bundled/L1/01_Swish"), source.solution("bundled/L1/01_Swish")


@pytest.mark.gpu
def test_profile_on_a_gpu_stores_baselines_and_later_jobs_reuse_them(tmp_path, swish):
    task, solution = swish
    first_gpu = list(probe_gpus("auto").device_ids[:1])
    with LocalJudge(devices=first_gpu, cache_dir=tmp_path) as judge:
        hardware = judge.hardware()
        assert hardware.gpu != "none" and hardware.compute_capability and hardware.torch
        first = judge.evaluate(task, solution, EvalMode.PROFILE)
        assert first.status is EvalStatus.OK, first.message
        assert first.eager.measured and first.compiled.measured and first.candidate.measured
        assert first.hardware.gpu == hardware.gpu
        cached = judge.baselines.get(local.BaselineKey.of(task, hardware, judge.protocol))
        assert cached.known and cached.eager == first.eager
        # the clean job's yardstick beside them, which the candidate's PROFILE took instead of timing its own
        assert cached.yardstick.measured and first.runner_reference == cached.yardstick.time
        assert any("from the baseline cache" in n for n in first.notes), first.log[-2000:]
        second = judge.evaluate(task, solution, EvalMode.PROFILE)
        assert second.status is EvalStatus.OK, second.message
        assert second.eager == first.eager and second.compiled == first.compiled  # from the cache
        assert second.runner_reference == cached.yardstick.time
        info = judge.workers()[0]
        print(f"GPU {hardware.gpu}; worker sandbox: {info.sandbox}")


@pytest.mark.gpu
def test_precompute_times_the_baselines_of_a_task_on_a_gpu(tmp_path, swish, capsys):
    from cudagym.commands.baselines import precompute
    from cudagym.judge.baselines import BaselineCache, BaselineKey

    task, _ = swish
    first_gpu = list(probe_gpus("auto").device_ids[:1])
    assert precompute([task], "cudagym", devices=first_gpu, cache_dir=tmp_path) == 0, capsys.readouterr().err
    hardware = probe_gpus(first_gpu).hardware
    assert BaselineCache(tmp_path / "baselines").get(BaselineKey.of(task, hardware, DEFAULT_PROTOCOL)).known
    assert precompute([task], "cudagym", devices=first_gpu, cache_dir=tmp_path) == 0
    assert "1 already cached" in capsys.readouterr().err


def test_a_forked_child_neither_uses_nor_stops_the_parents_workers(tmp_path):
    import os

    options = PoolOptions(job_fn="jobs:run_script", pythonpath=(str(FAULTS_DIR),))
    parent = default_judge(gpus=FAKE_GPU, pool_options=options, build_fn=CountingBuild(), cache_dir=tmp_path)
    pid_source = script("import os\ndef run():\n    return os.getpid()\n")
    try:
        before = parent.evaluate(relu_task(), pid_source, EvalMode.VERIFY)
        assert before.status is EvalStatus.OK
        child = os.fork()
        if child == 0:  # pragma: no cover - runs in the child
            code = 1
            try:
                mine = default_judge(devices="none", build_fn=CountingBuild(), cache_dir=tmp_path)
                stray = parent.pipeline.gpus.pool().submit(local.Job(
                    "x", relu_task(), pid_source, BuildResult(BuildStatus.OK, "inline"), EvalMode.VERIFY,
                    parent.protocol)).result(timeout=10)
                parent.pipeline.shutdown()  # must not touch the parent's workers or folders
                code = 0 if (mine.pipeline is not parent.pipeline and stray.status is EvalStatus.INFRA_ERROR
                             and "fork" in stray.message) else 3
                mine.close()
            finally:
                os._exit(code)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        after = parent.evaluate(relu_task(), pid_source, EvalMode.VERIFY)
        assert after.status is EvalStatus.OK and after.message == before.message  # the same worker, alive
    finally:
        parent.close()


def test_warm_up_leaves_a_custom_build_stage_alone(tmp_path):
    build = CountingBuild()
    with LocalJudge(devices="none", build_fn=build, cache_dir=tmp_path) as judge:
        assert judge.warm_up().result(timeout=10) == {}
    assert build.calls == 0


@pytest.mark.slow  # a cold torch-header PCH and extension build: minutes on a small CPU
def test_warm_up_builds_the_examples_of_the_default_build_stage(tmp_path):
    with LocalJudge(devices="none", cache_dir=tmp_path) as judge:
        warmed = judge.warm_up().result(timeout=1200)
        assert set(warmed) == {"extension", "raw"} and warmed["raw"].ok, warmed["raw"].message
    # a build leaves the torch PCH to a background thread; a warm-up waits for it
    from cudagym.judge.build import BuildCache
    from cudagym.judge.build.torch_ext import host_toolchain, torch_prelude

    cache = BuildCache(tmp_path)
    assert torch_prelude(host_toolchain(cache), cache, tmp_path / "scratch").precompiled


def test_close_does_not_wait_for_running_builds_and_kills_their_compilers(tmp_path):
    from faults import processes_running

    from cudagym.judge.build.process import Deadline, run_tool

    token = f"{time.time_ns() % 10**9}.5"

    def slow_build(task, solution, protocol) -> BuildResult:  # a compiler that would run for a minute
        run_tool(["sleep", token], cwd=tmp_path, deadline=Deadline(60), max_output_bytes=100)
        return BuildResult(BuildStatus.OK, solution.format)

    judge = LocalJudge("cudagym", devices="none", build_fn=slow_build, cache_dir=tmp_path / "cache")
    judge.submit(relu_task(), candidate("good_relu"))
    deadline = time.monotonic() + 60
    while not processes_running(token) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_running(token)
    started = time.monotonic()
    judge.close()
    assert time.monotonic() - started < 5
    time.sleep(0.5)
    assert not processes_running(token)
