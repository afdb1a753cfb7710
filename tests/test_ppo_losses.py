"""Oracle tests for the PPO update's math: every term and stabiliser against hand-computed values (1e-6)."""

from __future__ import annotations

import math

import pytest
import torch
from cudagym.baselines.ppo import losses as L

from cudagym.errors import ConfigError

TOL = {"atol": 1e-6, "rtol": 0.0}


def t(*rows):
    return torch.tensor(rows, dtype=torch.float64)


def close(actual, expected):
    torch.testing.assert_close(torch.as_tensor(actual, dtype=torch.float64),
                               torch.as_tensor(expected, dtype=torch.float64), **TOL)


# -- rewards per token -----------------------------------------------------------------------------------


def test_the_outcome_lands_on_each_rows_last_action_token():
    mask = t([0, 1, 1, 0], [1, 0, 0, 0])
    close(L.token_rewards(t(2.0, -1.0), mask), t([0, 0, 2, 0], [-1, 0, 0, 0]))


def test_a_kl_penalty_in_the_reward_is_subtracted_on_action_tokens_only():
    mask = t([0, 1, 1, 0])
    kl = t([5.0, 0.2, 0.4, 5.0])
    close(L.token_rewards(t(1.0), mask, kl, 0.1), t([0, -0.02, 1 - 0.04, 0]))


def test_a_row_with_no_action_token_is_refused():
    with pytest.raises(ValueError, match="at least one action token"):
        L.token_rewards(t(1.0), t([0, 0, 0]))


def test_kl_estimators_match_their_formulas():
    logp, ref = t([math.log(0.5)]), t([math.log(0.25)])
    close(L.kl_estimate(logp, ref, "k1"), [[math.log(2)]])
    close(L.kl_estimate(logp, ref, "k3"), [[0.5 + math.log(2) - 1]])


# -- GAE with observation tokens skipped ---------------------------------------------------------------------

MASK = t([0, 1, 1, 0, 0, 1])  # prompt, two action tokens, two observation tokens, one action token
VALUES = t([9.0, 0.5, 0.4, 7.0, 7.0, 0.8])  # values on non-action tokens must not matter
REWARDS = t([0, 0, 0, 0, 0, 1.0])


def test_gae_skips_observation_tokens_gamma_1():
    # action tokens alone: V = .5, .4, .8; r = 0, 0, 1; lambda .5
    # A3 = 1 - .8 = .2;  A2 = (.8 - .4) + .5 * .2 = .5;  A1 = (.4 - .5) + .5 * .5 = .15
    adv, ret = L.masked_gae(REWARDS, VALUES, MASK, 1.0, 0.5)
    close(adv, t([0, 0.15, 0.5, 0, 0, 0.2]))
    close(ret, t([0, 0.65, 0.9, 0, 0, 1.0]))


def test_gae_discounts_per_action_token():
    # gamma .9, lambda .5: A3 = .2; A2 = .9 * .8 - .4 + .45 * .2 = .41; A1 = .9 * .4 - .5 + .45 * .41 = .0445
    adv, _ = L.masked_gae(REWARDS, VALUES, MASK, 0.9, 0.5)
    close(adv, t([0, 0.0445, 0.41, 0, 0, 0.2]))


def test_gae_does_not_depend_on_how_long_the_observation_is():
    short, _ = L.masked_gae(REWARDS, VALUES, MASK, 1.0, 0.95)
    long_mask = t([0, 1, 1, *[0] * 40, 1])
    long_values = t([9.0, 0.5, 0.4, *[3.0] * 40, 0.8])
    long_rewards = t([0, 0, 0, *[0] * 40, 1.0])
    long, _ = L.masked_gae(long_rewards, long_values, long_mask, 1.0, 0.95)
    close(long[0, [1, 2, -1]], short[0, [1, 2, -1]])


def test_gae_rows_are_independent_and_padding_is_zero():
    mask = torch.cat([MASK, t([1, 1, 0, 0, 0, 0])])
    adv, ret = L.masked_gae(torch.cat([REWARDS, t([0, 2.0, 0, 0, 0, 0])]), torch.cat([VALUES, t([1.0] * 6)]),
                            mask, 1.0, 0.5)
    close(adv[1], [0.5, 1, 0, 0, 0, 0])  # A2 = 2 - 1 = 1; A1 = (0 + 1 - 1) + .5 * 1
    close(ret[1], [1.5, 2, 0, 0, 0, 0])


# -- whitening -------------------------------------------------------------------------------------------------


def test_whitening_uses_masked_mean_and_population_variance():
    x, mask = t([1.0, 2.0, 3.0, 100.0]), t([1, 1, 1, 0])
    close(L.whiten(x, mask), t([-1, 0, 1, 0]) / math.sqrt(2 / 3 + 1e-8))


# -- sampler-trainer correction ----------------------------------------------------------------------------

RATIOS = [2.0, 1.0, 0.5, 50.0, 0.05]


def _correction(**kw):
    old = torch.log(t(RATIOS))
    return L.sampler_correction(old, torch.zeros_like(old), torch.ones_like(old), L.LossConfig(**kw))


def test_token_tis_truncates_weights_and_the_band_masks_outliers():
    c = _correction(tis="token", tis_cap=2.0, mask_low=0.1, mask_high=10.0)
    close(c.keep, t([1, 1, 1, 0, 0]))
    close(c.weights, t([2.0, 1.0, 0.5, 0, 0]))
    assert c.masked_frac == pytest.approx(0.4, abs=1e-6)
    assert c.ratio_max == pytest.approx(50.0, rel=1e-6)


def test_sequence_tis_uses_the_product_of_the_rows_ratios_truncated():
    c = _correction(tis="sequence", tis_cap=2.0)  # product 2 * 1 * .5 * 50 * .05 = 2.5 -> 2
    close(c.weights, t([2.0, 2.0, 2.0, 0, 0]))
    c = _correction(tis="sequence", tis_cap=4.0)
    close(c.weights, t([2.5, 2.5, 2.5, 0, 0]))


def test_the_log_ratio_clamp_bounds_ratios_before_exp():
    c = _correction(tis="none", log_ratio_clamp=1.0, mask_low=0.1, mask_high=10.0)
    assert c.ratio_max == pytest.approx(math.e, rel=1e-6)
    close(c.keep, t([1, 1, 1, 1, 1]))  # 50 -> e and 0.05 -> 1/e are inside the band after the clamp
    close(c.weights, t([1, 1, 1, 1, 1]))


def test_plain_ppo_on_sampler_logprobs_has_nothing_to_correct():
    c = _correction(old_logprobs="sampler")
    close(c.weights, t([1] * 5))
    close(c.keep, t([1] * 5))


# -- the clipped surrogate --------------------------------------------------------------------------------

# five tokens, old log-probs 0: ratios and advantages chosen so each branch is hit once
PG_RATIO = [1.5, 1.1, 0.7, 5.0, 2.0]
PG_ADV = [1.0, 1.0, -1.0, -1.0, -2.0]
# a: A>0, r 1.5 > 1.28 -> clipped -1.28;  b: r 1.1 inside -> -1.1;  c: A<0, r .7 < .8 -> clipped .8
# d: A<0, r 5 -> 5, dual-clip caps at 3 * 1 = 3;  e: A<0, r 2 -> 4, under the dual cap 3 * 2 = 6


def _pg(weights=None, keep=None, **kw):
    logp = torch.log(t(PG_RATIO))
    ones = torch.ones_like(logp)
    keep = ones if keep is None else t(keep)
    weights = ones if weights is None else t(weights)
    corr = L.Correction(weights * keep, keep, 1.0, 0.0)
    return L.policy_loss(logp, torch.zeros_like(logp), t(PG_ADV), corr, L.LossConfig(**kw))


def test_clip_higher_and_dual_clip_each_branch():
    pg = _pg()
    close(pg.loss, (-1.28 - 1.1 + 0.8 + 3.0 + 4.0) / 5)
    assert pg.clipfrac == pytest.approx(2 / 5, abs=1e-6)  # a and c
    assert pg.ratio_max == pytest.approx(5.0, rel=1e-6)
    assert pg.approx_kl == pytest.approx(sum(r - 1 - math.log(r) for r in PG_RATIO) / 5, abs=1e-6)  # k3, r=new/old


def test_without_dual_clip_a_negative_advantage_is_unbounded():
    close(_pg(dual_clip=0.0).loss, (-1.28 - 1.1 + 0.8 + 5.0 + 4.0) / 5)


def test_symmetric_clip_clips_positive_advantages_at_1_2():
    close(_pg(clip_high=0.2).loss, (-1.2 - 1.1 + 0.8 + 3.0 + 4.0) / 5)


def test_importance_weights_scale_each_token_and_masked_tokens_drop_out():
    close(_pg(weights=[2, 1, 1, 0.5, 1]).loss, (-2.56 - 1.1 + 0.8 + 1.5 + 4.0) / 5)
    close(_pg(keep=[1, 1, 1, 0, 1]).loss, (-1.28 - 1.1 + 0.8 + 4.0) / 4)


def test_the_policy_loss_gradient_is_zero_on_clipped_tokens():
    logp = torch.log(t(PG_RATIO)).requires_grad_()
    ones = torch.ones_like(logp)
    L.policy_loss(logp, torch.zeros_like(logp), t(PG_ADV), L.Correction(ones, ones, 1.0, 0.0),
                  L.LossConfig()).loss.backward()
    # d/dlogp of -A * r is -A * r / 5 where unclipped (b, e); 0 where clipped (a, c) or dual-capped (d)
    close(logp.grad, t([0.0, -1.1 / 5, 0.0, 0.0, 2 * 2.0 / 5]))


# -- value loss, explained variance, total, gradient clipping ----------------------------------------------


def test_clipped_value_loss_takes_the_worse_of_clipped_and_unclipped():
    values, old, returns, mask = t([1.5, 0.0, 9.0]), t([1.0, 0.2, 0.0]), t([2.0, 1.0, 0.0]), t([1, 1, 0])
    # t0: (1.5-2)^2=.25 vs (1.2-2)^2=.64 -> .64;  t1: (0-1)^2=1 vs (0-1)^2=1 -> 1;  t2 masked
    close(L.value_loss(values, old, returns, mask, 0.2), 0.5 * (0.64 + 1.0) / 2)
    close(L.value_loss(values, old, returns, mask, 0.0), 0.5 * (0.25 + 1.0) / 2)


def test_explained_variance():
    ev = L.explained_variance(t([1.0, 2.0, 3.0]), t([1.0, 2.0, 4.0]), t([1, 1, 1]))
    assert ev == pytest.approx(1 - 6 / 42, abs=1e-6)


def test_total_loss_adds_value_kl_and_entropy_terms():
    pg = L.PolicyLoss(torch.tensor(1.0, dtype=torch.float64), 0.0, 0.0, 1.0)
    cfg = L.LossConfig(value_coef=0.5, kl_coef=0.1, kl_in="loss", entropy_coef=0.01)
    keep = t([1, 1])
    total = L.total_loss(pg, torch.tensor(2.0, dtype=torch.float64), keep, cfg, entropy=t([1.0, 3.0]),
                         kl=t([0.2, 0.4]))
    close(total, 1 + 0.5 * 2 + 0.1 * 0.3 - 0.01 * 2.0)
    in_reward = L.LossConfig(value_coef=0.5, kl_coef=0.1, kl_in="reward", entropy_coef=0.0)
    close(L.total_loss(pg, torch.tensor(2.0, dtype=torch.float64), keep, in_reward, kl=t([0.2, 0.4])), 2.0)


def test_gradient_clipping_scales_to_the_max_norm_and_returns_the_norm_before():
    p = torch.nn.Parameter(torch.zeros(2, dtype=torch.float64))
    p.grad = torch.tensor([3.0, 4.0], dtype=torch.float64)
    assert L.clip_gradients([p], 1.0) == pytest.approx(5.0)
    close(p.grad, [0.6, 0.8])
    p.grad = torch.tensor([3.0, 4.0], dtype=torch.float64)
    assert L.clip_gradients([p], 0.0) == pytest.approx(5.0)
    close(p.grad, [3.0, 4.0])


@pytest.mark.parametrize("kw", [{"tis": "seq"}, {"dual_clip": 1.0}, {"mask_low": 1.5}, {"kl_in": "both"},
                                {"clip_low": 0.0}])
def test_bad_config_values_are_refused_with_a_clear_message(kw):
    with pytest.raises(ConfigError, match="expected"):
        L.LossConfig(**kw)
