"""The judging pipeline on CPU, over stand-in services: the seam (submit, evaluate, asyncio), jobs as values,
baselines first and once, fair dispatch, per-env caps, cancellation, and the typed result fields."""

from __future__ import annotations

import asyncio
import re
import threading
import time

import pytest
from faults import relu_task, script
from judge_stubs import STUB_GPU, StubBuilds, StubGpus, stub_judge

from cudagym.judge.interface import EvalMode
from cudagym.judge.pipeline import CANCELLED_MESSAGE, PipelineJudge
from cudagym.judge.records import EvalResult, EvalStatus, compile_failure, context_poisoned, paired_speedup


def solution(i: int = 0):
    return script(f"def run():\n    return {i}\n")


def test_evaluate_is_submit_then_result_and_the_asyncio_form_awaits_the_same(tmp_path):
    with stub_judge(tmp_path) as judge:
        future = judge.submit(relu_task(), solution(), EvalMode.PROFILE, job_id="one")
        assert future.result(timeout=30).message == "ran one"
        assert judge.evaluate(relu_task(), solution(), EvalMode.VERIFY).status is EvalStatus.OK
        awaited = asyncio.run(judge.aevaluate(relu_task(), solution(), EvalMode.VERIFY, job_id="two"))
        assert awaited.message == "ran two" and awaited.hardware == STUB_GPU


def test_the_gpu_service_gets_a_job_as_a_value_and_the_result_keeps_the_build_hosts_record(tmp_path):
    gpus = StubGpus()
    with stub_judge(tmp_path, gpus=gpus) as judge:
        result = judge.evaluate(relu_task(), solution())
    spec = next(s for s in gpus.started if not s.job_id.startswith("baselines:"))
    assert spec.build.artifact_path == "" and spec.artifact_key.startswith("key-")  # no path of the build host
    assert dict(spec.solution.files) == dict(solution().files) and spec.task == relu_task()
    assert result.build.artifact_path.startswith("/build-host/")  # the build record the pipeline holds
    assert result.protocol_id == judge.protocol.id and result.hardware == STUB_GPU  # stamped once, at the end


def test_baselines_are_timed_once_by_a_priority_job_and_handed_to_every_candidate(tmp_path):
    gpus = StubGpus(hold=True)
    with stub_judge(tmp_path, gpus=gpus) as judge:
        futures = [judge.submit(relu_task(), solution(i)) for i in range(3)]
        time.sleep(0.3)
        gpus.gate.set()
        results = [f.result(timeout=30) for f in futures]
    baseline_jobs = [s for s in gpus.started if s.job_id.startswith("baselines:")]
    assert len(baseline_jobs) == 1 and gpus.started[0] is baseline_jobs[0]
    assert all(r.eager.median_us == 100.0 and r.compiled.median_us == 90.0 for r in results)


def test_without_a_gpu_the_verdict_is_no_gpu_with_the_build_and_the_probes_reason(tmp_path):
    with stub_judge(tmp_path, gpus=StubGpus(devices=0)) as judge:
        result = judge.evaluate(relu_task(), solution())
        broken = judge.evaluate(relu_task(), script("BROKEN"))
    assert result.status is EvalStatus.NO_GPU and result.build.ok and "stub without GPUs" in result.message
    assert broken.status is EvalStatus.BUILD_FAILED and "BROKEN" in broken.message


def test_dispatch_is_round_robin_over_envs_so_a_burst_does_not_starve_another_env(tmp_path):
    gpus = StubGpus(slots=1, hold=True)
    with stub_judge(tmp_path, gpus=gpus) as first:
        second = PipelineJudge("cudagym", first.pipeline)
        gpus.gate.set()
        first.evaluate(relu_task(), solution(99))  # the task's baselines are cached before the burst
        gpus.gate.clear()
        burst = [first.submit(relu_task(), solution(i), job_id=f"a{i}") for i in range(4)]
        time.sleep(0.3)  # a0 runs (held); a1..a3 wait in the dispatcher
        late = [second.submit(relu_task(), solution(10 + i), job_id=f"b{i}") for i in range(2)]
        time.sleep(0.3)
        gpus.gate.set()
        for f in burst + late:
            assert f.result(timeout=30).status is EvalStatus.OK
        second.close()
    order = [j for j in gpus.candidates() if re.fullmatch(r"[ab]\d+", j)]  # not the warm-up's uuid job id
    assert [j[0] for j in order] == list("ababaa"), order  # b before the second a: env a had the last turn


def test_an_env_at_its_cap_waits_in_submit_until_one_of_its_jobs_finishes(tmp_path):
    gpus = StubGpus(hold=True)
    with stub_judge(tmp_path, gpus=gpus, max_queued_per_env=2) as judge:
        first = [judge.submit(relu_task(), solution(i)) for i in range(2)]
        third: list[object] = []
        thread = threading.Thread(target=lambda: third.append(judge.submit(relu_task(), solution(3))))
        thread.start()
        thread.join(timeout=0.5)
        assert thread.is_alive() and not third  # back-pressure: the third submit waits
        gpus.gate.set()
        thread.join(timeout=30)
        assert third and all(f.result(timeout=30).status is EvalStatus.OK for f in first)


def test_cancel_pending_and_close_drop_an_envs_queued_jobs_and_leave_other_envs_alone(tmp_path):
    gpus = StubGpus(slots=1, hold=True)
    with stub_judge(tmp_path, gpus=gpus) as keeper:
        leaver = PipelineJudge("cudagym", keeper.pipeline)
        running = keeper.submit(relu_task(), solution(0), job_id="k0")
        time.sleep(0.3)
        queued = [leaver.submit(relu_task(), solution(i), job_id=f"l{i}") for i in range(1, 4)]
        kept = keeper.submit(relu_task(), solution(5), job_id="k1")
        time.sleep(0.3)
        assert leaver.cancel_pending() == 3
        dropped = [f.result(timeout=5) for f in queued]
        assert all(r.status is EvalStatus.INFRA_ERROR and r.message == CANCELLED_MESSAGE for r in dropped)
        leaver.close()
        gpus.gate.set()
        assert running.result(timeout=30).message == "ran k0" and kept.result(timeout=30).message == "ran k1"
    assert not {"l1", "l2", "l3"} & set(gpus.candidates())
    assert not keeper.pipeline.closed or gpus.closed  # the last handle's close stopped the services


def test_the_last_handle_closes_the_pipeline_and_its_services(tmp_path):
    gpus, builds = StubGpus(), StubBuilds()
    judge = stub_judge(tmp_path, gpus=gpus, builds=builds)
    other = PipelineJudge("kernelbench", judge.pipeline)
    judge.close()
    assert not judge.pipeline.closed
    other.close()
    assert judge.pipeline.closed and gpus.closed


# ------------------------------------------------------------------------------------- typed fields


def test_typed_fields_are_read_first_and_the_text_forms_still_work():
    from cudagym.judge.harness import COMPILE_FAILED_PREFIX, CONTEXT_POISONED_MARKER

    typed = EvalResult(EvalStatus.OK, compile_failure="InductorError: no C compiler", context_poisoned=True,
                       paired_speedup_vs_eager=1.25, paired_rounds=40)
    assert compile_failure(typed) == "InductorError: no C compiler"
    assert context_poisoned(typed) and paired_speedup(typed) == (1.25, 40)
    text = EvalResult(EvalStatus.RUNTIME_ERROR, f"correct; {COMPILE_FAILED_PREFIX}RuntimeError: x",
                      log=f"{CONTEXT_POISONED_MARKER} (illegal address)\n"
                          "paired speedup vs eager (median of 12 per-round ratios): 1.5000x")
    assert compile_failure(text) == "RuntimeError: x" and context_poisoned(text)
    assert paired_speedup(text) == (1.5, 12)
    plain = EvalResult(EvalStatus.OK)
    assert (compile_failure(plain), context_poisoned(plain), paired_speedup(plain)) == ("", False, (0.0, 0))


@pytest.mark.parametrize("cap", [0, -1, True, 1.5])
def test_a_bad_cap_is_a_clear_error(tmp_path, cap):
    from cudagym.errors import ConfigError

    with pytest.raises(ConfigError, match="max_queued_per_env"):
        stub_judge(tmp_path, max_queued_per_env=cap)
