"""Oracle tests of the benchmark metrics on hand-built episodes (numbers worked out by hand)."""

from __future__ import annotations

import math

import pytest
from bench_journals import call, no_gpu, oracle_entries, record, verdict, wrong

from cudagym.bench.metrics import (
    EpisodeSummary,
    Outcome,
    by_level,
    fast_p,
    geomean,
    group_metrics,
    longest_run,
    pass_at_k,
    pass_ks,
    summarize,
)
from cudagym.errors import ConfigError


def test_pass_at_k_is_the_unbiased_estimator():
    # 1 - C(n-c, k) / C(n, k)
    assert pass_at_k(5, 2, 1) == pytest.approx(2 / 5)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # C(3,2)=3, C(5,2)=10
    assert pass_at_k(10, 3, 4) == pytest.approx(1 - math.comb(7, 4) / math.comb(10, 4))
    assert pass_at_k(4, 0, 2) == 0.0
    assert pass_at_k(3, 2, 2) == 1.0  # n - c < k: every draw of k holds a correct one


@pytest.mark.parametrize(("n", "c", "k"), [(2, 3, 1), (2, 1, 3), (2, 1, 0), (2, -1, 1)])
def test_pass_at_k_refuses_impossible_counts(n, c, k):
    with pytest.raises(ConfigError, match="expected 0 <= c <= n"):
        pass_at_k(n, c, k)


def test_pass_ks_are_one_the_powers_of_two_and_k():
    assert pass_ks(1) == []
    assert pass_ks(2) == [1, 2]
    assert pass_ks(5) == [1, 2, 4, 5]
    assert pass_ks(8) == [1, 2, 4, 8]


def test_geomean_of_positive_values_and_zero_for_none():
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean([0.0, 4.0]) == pytest.approx(4.0)  # not timed (0) is left out
    assert geomean([]) == 0.0


def test_faster_means_beyond_the_threshold_as_the_tiers_decide():
    # (t0 - t) / t0 > 0.05  <=>  s > 1 / 0.95 = 1.0526...
    assert not Outcome(tier=1, speedup_vs_eager=1.05).faster_than_eager()
    assert Outcome(tier=2, speedup_vs_eager=1.06).faster_than_eager()
    assert not Outcome(tier=-1, speedup_vs_eager=3.0).faster_than_eager()  # wrong is never faster
    assert Outcome(tier=3, speedup_vs_compile=1.2).faster_than_compile()


def test_fast_p_counts_correct_and_strictly_above_p_over_all_episodes():
    outcomes = [Outcome(tier=3, speedup_vs_eager=2.0), Outcome(tier=1, speedup_vs_eager=1.0),
                Outcome(tier=-1, speedup_vs_eager=5.0), Outcome(tier=0)]
    assert fast_p(outcomes, 0.0) == 0.5
    assert fast_p(outcomes, 1.0) == 0.25  # 1.0 is not > 1.0
    assert fast_p(outcomes, 2.0) == 0.0
    assert fast_p([], 1.0) == 0.0


def test_summary_scores_the_final_verdict_and_the_best_of_the_trajectory():
    rec = record("bundled/L1/01_A", verdict(98.0), before=[(call("profile"), verdict(60.0))])
    s = summarize(rec, level=1, sample=0)
    assert (s.final.tier, s.best.tier) == (1, 3)
    assert s.final.speedup_vs_eager == pytest.approx(100 / 98)
    assert s.best.speedup_vs_compile == pytest.approx(90 / 60)
    assert (s.turns, s.env_tokens, s.invalid_actions, s.longest_repeat) == (3, 350, 0, 1)
    assert EpisodeSummary.from_dict(s.to_dict()) == s


def test_summary_counts_invalid_actions_and_loops():
    rec = record("bundled/L1/01_A", wrong(), actions=["not a call", "not a call", "not a call", call("list_files")])
    s = summarize(rec, level=1, sample=0)
    assert (s.invalid_actions, s.longest_repeat, s.final.tier) == (3, 3, -1)
    assert longest_run(["a", "b", "b", "a"]) == 2 and longest_run([]) == 0


def test_a_verdict_without_a_gpu_is_tier_zero_not_evaluated():
    s = summarize(record("bundled/L1/01_A", no_gpu()), level=1, sample=0)
    assert (s.final.tier, s.final.evaluated, s.final.status) == (0, False, "no_gpu")


def test_table1_columns_per_level_and_overall_on_the_oracle_run():
    rows = {r.group: r for r in by_level([e.summary for e in oracle_entries()])}
    assert list(rows) == ["1", "2", "overall"]
    one, two, overall = rows["1"], rows["2"], rows["overall"]
    # level 1: A#0 tier 3 (2.0x, 1.8x), A#1 tier 1 (100/98, 90/98), B#0 wrong, B#1 tier 2 (100/88, 90/88)
    assert (one.episodes, one.tasks, one.evaluated) == (4, 2, 4)
    assert one.pass_rate == 0.75
    assert one.faster_than_eager == 0.5  # A#0, B#1 (A#1 is 2% faster: not beyond 5%)
    assert one.faster_than_compile == 0.25  # A#0 only (B#1 is 2.3% faster than compile)
    assert one.geomean_speedup_vs_eager == pytest.approx((2.0 * 100 / 98 * 100 / 88) ** (1 / 3))
    assert one.geomean_speedup_vs_compile == pytest.approx((1.8 * 90 / 98 * 90 / 88) ** (1 / 3))
    assert dict(one.tiers) == {-1: 1, 0: 0, 1: 1, 2: 1, 3: 1}
    # level 2: C#0 tier 3 (4.0x, 3.6x), C#1 not evaluated
    assert (two.episodes, two.evaluated, two.pass_rate, two.faster_than_compile) == (2, 1, 0.5, 0.5)
    assert two.geomean_speedup_vs_eager == pytest.approx(4.0)
    # overall: 6 episodes, 4 correct
    assert overall.pass_rate == pytest.approx(4 / 6)
    assert overall.faster_than_eager == pytest.approx(3 / 6)
    assert overall.faster_than_compile == pytest.approx(2 / 6)
    assert overall.geomean_speedup_vs_eager == pytest.approx((2.0 * 100 / 98 * 100 / 88 * 4.0) ** (1 / 4))
    assert dict(overall.tiers) == {-1: 1, 0: 1, 1: 1, 2: 1, 3: 2}


def test_fast_p_pass_at_k_and_costs_on_the_oracle_run():
    rows = {r.group: r for r in by_level([e.summary for e in oracle_entries()])}
    one = rows["1"]
    assert [one.fast_p_eager[p] for p in (0, 0.5, 0.8, 1.0, 1.5, 2.0)] == [0.75, 0.75, 0.75, 0.75, 0.25, 0.0]
    assert [one.fast_p_compile[p] for p in (0, 0.5, 0.8, 1.0, 1.5, 2.0)] == [0.75, 0.75, 0.75, 0.5, 0.25, 0.0]
    # pass@1: A 2/2, B 1/2 -> 0.75; pass@2: both tasks have a correct sample -> 1.0
    assert dict(one.pass_at) == {1: 0.75, 2: 1.0}
    assert dict(rows["2"].pass_at) == {1: 0.5, 2: 1.0}
    assert dict(rows["overall"].pass_at) == {1: pytest.approx((1 + 0.5 + 0.5) / 3), 2: 1.0}
    assert one.mean_turns == 9 / 4  # A#1 has a profile turn
    assert one.mean_env_tokens == (250 + 350 + 250 + 250) / 4
    assert one.mean_model_tokens == 15 / 4


def test_best_of_trajectory_scoring_takes_the_better_earlier_state():
    best = {r.group: r for r in by_level([e.summary for e in oracle_entries()], scoring="best")}
    assert best["1"].faster_than_compile == 0.5  # A#1's profile at 60 us beats compile by 33%
    assert dict(best["1"].tiers) == {-1: 1, 0: 0, 1: 0, 2: 1, 3: 2}
    assert best["1"].pass_rate == 0.75


def test_group_metrics_refuses_an_unknown_scoring():
    with pytest.raises(ConfigError, match="expected scoring 'final' or 'best'"):
        group_metrics([], group="overall", scoring="mean")
