"""One PPO update over a batch of episodes: the algorithm alone (collection is ``collect``, logging ``loop``).

``PPOTrainer.update`` reads in the order it runs: pad the episodes into tensors; score them once with the
weights that are about to change (old log-probs, old values and the bootstrap values of episodes the
collector cut off, the reference's log-probs); rewards, GAE and whitening; the sampler-trainer correction;
then, per epoch and minibatch, the losses, backward, gradient clipping and the optimiser steps. The math
is in :mod:`cudagym.baselines.ppo.losses`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from cudagym.baselines.ppo import losses as L  # noqa: N812
from cudagym.baselines.ppo.collect import Episode
from cudagym.baselines.ppo.policy import LLMPolicy, pad_batch


@dataclass(frozen=True)
class Batch:
    """Episodes as right-padded ``[B, T]`` tensors (``outcome`` and ``cut`` are ``[B]``).

    ``cut`` is 1 for an episode the collector cut off, whose return is bootstrapped.
    """

    tokens: torch.Tensor
    attention_mask: torch.Tensor
    action_mask: torch.Tensor
    sampler_logp: torch.Tensor
    outcome: torch.Tensor
    cut: torch.Tensor

    def rows(self, index: torch.Tensor) -> Batch:
        """The sub-batch of rows ``index``."""
        return Batch(*(t[index] for t in (self.tokens, self.attention_mask, self.action_mask, self.sampler_logp,
                                          self.outcome, self.cut)))


def make_batch(episodes: Sequence[Episode], pad_id: int, device: torch.device) -> Batch:
    """Pad episodes into a :class:`Batch` on ``device``."""
    tokens, attn = pad_batch([e.tokens for e in episodes], pad_id, left=False)
    mask, _ = pad_batch([e.action_mask for e in episodes], 0, left=False)
    width = tokens.shape[1]
    logp = torch.zeros(tokens.shape, dtype=torch.float32)
    for i, e in enumerate(episodes):
        logp[i, : len(e.sampler_logprobs)] = torch.tensor(e.sampler_logprobs[:width], dtype=torch.float32)
    outcome = torch.tensor([e.reward for e in episodes], dtype=torch.float32)
    cut = torch.tensor([float(e.cut) for e in episodes], dtype=torch.float32)
    return Batch(tokens.to(device), attn.to(device), mask.float().to(device), logp.to(device), outcome.to(device),
                 cut.to(device))


def critic_values(policy: LLMPolicy, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """The critic's ``[B, T]`` values of the batch and ``[B]`` bootstrap values of its cut rows (0 elsewhere).

    A cut row's bootstrap is the value after its last action token (``losses.end_values``); when that token is
    the batch's last column, the values are computed over one more padding column (the causal critic's value
    there is that of the whole row). The ``[B, T]`` values keep their gradient; the bootstrap values do not.
    """
    tokens, attn, width = batch.tokens, batch.attention_mask, batch.tokens.shape[1]
    last = L.last_action_index(batch.action_mask)
    if bool((batch.cut.bool() & (last + 1 >= width)).any()):
        tokens = torch.nn.functional.pad(tokens, (0, 1), value=policy.chat.stop_id)
        attn = torch.nn.functional.pad(attn, (0, 1), value=0)
    values = policy.values(tokens, attn)
    mask = torch.nn.functional.pad(batch.action_mask, (0, values.shape[1] - width))
    return values[:, :width], L.end_values(values, mask, batch.cut)


@dataclass(frozen=True)
class Prepared:
    """What the update computes once per batch, before any weight changes (no gradients)."""

    batch: Batch
    old_logp: torch.Tensor
    old_values: torch.Tensor
    ref_logp: torch.Tensor | None
    advantages: torch.Tensor
    returns: torch.Tensor
    correction: L.Correction


class PPOTrainer:
    """Token-level PPO with a critic, CUDA Agent's defaults (actor lr 3e-6, critic lr 6e-6, one update per batch).

    Args:
        policy: The policy to train.
        cfg: The loss configuration.
        actor_lr: Actor learning rate.
        critic_lr: Critic learning rate.
        ref_policy: A frozen reference policy, needed when ``cfg.kl_coef`` is not 0.
        epochs: Passes over each batch.
        minibatches: Minibatches per pass.
        temperature: Sampling temperature (log-probs are scored at the same one).
    """

    def __init__(
        self,
        policy: LLMPolicy,
        cfg: L.LossConfig | None = None,
        *,
        actor_lr: float = 3e-6,
        critic_lr: float = 6e-6,
        ref_policy: LLMPolicy | None = None,
        epochs: int = 1,
        minibatches: int = 1,
        temperature: float = 1.0,
    ) -> None:
        self.policy, self.cfg, self.ref_policy = policy, cfg or L.LossConfig(), ref_policy
        if self.cfg.kl_coef and ref_policy is None:
            raise ValueError("expected a ref_policy when kl_coef is not 0 (the KL is to a frozen reference)")
        if epochs < 1 or minibatches < 1:
            raise ValueError(f"expected epochs >= 1 and minibatches >= 1, got {epochs}, {minibatches}")
        self.epochs, self.minibatches, self.temperature = epochs, minibatches, temperature
        self.actor_params = list(policy.actor_parameters())
        self.critic_params = list(policy.critic_parameters())
        self.actor_opt = torch.optim.AdamW(self.actor_params, lr=actor_lr, weight_decay=0.0)
        self.critic_opt = torch.optim.AdamW(self.critic_params, lr=critic_lr, weight_decay=0.0)

    @torch.no_grad()
    def prepare(self, batch: Batch) -> Prepared:
        """Score the batch once, then rewards, GAE, whitening and the sampler correction (blocks 1-4)."""
        cfg, mask = self.cfg, batch.action_mask
        old = self.policy.score(batch.tokens, batch.attention_mask, mask, temperature=self.temperature).logprobs
        values, bootstrap = critic_values(self.policy, batch)
        old_values = values * mask
        ref_logp = None
        kl = None
        if cfg.kl_coef and self.ref_policy is not None:
            ref_logp = self.ref_policy.score(batch.tokens, batch.attention_mask, mask,
                                             temperature=self.temperature).logprobs
            kl = L.kl_estimate(old, ref_logp, cfg.kl_estimator) * mask
        in_reward = kl if cfg.kl_in == "reward" else None
        rewards = L.token_rewards(batch.outcome, mask, in_reward, cfg.kl_coef)
        advantages, returns = L.masked_gae(rewards, old_values, mask, cfg.gamma, cfg.lam, last_values=bootstrap)
        if cfg.whiten_advantages:
            advantages = L.whiten(advantages, mask)
        if cfg.old_logprobs == "sampler":
            old = batch.sampler_logp * mask
        correction = L.sampler_correction(old, batch.sampler_logp, mask, cfg)
        return Prepared(batch, old, old_values, ref_logp, advantages, returns, correction)

    def update(self, episodes: Sequence[Episode], generator: torch.Generator | None = None) -> dict[str, float]:
        """One PPO update on ``episodes``; returns ``train/*`` metrics."""
        start = time.perf_counter()
        pad = self.policy.chat.stop_id
        prep = self.prepare(make_batch(episodes, pad, self.policy.device))
        rows = prep.batch.tokens.shape[0]
        stats: dict[str, list[float]] = {}
        for _ in range(self.epochs):
            order = torch.randperm(rows, generator=generator)
            for chunk in order.chunk(min(self.minibatches, rows)):
                for key, value in self._minibatch(prep, chunk.to(prep.batch.tokens.device)).items():
                    stats.setdefault(key, []).append(value)
        out = {f"train/{k}": (max(v) if k == "ratio_max" else sum(v) / len(v)) for k, v in stats.items()}
        mask = prep.batch.action_mask
        out["train/explained_variance"] = L.explained_variance(prep.old_values, prep.returns, mask)
        out["train/is_weight_mean"] = float(L.masked_mean(prep.correction.weights, mask))
        out["train/is_ratio_max"] = prep.correction.ratio_max
        out["train/masked_frac"] = prep.correction.masked_frac
        tokens = float(prep.batch.attention_mask.sum())
        out["perf/update_tokens_per_s"] = tokens * self.epochs / max(time.perf_counter() - start, 1e-9)
        return out

    def _minibatch(self, prep: Prepared, index: torch.Tensor) -> dict[str, float]:
        """Losses, backward, clipping and steps on rows ``index`` (blocks 5-8)."""
        cfg, b = self.cfg, prep.batch.rows(index)
        mask, keep = b.action_mask, prep.correction.keep[index]
        scores = self.policy.score(b.tokens, b.attention_mask, mask, temperature=self.temperature,
                                   with_entropy=True)
        correction = L.Correction(prep.correction.weights[index], keep, 0.0, 0.0)
        pg = L.policy_loss(scores.logprobs, prep.old_logp[index], prep.advantages[index], correction, cfg)
        values = self.policy.values(b.tokens, b.attention_mask)
        vf = L.value_loss(values, prep.old_values[index], prep.returns[index], mask, cfg.value_clip)
        kl = None
        if prep.ref_logp is not None and cfg.kl_in == "loss":
            kl = L.kl_estimate(scores.logprobs, prep.ref_logp[index], cfg.kl_estimator)
        loss = L.total_loss(pg, vf, keep, cfg, entropy=scores.entropy, kl=kl)
        self.actor_opt.zero_grad(set_to_none=True)
        self.critic_opt.zero_grad(set_to_none=True)
        loss.backward()
        actor_norm = L.clip_gradients(self.actor_params, cfg.max_grad_norm)
        critic_norm = L.clip_gradients(self.critic_params, cfg.max_grad_norm)
        self.actor_opt.step()
        self.critic_opt.step()
        entropy = float(L.masked_mean(scores.entropy.detach(), mask)) if scores.entropy is not None else 0.0
        return {"policy_loss": float(pg.loss.detach()), "value_loss": float(vf.detach()), "clipfrac": pg.clipfrac,
                "approx_kl": pg.approx_kl, "ratio_max": pg.ratio_max, "entropy": entropy,
                "actor_grad_norm": actor_norm, "critic_grad_norm": critic_norm}
