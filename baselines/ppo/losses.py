"""The token-level PPO update's math, top to bottom in the order it runs, one block per trick.

Every per-token tensor is ``[batch, time]`` and aligned to the token it scores: ``logp[b, t]`` is the log-prob
of token ``t`` given tokens ``< t``, ``values[b, t]`` the critic's value of that same prefix. ``action_mask``
is 1 on tokens the policy generated (actions) and 0 on the prompt, the observations the env wrote, and padding.
Observation tokens take no part in the advantages, the policy loss or the value loss.

Defaults follow CUDA Agent where it states them (gamma 1, lambda 0.95, clip 0.2 low / 0.28 high, outcome
reward on the final token); the rest are the usual choices of the LLM-RL trainers, named where they are set.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import torch

from cudagym.errors import ConfigError


@dataclass(frozen=True)
class LossConfig:
    """The knobs of the update; one field per trick.

    Attributes:
        gamma: Discount per action token (CUDA Agent: 1).
        lam: GAE lambda for the actor's advantages (CUDA Agent: 0.95).
        whiten_advantages: Normalise advantages to zero mean, unit variance over the batch's action tokens.
        clip_low: Lower PPO clip: the ratio is clipped at ``1 - clip_low`` (CUDA Agent: 0.2).
        clip_high: Upper PPO clip, clip-higher (CUDA Agent: 0.28).
        dual_clip: Dual-clip constant c for negative advantages (the loss is capped at ``-c * A``); 0 disables.
        value_clip: Clip of the new value around the old one in the value loss; 0 disables.
        value_coef: Weight of the value loss in the total loss.
        kl_coef: Weight of the KL to the frozen reference policy; 0 disables it (no reference forward).
        kl_estimator: ``k1`` (log-ratio) or ``k3`` (``exp(-x) + x - 1``, non-negative, low variance).
        kl_in: ``reward`` (subtracted from each action token's reward) or ``loss`` (a term of the total loss).
        entropy_coef: Weight of the entropy bonus; 0 disables it.
        max_grad_norm: Gradient clipping: the global L2 norm is scaled down to this; 0 disables.
        old_logprobs: What the PPO ratio divides by: ``trainer`` (log-probs recomputed by the trainer before
            the update; the sampler's are then corrected by importance sampling) or ``sampler`` (the
            sampler's own log-probs, plain PPO: unstable when sampler and trainer differ).
        tis: Truncated importance sampling of trainer over sampler: ``token``, ``sequence`` or ``none``.
        tis_cap: Upper truncation of the importance weight.
        mask_low: Tokens whose trainer/sampler ratio is below this are masked out of the loss; 0 disables.
        mask_high: Tokens whose trainer/sampler ratio is above this are masked out; ``inf`` disables.
        log_ratio_clamp: Every log-ratio is clamped to ``[-x, x]`` before ``exp``; ``inf`` disables.
    """

    gamma: float = 1.0
    lam: float = 0.95
    whiten_advantages: bool = True
    clip_low: float = 0.2
    clip_high: float = 0.28
    dual_clip: float = 3.0
    value_clip: float = 0.2
    value_coef: float = 0.5
    kl_coef: float = 0.0
    kl_estimator: Literal["k1", "k3"] = "k3"
    kl_in: Literal["reward", "loss"] = "loss"
    entropy_coef: float = 0.0
    max_grad_norm: float = 1.0
    old_logprobs: Literal["trainer", "sampler"] = "trainer"
    tis: Literal["token", "sequence", "none"] = "token"
    tis_cap: float = 2.0
    mask_low: float = 0.1
    mask_high: float = 10.0
    log_ratio_clamp: float = 20.0

    def __post_init__(self) -> None:
        choices = {"kl_estimator": ("k1", "k3"), "kl_in": ("reward", "loss"),
                   "old_logprobs": ("trainer", "sampler"), "tis": ("token", "sequence", "none")}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ConfigError(f"expected {name} in {allowed}, got {getattr(self, name)!r}")
        if self.dual_clip and self.dual_clip <= 1.0:
            raise ConfigError(f"expected dual_clip > 1 (or 0 to disable), got {self.dual_clip}")
        if not 0.0 <= self.mask_low < 1.0 < self.mask_high:
            raise ConfigError(f"expected 0 <= mask_low < 1 < mask_high, got {self.mask_low}, {self.mask_high}")
        if self.clip_low <= 0 or self.clip_high <= 0 or self.tis_cap <= 0 or self.log_ratio_clamp <= 0:
            raise ConfigError("expected clip_low, clip_high, tis_cap and log_ratio_clamp > 0")


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over the positions where ``mask`` is 1 (token-mean over the whole batch)."""
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


# ---------------------------------------------------------------------------------------------------------
# 1. Rewards per token: the episode's outcome on its last action token (CUDA Agent puts the outcome reward
#    on the final token); a KL penalty to the reference, when it goes in the reward, on every action token.


def kl_estimate(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token KL(policy || reference) estimate from the sampled token's log-probs.

    ``k1 = logp - ref_logp`` is unbiased but can be negative; ``k3 = exp(ref - logp) - (ref - logp) - 1`` is
    unbiased, non-negative and of lower variance (Schulman's estimators).
    """
    log_ratio = ref_logp - logp
    if estimator == "k1":
        return -log_ratio
    return torch.exp(log_ratio) - log_ratio - 1.0


def last_action_index(action_mask: torch.Tensor) -> torch.Tensor:
    """``[B]`` index of each row's last action token.

    Raises:
        ValueError: A row has no action token (its outcome would be lost).
    """
    mask = action_mask.float()
    if bool((mask.sum(dim=1) == 0).any()):
        raise ValueError("expected every episode to hold at least one action token, got a row with none")
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    return (positions * mask).argmax(dim=1)


def token_rewards(
    outcome: torch.Tensor, action_mask: torch.Tensor, kl: torch.Tensor | None = None, kl_coef: float = 0.0
) -> torch.Tensor:
    """``[B, T]`` rewards: ``outcome[b]`` on the last action token of row ``b``, minus ``kl_coef * kl``.

    Raises:
        ValueError: A row has no action token (its outcome would be lost).
    """
    mask = action_mask.float()
    last = last_action_index(mask)
    rewards = torch.zeros_like(mask)
    rewards[torch.arange(mask.shape[0], device=mask.device), last] = outcome.to(rewards.dtype)
    if kl is not None and kl_coef:
        rewards = rewards - kl_coef * kl.detach() * mask
    return rewards


# ---------------------------------------------------------------------------------------------------------
# 2. Token-level GAE over action tokens, verl's multi-turn convention: observation tokens are *skipped* in
#    the recursion (the value and the running advantage pass through them unchanged), so the result equals
#    GAE over the sequence of action tokens alone. OpenRLHF instead zeroes rewards and values on them and
#    recurses through: with gamma = 1 each observation token then adds a lambda factor and a zero-value
#    bootstrap, so the credit reaching earlier turns shrinks with the length of the env's output (a long
#    compiler log discounts the turn before it by lambda^L) and the critic's target at the last action token
#    before an observation is V = 0 rather than the next turn's value. Skipping keeps the credit a function
#    of the agent's own decisions, which is what CUDA Agent's gamma = 1 intends.
#
#    An episode ends one of two ways. The env ended it (submit, or its own max_turns / token_budget, after
#    which cudagym judges the files as they are): its outcome is known, and past its last action token the
#    value is 0. Or the collector cut it off before the env ended it (``Episode.cut``: the token limit of
#    ``CollectConfig.max_tokens``, or the rollout's step limit): its outcome is unknown (the reward so far,
#    0 in cudagym, is not a verdict), so the last action token bootstraps from the critic's value of the
#    state after it (``end_values``), as a time-limit truncation is handled. Scoring a cut as a terminal 0
#    would rank running out of tokens above a wrong kernel's -1.


def end_values(values: torch.Tensor, action_mask: torch.Tensor, cut: torch.Tensor) -> torch.Tensor:
    """``[B]``: for each cut row, the critic's value at the position after its last action token; 0 elsewhere.

    ``values[b, t]`` is the value of the prefix before token ``t``, so the value at ``last + 1`` is the value
    of the state after the last action. ``values`` needs that column for every cut row.

    Raises:
        ValueError: A cut row's last action token is the last column of ``values``.
    """
    last = last_action_index(action_mask)
    cut = cut.bool()
    if bool((cut & (last + 1 >= values.shape[1])).any()):
        raise ValueError("expected a value after each cut row's last action token; extend the batch by a column")
    after = values.gather(1, (last + 1).clamp(max=values.shape[1] - 1).unsqueeze(1)).squeeze(1)
    return torch.where(cut, after.detach(), torch.zeros_like(after))


def masked_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    action_mask: torch.Tensor,
    gamma: float,
    lam: float,
    last_values: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns (``A + V``) on action tokens; 0 elsewhere.

    For action token ``t`` with next action token ``t'`` (none past the last: ``last_values``, 0 when None):
    ``delta_t = r_t + gamma * V_t' - V_t`` and ``A_t = delta_t + gamma * lam * A_t'``.
    """
    mask = action_mask.to(values.dtype)
    values = values.detach() * mask
    batch, length = values.shape
    next_value = values.new_zeros(batch) if last_values is None else last_values.detach().to(values.dtype)
    next_adv = values.new_zeros(batch)
    advantages = torch.zeros_like(values)
    for t in reversed(range(length)):
        m = mask[:, t]
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        adv = delta + gamma * lam * next_adv
        advantages[:, t] = adv * m
        # skip non-action tokens: carry the next action token's value and advantage through them
        next_value = m * values[:, t] + (1 - m) * next_value
        next_adv = m * adv + (1 - m) * next_adv
    return advantages, (advantages + values) * mask


# ---------------------------------------------------------------------------------------------------------
# 3. Advantage whitening over every action token of the batch (population variance), so the step size does
#    not depend on the reward's scale (CUDA Agent's tiers are -1..3).


def whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``(x - mean) / sqrt(var + eps)`` over masked positions; 0 elsewhere."""
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    return (x - mean) * torch.rsqrt(var + eps) * mask


# ---------------------------------------------------------------------------------------------------------
# 4. Sampler-trainer correction, computed once per batch. The sampler (vLLM, a quantised engine, or just
#    other kernels) and the trainer disagree on log-probs; tokens the base model gives ~1e-9 (CUDA code
#    under a chat model) make the ratio explode: CUDA Agent's collapse. Three guards:
#    a log-ratio clamp before exp (no inf/nan), truncated importance sampling of trainer over sampler
#    (token or sequence level, capped at tis_cap), and masking tokens whose ratio leaves [mask_low, mask_high].


@dataclass(frozen=True)
class Correction:
    """Per-token importance weights (no gradient) and the tokens kept in the loss."""

    weights: torch.Tensor
    keep: torch.Tensor
    ratio_max: float
    masked_frac: float


def sampler_correction(
    old_logp: torch.Tensor, sampler_logp: torch.Tensor, action_mask: torch.Tensor, cfg: LossConfig
) -> Correction:
    """Importance weights ``pi_trainer / pi_sampler``, truncated, and the band mask (see block 4)."""
    mask = action_mask.to(old_logp.dtype)
    if cfg.old_logprobs == "sampler":  # plain PPO: the sampler is the behaviour policy, nothing to correct
        return Correction(mask.clone(), mask.clone(), 1.0, 0.0)
    log_ratio = ((old_logp - sampler_logp) * mask).clamp(-cfg.log_ratio_clamp, cfg.log_ratio_clamp)
    ratio = torch.exp(log_ratio)
    keep = mask * (ratio >= cfg.mask_low) * (ratio <= cfg.mask_high)
    if cfg.tis == "token":
        weights = ratio.clamp(max=cfg.tis_cap)
    elif cfg.tis == "sequence":
        seq_log = log_ratio.sum(dim=1, keepdim=True).clamp(-cfg.log_ratio_clamp, cfg.log_ratio_clamp)
        weights = torch.exp(seq_log).clamp(max=cfg.tis_cap).expand_as(ratio)
    else:
        weights = torch.ones_like(ratio)
    masked = float((mask - keep).sum() / mask.sum().clamp(min=1.0))
    ratio_max = float((ratio * mask).max()) if bool(mask.any()) else 1.0
    return Correction((weights * keep).detach(), keep.detach(), ratio_max, masked)


# ---------------------------------------------------------------------------------------------------------
# 5. The clipped surrogate, per minibatch: ratio from clamped log-ratios, asymmetric clip (clip-higher: the
#    ratio may rise to 1 + clip_high for positive advantages, so rare good tokens can grow), dual-clip for
#    negative advantages (a huge ratio on a bad token cannot make the loss unbounded), weighted by the
#    importance weights of block 4, token-mean over the kept tokens.


@dataclass(frozen=True)
class PolicyLoss:
    """The surrogate loss and its statistics."""

    loss: torch.Tensor
    clipfrac: float
    approx_kl: float
    ratio_max: float


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    correction: Correction,
    cfg: LossConfig,
) -> PolicyLoss:
    """The PPO policy loss with clip-higher, dual-clip and the sampler correction (block 5)."""
    keep = correction.keep
    log_ratio = (logp - old_logp).clamp(-cfg.log_ratio_clamp, cfg.log_ratio_clamp) * keep
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - cfg.clip_low, 1.0 + cfg.clip_high)
    loss_tok = torch.maximum(unclipped, clipped)
    if cfg.dual_clip:
        capped = torch.minimum(loss_tok, -advantages * cfg.dual_clip)
        loss_tok = torch.where(advantages < 0, capped, loss_tok)
    loss = masked_mean(loss_tok * correction.weights, keep)
    with torch.no_grad():
        clipfrac = float(masked_mean((clipped > unclipped).to(logp.dtype), keep))
        # k3 estimate of KL(old || new) from tokens drawn from old: r - 1 - log r, r = new / old (unbiased)
        approx_kl = float(masked_mean(torch.exp(log_ratio) - 1.0 - log_ratio, keep))
        ratio_max = float((ratio * keep).max()) if bool(keep.any()) else 1.0
    return PolicyLoss(loss, clipfrac, approx_kl, ratio_max)


# ---------------------------------------------------------------------------------------------------------
# 6. Clipped value loss on action tokens: the worse of the new value and the new value clipped around the
#    old one, so the critic cannot jump far from the values the advantages were computed with.


def value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, action_mask: torch.Tensor, clip: float
) -> torch.Tensor:
    """``0.5 * max((V - R)^2, (V_clipped - R)^2)``, token-mean over action tokens (no clip when ``clip`` is 0)."""
    mask = action_mask.to(values.dtype)
    err = (values - returns) ** 2
    if clip:
        clipped = old_values + (values - old_values).clamp(-clip, clip)
        err = torch.maximum(err, (clipped - returns) ** 2)
    return 0.5 * masked_mean(err, mask)


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """``1 - Var[R - V] / Var[R]`` over masked positions (1 is perfect, 0 no better than a constant)."""
    var_r = masked_mean((returns - masked_mean(returns, mask)) ** 2, mask)
    resid = returns - values
    var_e = masked_mean((resid - masked_mean(resid, mask)) ** 2, mask)
    return float("nan") if float(var_r) == 0.0 else float(1.0 - var_e / var_r)


# ---------------------------------------------------------------------------------------------------------
# 7. The total: policy loss + value_coef * value loss + kl_coef * KL (when it goes in the loss)
#    - entropy_coef * entropy. Entropy and KL are token-means over the kept action tokens.


def total_loss(
    pg: PolicyLoss,
    vf: torch.Tensor,
    keep: torch.Tensor,
    cfg: LossConfig,
    *,
    entropy: torch.Tensor | None = None,
    kl: torch.Tensor | None = None,
) -> torch.Tensor:
    """Combine the terms of block 7."""
    loss = pg.loss + cfg.value_coef * vf
    if kl is not None and cfg.kl_coef and cfg.kl_in == "loss":
        loss = loss + cfg.kl_coef * masked_mean(kl, keep)
    if entropy is not None and cfg.entropy_coef:
        loss = loss - cfg.entropy_coef * masked_mean(entropy, keep)
    return loss


# ---------------------------------------------------------------------------------------------------------
# 8. Gradient clipping, after backward and before the optimiser step.


def clip_gradients(parameters: Iterable[torch.nn.Parameter], max_norm: float) -> float:
    """Scale gradients to a global L2 norm of at most ``max_norm`` (0: no clipping); returns the norm before."""
    params = [p for p in parameters if p.grad is not None]
    if not params:
        return 0.0
    if not max_norm:
        return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in params])))
    norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    return norm if math.isfinite(norm) else float("inf")
