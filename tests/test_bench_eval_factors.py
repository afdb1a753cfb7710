"""benchmarks/bench_eval.py's report on the CPU: the yardstick's factor it prints beside the spread."""

from __future__ import annotations

import math

from script_module import load_script

from cudagym.judge.records import EvalResult, EvalStatus, TimingStats

bench = load_script("benchmarks/bench_eval.py", "bench_eval")


def _result(candidate_us: float, eager_us: float, speedup: float) -> EvalResult:
    return EvalResult(EvalStatus.OK, "", candidate=TimingStats(median_us=candidate_us, runs=30),
                      eager=TimingStats(median_us=eager_us, runs=30), speedup_vs_eager=speedup)


def test_the_factor_is_what_scaled_the_speedup_beyond_eager_over_candidate() -> None:
    # session 43's Softmax through the split: 183.2 us against eager's 217.9, judged 1.196x (scaled by ~1.0055)
    unscaled, scaled = _result(183.7, 217.9, 217.9 / 183.7), _result(183.2, 217.9, 1.196)
    factors = bench.yardstick_factors([unscaled, scaled])
    assert math.isclose(factors[0], 1.0)
    assert math.isclose(factors[1], 1.196 * 183.2 / 217.9) and factors[1] > 1.005


def test_a_result_without_times_has_no_factor() -> None:
    (factor,) = bench.yardstick_factors([_result(0.0, 217.9, 0.0)])
    assert math.isnan(factor)


def test_the_reported_tier_is_the_rewards_with_the_yardsticks_scale() -> None:
    from cudagym.judge.protocol import DEFAULT_PROTOCOL

    # the candidate 1.30x faster than eager here, but the runner's yardstick puts the same code at 0.99x: the tier the
    # report counts is the reward's (1), not the raw times' (2, as the report once took it)
    fair = EvalResult(EvalStatus.OK, "", candidate=TimingStats(median_us=100.0, runs=30, ci95_halfwidth_pct=0.2),
                      eager=TimingStats(median_us=130.0, runs=30, ci95_halfwidth_pct=0.2),
                      compiled=TimingStats(median_us=90.0, runs=30, ci95_halfwidth_pct=0.2),
                      runner_reference=TimingStats(median_us=99.0, runs=30, ci95_halfwidth_pct=0.2),
                      speedup_vs_eager=0.99, speedup_vs_compile=0.99 * 90 / 130, baseline_scale=99.0 / 130.0)
    fast = EvalResult(EvalStatus.OK, "", candidate=TimingStats(median_us=50.0, runs=30, ci95_halfwidth_pct=0.2),
                      eager=TimingStats(median_us=130.0, runs=30, ci95_halfwidth_pct=0.2),
                      compiled=TimingStats(median_us=90.0, runs=30, ci95_halfwidth_pct=0.2),
                      speedup_vs_eager=2.6, speedup_vs_compile=1.8)
    assert bench.reward_tiers([fair, fast], DEFAULT_PROTOCOL) == [1, 3]
