from __future__ import annotations

import dataclasses
import json
import math

import pytest

from cudagym.errors import ConfigError
from cudagym.judge.protocol import (
    CUDA_AGENT,
    CUDAGYM_V0,
    CUDAGYM_V1,
    CUDAGYM_V2,
    CUDAGYM_V4,
    CUDAGYM_V5,
    CUDAGYM_V6,
    DEFAULT_PROTOCOL,
    KERNELBENCH,
    get_protocol,
)
from cudagym.judge.records import (
    BuildResult,
    BuildStatus,
    Diagnostic,
    EvalResult,
    EvalStatus,
    InputCheck,
    KernelResources,
    Precision,
    Severity,
    TimingStats,
    Violation,
    from_dict,
    to_dict,
)


def test_presets_reproduce_the_published_harnesses():
    assert (CUDA_AGENT.num_inputs, CUDA_AGENT.atol, CUDA_AGENT.rtol) == (5, 1e-2, 1e-2)
    assert (CUDA_AGENT.warmup_runs, CUDA_AGENT.min_runs, CUDA_AGENT.max_runs) == (5, 10, 10)
    assert CUDA_AGENT.timing == "profiler" and not CUDA_AGENT.l2_flush
    assert (KERNELBENCH.atol, KERNELBENCH.warmup_runs, KERNELBENCH.min_runs) == (1e-4, 3, 100)
    assert KERNELBENCH.l2_flush and KERNELBENCH.statistic == "mean" and KERNELBENCH.timing == "cuda_events"
    assert CUDAGYM_V0.threshold == 0.05 and CUDAGYM_V0.baseline_precision == "fp32" and not CUDAGYM_V0.allow_tf32
    assert CUDAGYM_V0.input_seeds() == (42, 43, 44, 45, 46)


def test_presets_run_under_their_sources_precision_and_the_default_stays_strict_fp32():
    flags = {name: (p.matmul_tf32, p.cudnn_tf32) for name, p in
             (("cudagym", CUDAGYM_V1), ("kernelbench", KERNELBENCH), ("cuda-agent", CUDA_AGENT))}
    # PyTorch's defaults (KernelBench's harness and the CUDA Agent scripts never set them): cuDNN TF32 on, matmul off
    assert flags == {"cudagym": (False, False), "kernelbench": (False, True), "cuda-agent": (False, True)}
    # the superseded ids are kept, with their old (strict fp32) precision and everything else equal
    old_kb, old_ca = get_protocol("kernelbench-v0.2"), get_protocol("cuda-agent-v0")
    assert (old_kb.matmul_tf32, old_kb.cudnn_tf32, old_ca.cudnn_tf32) == (False, False, False)
    v03 = get_protocol("kernelbench-v0.3")
    assert old_kb.with_changes(id=v03.id, description=v03.description, baseline_precision="torch_default") == v03
    # v0.4: v0.3 with every contender timed at its device work (baselines behind covers sized to their host
    # enqueue), as the trust split times the candidate; v0.3's eager carried its launch latency
    v04 = get_protocol("kernelbench-v0.4")
    assert v03.with_changes(id=v04.id, description=v04.description, launch_cover_us=100.0,
                            launch_cover_max_us=10_000.0) == v04
    assert v03.launch_cover_us == v03.launch_cover_max_us == 0 and v03.timing_key != v04.timing_key
    # v0.5: v0.4 with a baseline's rounds retaken where its host outlasted its cover (a mean takes any such tail)
    v05 = get_protocol("kernelbench-v0.5")
    assert v04.with_changes(id=v05.id, description=v05.description, retake_leaked_baselines=True) == v05
    assert not v04.retake_leaked_baselines and v04.timing_key != v05.timing_key
    # v0.6: v0.5 with the speedups against the reference as timed in the candidate's own runner
    v06 = get_protocol("kernelbench-v0.6")
    assert v05.with_changes(id=v06.id, description=v06.description, runner_reference_runs=20) == v06
    # v0.7: v0.6 with that reference timed as many times as the candidate (20 calls missed a host-bound forward)
    v07 = get_protocol("kernelbench-v0.7")
    assert v06.with_changes(id=v07.id, description=v07.description, runner_reference_runs=100) == v07
    # v0.8: v0.7 with each timed call queued in full before the go (a host-bound forward was timed behind its host)
    v08 = get_protocol("kernelbench-v0.8")
    assert v07.with_changes(id=v08.id, description=v08.description, arm_wait_ms=250.0,
                            late_reference_floor=True) == v08
    # v0.9: v0.8 with a tier step only beyond the timing's own interval (rewards only: the same times)
    assert v08.with_changes(id=KERNELBENCH.id, description=KERNELBENCH.description, tier_interval=True) == KERNELBENCH
    assert not v08.tier_interval and KERNELBENCH.description.startswith(v08.description)
    assert KERNELBENCH.timing_key.removeprefix(KERNELBENCH.id) == v08.timing_key.removeprefix(v08.id)
    assert v05.timing_key == "kernelbench-v0.5-854494a5f3"  # it times no baseline differently: v0.5's key stays
    assert v04.timing_key == "kernelbench-v0.4-d12f807abb"  # the new field left the older keys (and caches) alone
    assert old_ca.with_changes(id=CUDA_AGENT.id, description=CUDA_AGENT.description,
                               baseline_precision="torch_default") == CUDA_AGENT
    assert old_kb.timing_key != KERNELBENCH.timing_key  # baselines timed under v0.2 are never reused by v0.3
    # what results record: the switches as the harness applies them
    assert KERNELBENCH.precision == Precision(False, True, "highest") == CUDA_AGENT.precision
    assert CUDAGYM_V1.precision == Precision(False, False, "highest")
    assert CUDAGYM_V1.with_changes(baseline_precision="tf32").precision == Precision(True, True, "high")


def test_get_protocol_resolves_names_and_rejects_unknown():
    assert get_protocol(None) is CUDAGYM_V6 and get_protocol("cudagym") is CUDAGYM_V6
    assert get_protocol("cudagym-v5") is CUDAGYM_V5
    assert get_protocol("cudagym-v4") is CUDAGYM_V4 and get_protocol("kernelbench-v0.7").arm_wait_ms == 5.0
    assert get_protocol("cudagym-v2") is CUDAGYM_V2
    assert get_protocol("cudagym-v1") is CUDAGYM_V1
    assert get_protocol("cudagym-v0") is CUDAGYM_V0  # old results stay reproducible by id
    assert get_protocol("cuda-agent") is CUDA_AGENT and get_protocol("kernelbench-v0.9") is KERNELBENCH
    assert get_protocol("kernelbench").id == "kernelbench-v0.9" and get_protocol("cuda-agent").id == "cuda-agent-v1"
    assert get_protocol("kernelbench-v0.4").id == "kernelbench-v0.4"
    assert get_protocol(CUDA_AGENT) is CUDA_AGENT
    with pytest.raises(ConfigError, match="expected one of"):
        get_protocol("fastest")


def test_a_name_with_extra_settings_is_that_protocol_under_an_id_of_its_own():
    probe = get_protocol("cudagym[arm_wait_ms=200,module_mode=train]")
    assert probe.id == "cudagym-v6[arm_wait_ms=200,module_mode=train]"
    assert probe.extra == {"arm_wait_ms": 200, "module_mode": "train"}
    assert dataclasses.replace(probe, id=CUDAGYM_V6.id, extra={}) == CUDAGYM_V6  # nothing else differs
    assert probe.timing_key != CUDAGYM_V6.timing_key and probe.timing_key.startswith(probe.id)  # caches apart
    assert get_protocol(probe.id).extra == probe.extra  # its id resolves to it again (a remote judge's way)
    assert get_protocol("kernelbench[arm_wait_ms=1.5]").extra == {**KERNELBENCH.extra, "arm_wait_ms": 1.5}
    for bad, why in (("cudagym[x]", "key=value"), ("cudagym[=1]", "key=value"), ("cudagym[x=../a]", "key=value"),
                     ("cudagym[x=a b]", "key=value"), ("fastest[x=1]", "expected one of"),
                     ("cudagym[arm_wait_ms=soon]", "arm_wait_ms"), ("cudagym[arm_wait_ms=5000]", "arm_wait_ms"),
                     ("cudagym[runner_reference_batch=-1]", "runner_reference_batch"),
                     ("cudagym[runner_reference_batch=2.5]", "runner_reference_batch"),
                     ("cudagym[runner_reference_batch=true]", "runner_reference_batch"),
                     ("cudagym[runner_reference_batch=5000]", "runner_reference_batch")):
        with pytest.raises(ConfigError, match=why):
            get_protocol(bad)


def test_a_names_settings_may_set_the_timing_loops_own_numbers_on_the_protocol():
    probe = get_protocol("cudagym[min_runs=100,arm_wait_ms=200]")
    assert probe.id == "cudagym-v6[min_runs=100,arm_wait_ms=200]" and probe.min_runs == 100
    assert probe.extra == {"arm_wait_ms": 200}  # a field is set on the protocol, not kept as an extra
    assert dataclasses.replace(probe, id=CUDAGYM_V6.id, extra={}, min_runs=CUDAGYM_V6.min_runs) == CUDAGYM_V6
    assert probe.timing_key.startswith(probe.id) and get_protocol(probe.id) == probe  # caches apart; resolves again
    assert get_protocol("cudagym[max_runs=2000,target_ci_pct=0.2]").target_ci_pct == 0.2
    for bad, why in (("cudagym[min_runs=abc]", "min_runs a whole number"), ("cudagym[min_runs=2.5]", "min_runs"),
                     ("cudagym[min_runs=100000]", "min_runs <= max_runs"), ("cudagym[max_runs=1]", "max_runs"),
                     ("cudagym[target_ci_pct=-1]", "target_ci_pct"), ("cudagym[num_inputs=3]", "unknown extra")):
        with pytest.raises(ConfigError, match=why):
            get_protocol(bad)


@pytest.mark.parametrize(
    "changes",
    [{"num_inputs": 0}, {"min_runs": 0}, {"max_runs": 1, "min_runs": 5}, {"threshold": 1.5},
     {"timing": "wallclock"}, {"statistic": "mode"}, {"baseline_precision": "fp16"}, {"warmup_ms": -1.0},
     {"warmup_ms": 1e9}, {"runner_reference_batch": -1}, {"runner_reference_batch": 1001},
     {"runner_reference_batch": 2.0}],
)
def test_invalid_protocols_are_rejected(changes):
    with pytest.raises(ConfigError):
        CUDAGYM_V0.with_changes(id="bad", **changes)


def _full_result() -> EvalResult:
    build = BuildResult(
        status=BuildStatus.OK,
        format="extension",
        diagnostics=(Diagnostic(Severity.WARNING, "unused", "kernels/a.cu", 3, 7, "nvcc"),),
        kernels=(KernelResources("relu_kernel", registers=16, shared_mem_bytes=0),), wall_time_s=1.5, artifact_key="ab",
    )
    return EvalResult(
        status=EvalStatus.INCORRECT, message="input 2 mismatched", build=build,
        checks=(InputCheck(0, 42, True, 1e-7, 1e-6, 0, 100), InputCheck(1, 43, False, 0.5, 1.0, 3, 100, (0, 7), "x")),
        violations=(Violation("torch_fallback", "aten::relu ran in forward"),),
        candidate=TimingStats(
            median_us=10.0, mean_us=10.5, min_us=9.0, max_us=12.0, iqr_us=1.0, ci95_halfwidth_pct=0.4, runs=50
        ),
        speedup_vs_eager=2.0, protocol_id="cudagym-v0",
    )


def test_records_round_trip_through_json():
    result = _full_result()
    data = json.loads(json.dumps(to_dict(result)))
    assert data["status"] == "incorrect" and data["checks"][1]["first_mismatch_index"] == [0, 7]
    assert data["build"]["diagnostics"][0]["severity"] == "warning"
    back = from_dict(EvalResult, data)
    assert back == result
    assert back.compiled_ok and not back.correct and not back.timed


def test_unmeasured_values_are_zero_with_a_flag_not_none():
    result = EvalResult(status=EvalStatus.NO_GPU)
    assert not result.candidate.measured and result.speedup_vs_eager == 0.0
    assert all(v is not None for v in to_dict(result).values())
    assert not math.isnan(result.speedup_vs_compile)


def test_the_event_timed_presets_cover_host_launch_overhead():
    assert CUDAGYM_V0.launch_cover_us == CUDA_AGENT.launch_cover_us == 0.0  # v0: superseded; profiler: no host time
    assert CUDAGYM_V0.launch_cover_max_us == CUDA_AGENT.launch_cover_max_us == 0
    assert (KERNELBENCH.launch_cover_us, KERNELBENCH.launch_cover_max_us) == (100.0, 10_000.0)
    assert (CUDAGYM_V1.launch_cover_us, CUDAGYM_V1.launch_cover_max_us) == (100.0, 2000.0)
    # v1 is v0 plus the sized cover: every other field, correctness and guards included, is the same
    assert CUDAGYM_V1.with_changes(id=CUDAGYM_V0.id, description=CUDAGYM_V0.description, launch_cover_us=0.0,
                                   launch_cover_max_us=0.0) == CUDAGYM_V0


@pytest.mark.parametrize("bad", [-1.0, 20_000.0])
def test_launch_cover_is_bounded(bad):
    with pytest.raises(ConfigError, match="launch_cover_us"):
        CUDAGYM_V0.with_changes(id="bad", launch_cover_us=bad)


@pytest.mark.parametrize("cover, cover_max", [(0.0, 500.0), (200.0, 100.0), (100.0, 20_000.0), (100.0, -1.0)])
def test_a_sized_cover_needs_a_base_at_most_its_maximum(cover, cover_max):
    with pytest.raises(ConfigError, match="launch_cover_max_us"):
        CUDAGYM_V0.with_changes(id="bad", launch_cover_us=cover, launch_cover_max_us=cover_max)


def test_timing_key_changes_with_how_baselines_are_timed_only():
    key = CUDAGYM_V0.timing_key
    assert key.startswith("cudagym-v0-") and key == CUDAGYM_V0.with_changes().timing_key
    for changes in ({"launch_cover_us": 100.0}, {"launch_cover_us": 100.0, "launch_cover_max_us": 500.0},
                    {"l2_flush": False}, {"baseline_precision": "tf32"},
                    {"statistic": "mean"}, {"seed": 7}, {"warmup_ms": 0.0}, {"target_ci_pct": 1.0}):
        assert CUDAGYM_V0.with_changes(**changes).timing_key != key, changes
    for changes in ({"guards": ()}, {"atol": 1e-2}, {"threshold": 0.1}, {"eval_timeout_s": 10.0},
                    {"description": "other words"}, {"runner_reference_runs": 30}):
        assert CUDAGYM_V0.with_changes(**changes).timing_key == key, changes
    for runs in (-1, 1001):
        with pytest.raises(ConfigError, match="runner_reference_runs"):
            CUDAGYM_V0.with_changes(id="bad", runner_reference_runs=runs)
    assert len({p.timing_key for p in (CUDAGYM_V0, CUDAGYM_V1, CUDA_AGENT, KERNELBENCH)}) == 4


def test_the_cli_takes_a_protocol_name_with_extra_settings(tmp_path, capsys):
    from cudagym import cli

    argv = ["baselines", "show", "--suite", "bundled", "--level", "1", "--cache-dir", str(tmp_path), "--protocol"]
    assert cli.main([*argv, "cudagym[arm_wait_ms=200]"]) == 0
    out, err = capsys.readouterr()
    assert "protocol cudagym-v6[arm_wait_ms=200], timing key cudagym-v6[arm_wait_ms=200]-" in out + err
    assert cli.main([*argv, "cudagym[arm wait]"]) != 0
    assert "expected NAME[key=value,...]" in capsys.readouterr().err


def test_the_default_differs_from_cudagym_v5_only_in_asking_a_tier_to_clear_the_timings_interval():
    assert DEFAULT_PROTOCOL is CUDAGYM_V6 and CUDAGYM_V6.tier_interval and not CUDAGYM_V5.tier_interval
    assert dataclasses.replace(CUDAGYM_V6, id=CUDAGYM_V5.id, description=CUDAGYM_V5.description,
                               tier_interval=False) == CUDAGYM_V5
    assert CUDAGYM_V6.timing_key.removeprefix("cudagym-v6") == CUDAGYM_V5.timing_key.removeprefix("cudagym-v5")
    assert not CUDA_AGENT.tier_interval  # the paper's rule: any speedup past the threshold


def test_the_wait_for_a_queued_call_is_a_field_of_its_own_checked_when_made():
    assert CUDAGYM_V5.late_reference_floor and not CUDAGYM_V4.late_reference_floor
    # cudagym-v5 and kernelbench-v0.8 wait up to 250 ms for the runner to queue a call; the versions before, 5 ms
    assert CUDAGYM_V5.arm_wait_ms == 250.0 and KERNELBENCH.arm_wait_ms == 250.0 and CUDAGYM_V4.arm_wait_ms == 5.0
    assert dataclasses.replace(CUDAGYM_V5, id=CUDAGYM_V4.id, arm_wait_ms=5.0, description=CUDAGYM_V4.description,
                               late_reference_floor=False) == CUDAGYM_V4
    # baselines never run through the split: their cache key does not move with it
    assert CUDAGYM_V5.timing_key.removeprefix("cudagym-v5") == CUDAGYM_V4.timing_key.removeprefix("cudagym-v4")
    for bad in (-1.0, 1001, True, "5"):
        with pytest.raises(ConfigError, match="arm_wait_ms"):
            CUDAGYM_V5.with_changes(arm_wait_ms=bad)
    from cudagym.judge.harness.runner import arm_wait_s

    assert arm_wait_s(CUDAGYM_V5) == 0.25 and arm_wait_s(CUDAGYM_V4) == 0.005
    assert arm_wait_s(get_protocol("cudagym[arm_wait_ms=20]")) == 0.02  # a probe's setting wins
