"""The reward: hand-computed oracle cases for the tier table, the speedup mode, scoring and options."""

from __future__ import annotations

import dataclasses

import pytest
from fakes import failed_build, host_bound_result, incorrect_result, timed_result, timing
from hypothesis import given
from hypothesis import strategies as st

from cudagym.errors import ConfigError
from cudagym.judge.records import BuildResult, BuildStatus, EvalResult, EvalStatus, TimingStats
from cudagym.reward import (
    TIER_VALUES,
    RewardConfig,
    Score,
    best_of,
    better,
    is_faster,
    reward_config,
    score,
    speedup,
    tier_of,
)


@pytest.mark.parametrize(
    ("t", "eager", "compiled", "tier"),
    [
        (94.0, 100.0, 100.0, 3),  # 6% faster than both
        (95.0, 100.0, 100.0, 1),  # exactly 5% is not "more than 5%"
        (94.9, 100.0, 100.0, 3),
        (90.0, 100.0, 90.0, 2),  # faster than eager only
        (90.0, 100.0, 94.0, 2),  # 4.3% faster than compile: not enough
        (80.0, 100.0, 120.0, 3),
        (80.0, 70.0, 100.0, 1),  # beats compile by 20% but not eager: still 1
        (100.0, 100.0, 100.0, 1),
        (200.0, 100.0, 100.0, 1),  # slower, but correct
    ],
)
def test_tier_table(t: float, eager: float, compiled: float, tier: int) -> None:
    assert tier_of(t, eager, compiled) == tier


def test_unmeasured_times_are_never_faster() -> None:
    assert tier_of(0.0, 100.0, 100.0) == 1
    assert tier_of(50.0, 0.0, 100.0) == 1
    assert tier_of(50.0, 100.0, 0.0) == 2
    assert not is_faster(0.0, 100.0, 0.05)
    assert speedup(100.0, 0.0) == 0.0
    assert speedup(100.0, 50.0) == 2.0


def test_custom_thresholds() -> None:
    assert tier_of(85.0, 100.0, 100.0, threshold_vs_eager=0.2) == 1
    assert tier_of(85.0, 100.0, 100.0, threshold_vs_eager=0.1, threshold_vs_compile=0.2) == 2
    assert tier_of(85.0, 100.0, 100.0, threshold_vs_eager=0.0, threshold_vs_compile=0.0) == 3
    cfg = RewardConfig(threshold_vs_eager=0.2, threshold_vs_compile=0.2)
    assert score(timed_result(85.0, 100.0, 100.0), cfg).reward == 1.0
    assert score(timed_result(75.0, 100.0, 100.0), cfg).reward == 3.0


def test_score_of_correct_verdicts() -> None:
    s = score(timed_result(50.0, 100.0, 80.0))
    assert (s.reward, s.tier, s.evaluated) == (3.0, 3, True)
    assert s.speedup_vs_eager == pytest.approx(2.0)
    assert s.speedup_vs_compile == pytest.approx(1.6)
    assert score(timed_result(90.0, 100.0, 90.0)).reward == 2.0
    assert score(timed_result(99.0, 100.0, 90.0)).reward == 1.0


def test_correct_but_untimed_is_tier_one() -> None:
    verify_only = EvalResult(status=EvalStatus.OK, build=BuildResult(BuildStatus.OK, "extension"))
    assert score(verify_only).reward == 1.0
    assert score(verify_only, RewardConfig(mode="speedup")).reward == 0.0


@pytest.mark.parametrize(
    "status",
    [EvalStatus.BUILD_FAILED, EvalStatus.INCORRECT, EvalStatus.RUNTIME_ERROR, EvalStatus.CRASHED,
     EvalStatus.TIMEOUT, EvalStatus.RULE_VIOLATION],
)
def test_agent_failures_score_minus_one(status: EvalStatus) -> None:
    s = score(EvalResult(status=status, build=failed_build()))
    assert (s.reward, s.tier, s.evaluated, s.status) == (-1.0, -1, True, status.value)
    assert score(EvalResult(status=status), RewardConfig(mode="speedup")).reward == -1.0


@pytest.mark.parametrize("status", [EvalStatus.NO_GPU, EvalStatus.INFRA_ERROR])
def test_not_the_agents_fault_scores_zero_unevaluated(status: EvalStatus) -> None:
    s = score(EvalResult(status=status))
    assert (s.reward, s.tier, s.evaluated) == (0.0, 0, False)


def test_missing_build_tool_is_not_the_agents_fault() -> None:
    verdict = EvalResult(status=EvalStatus.BUILD_FAILED, build=BuildResult(BuildStatus.TOOL_ERROR, "extension"))
    assert score(verdict) == Score(0.0, 0, False, status="build_failed")


def test_speedup_mode_is_compile_over_candidate() -> None:
    cfg = RewardConfig(mode="speedup")
    assert score(timed_result(50.0, 100.0, 80.0), cfg).reward == pytest.approx(1.6)
    assert score(timed_result(160.0, 100.0, 80.0), cfg).reward == pytest.approx(0.5)
    assert score(incorrect_result(), cfg).reward == -1.0


def test_statistic_picks_median_or_mean() -> None:
    verdict = timed_result(90.0, 100.0, 100.0)
    slow_mean = EvalResult(
        status=EvalStatus.OK, build=verdict.build,
        candidate=TimingStats(median_us=90.0, mean_us=120.0, runs=30),
        eager=timing(100.0), compiled=timing(100.0),
    )
    assert score(slow_mean, RewardConfig(statistic="median")).tier == 3
    assert score(slow_mean, RewardConfig(statistic="mean")).tier == 1


def test_the_tier_takes_the_baselines_as_the_judge_compared_them() -> None:
    # kernelbench-v0.8 on the H100, L3/10_ResNet101 with the reference's own code as the candidate: eager 8,922.5 us
    # in the judge's process (its host outlasted its cover), the same code 4,292.0 us in the candidate's runner, the
    # reference 4,273.7 us there; the verdict was 1.007x vs eager, but the tier was taken from the raw times: 2
    scale = 4273.7 / 8922.5
    same_code = dataclasses.replace(timed_result(4292.0, 8922.5, 2622.9), baseline_scale=scale,
                                    speedup_vs_eager=8922.5 * scale / 4292.0,
                                    speedup_vs_compile=2622.9 * scale / 4292.0)
    s = score(same_code)
    assert s.tier == 1 and s.reward == 1.0
    assert s.speedup_vs_eager == pytest.approx(same_code.speedup_vs_eager)  # the verdict's own figures
    assert s.speedup_vs_compile == pytest.approx(same_code.speedup_vs_compile)
    assert score(dataclasses.replace(same_code, baseline_scale=1.0)).tier == 2  # what it scored before
    # a real 2x over that yardstick keeps its tier, under either statistic, and the speedup mode moves alike
    fast = dataclasses.replace(same_code, candidate=timing(2100.0))
    assert score(fast, RewardConfig(statistic="mean")).tier == 2
    assert score(fast, RewardConfig(mode="speedup")).reward == pytest.approx(2622.9 * scale / 2100.0)


def test_a_tier_must_clear_the_timings_own_interval_where_the_protocol_asks() -> None:
    same_code = host_bound_result(14084.3, 13.0, 17488.8, 15.4)  # 1.24x by the yardstick: a tier by the point estimate
    assert score(same_code).tier == 2
    withheld = score(same_code, RewardConfig(interval=True))
    assert withheld.tier == 1 and withheld.speedup_vs_eager == pytest.approx(17488.8 / 14084.3)
    assert withheld.interval_pct == pytest.approx((13.0**2 + 15.4**2) ** 0.5)  # the yardstick's and the candidate's
    # a real gain on the same task clears it (the RNN's steps as one kernel: 4x)
    assert score(host_bound_result(17488.8 / 4, 13.0, 17488.8, 15.4), RewardConfig(interval=True)).tier >= 2
    # on a GPU-bound task the intervals are a few tenths of a percent: a 6% gain keeps its tier
    tight = dataclasses.replace(timed_result(94.0, 100.0, 120.0),
                                candidate=TimingStats(median_us=94.0, mean_us=94.0, runs=100, ci95_halfwidth_pct=0.3),
                                eager=TimingStats(median_us=100.0, mean_us=100.0, runs=100, ci95_halfwidth_pct=0.2),
                                compiled=TimingStats(median_us=120.0, mean_us=120.0, runs=100, ci95_halfwidth_pct=0.2))
    assert score(tight, RewardConfig(interval=True)).tier == 3
    # unscaled, each baseline's own interval counts: eager's wide one withholds the eager step, and so tier 3
    loose_eager = dataclasses.replace(tight, eager=dataclasses.replace(tight.eager, ci95_halfwidth_pct=4.0))
    assert score(loose_eager, RewardConfig(interval=True)).tier == 1
    assert score(loose_eager).tier == 3  # the paper's rule, and every protocol before cudagym-v6
    # an unknown interval resolves nothing
    nan = dataclasses.replace(tight.candidate, ci95_halfwidth_pct=float("nan"))
    unknown = dataclasses.replace(tight, candidate=nan)
    assert score(unknown, RewardConfig(interval=True)).tier == 1


def test_the_default_and_kernelbench_protocols_ask_it_and_the_cuda_agent_preset_does_not() -> None:
    from cudagym.judge.protocol import CUDA_AGENT, DEFAULT_PROTOCOL, KERNELBENCH

    for protocol, asks in ((DEFAULT_PROTOCOL, True), (KERNELBENCH, True), (CUDA_AGENT, False)):
        config = reward_config(None, threshold=protocol.threshold, statistic=protocol.statistic,
                               interval=protocol.tier_interval)
        assert config.interval is asks
    assert reward_config({"interval": False}, interval=True).interval is False  # the user's choice stands
    with pytest.raises(ConfigError, match="interval to be True or False"):
        reward_config({"interval": "yes"})


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_a_baseline_scale_that_is_not_a_positive_number_is_refused_by_name(bad: float) -> None:
    with pytest.raises(ValueError, match="baseline_scale must be a positive finite number"):
        score(dataclasses.replace(timed_result(50.0), baseline_scale=bad))


def test_best_of_and_better() -> None:
    wrong = Score(-1.0, -1, True)
    one = Score(1.0, 1, True, 1.0, 0.9)
    three_slow = Score(3.0, 3, True, 2.0, 1.1)
    three_fast = Score(3.0, 3, True, 3.0, 1.5)
    unevaluated = Score(0.0, 0, False)
    assert best_of([wrong, three_slow, one, three_fast]) is three_fast
    assert best_of([]) == Score(0.0, 0, False)
    assert better(wrong, unevaluated)  # an evaluated verdict outranks none
    assert not better(one, one)


def test_reward_config_resolution() -> None:
    assert reward_config(None) == RewardConfig()
    assert reward_config("speedup", threshold=0.1).mode == "speedup"
    cfg = reward_config("tier", threshold=0.1, statistic="mean")
    assert (cfg.threshold_vs_eager, cfg.threshold_vs_compile, cfg.statistic) == (0.1, 0.1, "mean")
    cfg = reward_config({"scoring": "best", "threshold_vs_compile": 0.2}, threshold=0.1)
    assert (cfg.scoring, cfg.threshold_vs_eager, cfg.threshold_vs_compile) == ("best", 0.1, 0.2)
    explicit = RewardConfig(mode="speedup")
    assert reward_config(explicit) is explicit


@pytest.mark.parametrize(
    "bad",
    ["fastest", {"mode": "tier", "bonus": 1}, {"scoring": "last"}, {"threshold_vs_eager": 1.5},
     {"threshold_vs_eager": -0.1}, {"statistic": "p90"}, 3],
)
def test_reward_config_errors_say_what_is_expected(bad: object) -> None:
    with pytest.raises(ConfigError, match="expected"):
        reward_config(bad)  # type: ignore[arg-type]


def test_score_is_pure() -> None:
    verdict = timed_result(70.0)
    assert score(verdict) == score(verdict)


@given(
    t=st.floats(1.0, 1e6), eager=st.floats(1.0, 1e6), compiled=st.floats(1.0, 1e6),
    faster=st.floats(0.0, 1.0),
)
def test_tier_properties(t: float, eager: float, compiled: float, faster: float) -> None:
    tier = tier_of(t, eager, compiled)
    assert float(tier) in TIER_VALUES
    # a faster candidate never earns a lower tier
    assert tier_of(t * faster if faster > 0 else t, eager, compiled) >= tier
    # tier 3 implies both baselines beaten by more than the threshold
    if tier == 3:
        assert (eager - t) / eager > 0.05 and (compiled - t) / compiled > 0.05
