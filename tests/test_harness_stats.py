"""Timing statistics: oracle values computed by hand, the CI of the median, the stopping rule."""

from __future__ import annotations

import json
import math
import random

import pytest

from cudagym.errors import ConfigError
from cudagym.judge.harness import stats
from cudagym.judge.records import TimingStats, to_dict


def test_median_mean_quantile_on_hand_computed_values():
    assert stats.median([3.0, 1.0, 2.0]) == 2.0
    assert stats.median([4.0, 1.0, 3.0, 2.0]) == 2.5
    assert stats.mean([1.0, 2.0, 6.0]) == 3.0
    # numpy's linear method: position q * (n - 1)
    assert stats.quantile([1.0, 2.0, 3.0, 4.0], 0.25) == pytest.approx(1.75)
    assert stats.quantile([1.0, 2.0, 3.0, 4.0], 0.75) == pytest.approx(3.25)
    assert stats.quantile([5.0], 0.5) == 5.0


@pytest.mark.parametrize("bad", [[], ()])
def test_empty_samples_are_a_clear_error(bad):
    with pytest.raises(ConfigError, match="at least one sample"):
        stats.median(bad)


def test_quantile_out_of_range_is_an_error():
    with pytest.raises(ConfigError, match="quantile"):
        stats.quantile([1.0], 1.5)


# Ranks of the distribution-free 95% interval [x_(l), x_(n+1-l)] of the median, from binomial tables
# (e.g. Conover, Practical Nonparametric Statistics, table A3): n=6 -> 1, 10 -> 2, 20 -> 6, 30 -> 10, 100 -> 40.
@pytest.mark.parametrize(("n", "rank"), [(5, 0), (6, 1), (10, 2), (20, 6), (30, 10), (100, 40)])
def test_median_ci_ranks_match_binomial_tables(n, rank):
    assert stats._median_ci_rank(n, 0.95) == rank


def test_median_ci_rank_coverage_is_exact_at_the_boundary():
    # n = 10, l = 2: coverage = 1 - 2 * P(B <= 1) = 1 - 2 * 11/1024 = 0.978...; l = 3 would give 0.891
    n = 10
    cover = 1 - 2 * sum(math.comb(n, k) for k in range(2)) / 2**n
    assert cover == pytest.approx(0.978515625)
    assert stats.median_ci(list(range(1, 11))) == (2, 9)


def test_median_ci_too_few_samples_is_unbounded_and_summary_falls_back_to_half_range():
    assert stats.median_ci([1.0, 2.0, 3.0]) == (-math.inf, math.inf)
    assert stats.ci_halfwidth_pct([1.0, 2.0, 3.0]) == math.inf
    summary = stats.summarize([9.0, 10.0, 11.0])
    assert summary.ci95_halfwidth_pct == pytest.approx(10.0)  # (11 - 9) / 2 / 10 * 100
    assert json.dumps(to_dict(summary))  # still a plain JSON number


def test_large_n_uses_exact_integers_without_overflow_and_normal_approximation_beyond():
    assert stats._median_ci_rank(1500, 0.95) == pytest.approx(1500 / 2 - 1.96 * math.sqrt(1500) / 2, abs=1.5)
    assert stats._median_ci_rank(5000, 0.95) == pytest.approx(5000 / 2 - 1.96 * math.sqrt(5000) / 2, abs=1.5)


def test_order_statistic_ci_agrees_with_bootstrap_on_skewed_samples():
    rng = random.Random(7)
    samples = [100.0 * rng.lognormvariate(0, 0.05) for _ in range(400)]
    low, high = stats.median_ci(samples)
    b_low, b_high = stats.bootstrap_median_ci(samples, resamples=500, seed=3)
    width = high - low
    assert abs(low - b_low) < 0.35 * width and abs(high - b_high) < 0.35 * width
    assert low < stats.median(samples) < high


def test_mean_ci_uses_student_t():
    samples = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]
    sd = math.sqrt(sum((x - 5.5) ** 2 for x in samples) / 9)
    expected = 2.262 * sd / math.sqrt(10)  # t(0.975, 9) = 2.262
    assert stats.mean_ci_halfwidth(samples) == pytest.approx(expected, rel=2e-3)
    assert stats.mean_ci_halfwidth([1.0]) == math.inf


def test_summarize_fills_every_field_in_microseconds():
    s = stats.summarize([10.0, 12.0, 11.0, 13.0, 100.0, 12.0])
    assert s == TimingStats(median_us=12.0, mean_us=26.333333333333332, min_us=10.0, max_us=100.0,
                            iqr_us=stats.quantile([10.0, 12.0, 11.0, 13.0, 100.0, 12.0], 0.75)
                            - stats.quantile([10.0, 12.0, 11.0, 13.0, 100.0, 12.0], 0.25),
                            ci95_halfwidth_pct=s.ci95_halfwidth_pct, runs=6)
    assert s.ci95_halfwidth_pct == pytest.approx(100 * (100.0 - 10.0) / 2 / 12.0)  # n = 6: [x_(1), x_(6)]
    assert stats.summarize([]) == TimingStats()


def test_stopping_rule():
    exact = stats.StoppingRule(min_runs=5, max_runs=100, target_ci_pct=0.0)
    assert not exact.done([1.0] * 4)
    assert exact.done([1.0] * 5)
    ci = stats.StoppingRule(min_runs=10, max_runs=50, target_ci_pct=1.0)
    assert ci.done([100.0] * 10)  # zero spread: the CI is already 0%
    noisy = [100.0 + (20.0 if i % 2 else -20.0) for i in range(10)]
    assert not ci.done(noisy)
    assert ci.done(noisy * 5)  # the cap
    with pytest.raises(ConfigError):
        stats.StoppingRule(min_runs=10, max_runs=5, target_ci_pct=1.0)


def test_stopping_rule_tightens_with_more_samples():
    rng = random.Random(0)
    rule = stats.StoppingRule(min_runs=10, max_runs=100_000, target_ci_pct=0.5)
    samples: list[float] = []
    while not rule.done(samples):
        samples.append(100.0 * (1 + 0.02 * rng.gauss(0, 1)))
    assert 50 < len(samples) < 2000
    assert stats.ci_halfwidth_pct(samples) <= 0.5


def test_speedup_uses_the_protocol_statistic_and_is_zero_when_not_timed():
    base = TimingStats(median_us=200.0, mean_us=300.0, runs=10)
    cand = TimingStats(median_us=100.0, mean_us=100.0, runs=10)
    assert stats.speedup(base, cand, "median") == 2.0
    assert stats.speedup(base, cand, "mean") == 3.0
    assert stats.speedup(TimingStats(), cand, "median") == 0.0
