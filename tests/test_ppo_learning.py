"""Learning evidence on CPU: the tiny policy on the toy tool-call env, fixed seeds.

The recipe is CUDA Agent's in miniature: a format warm-up (fine-tuning on a scripted agent that calls a
uniformly random tool, so the policy knows the tool-call format but not which tool: reward about 0.04),
then token-level PPO. A second pair of runs perturbs the sampler's reported log-probs (a sampler whose
numbers differ from the trainer's) and compares plain PPO on those log-probs with the stabilisers.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from cudagym.baselines.ppo import losses as L
from cudagym.baselines.ppo.collect import CollectConfig
from cudagym.baselines.ppo.loop import LoopConfig, train
from cudagym.baselines.ppo.tiny import TinyConfig, TinyPolicy
from cudagym.baselines.ppo.toy import ToyToolCallEnv, random_tool_journal, tool_call_ids
from cudagym.baselines.ppo.trainer import PPOTrainer
from cudagym.baselines.ppo.warmup import JournalEpisode, sft

COLLECT = CollectConfig(max_new_tokens=40, max_tokens=320)  # the longest example call (edit_file) is 33 ids
# plain PPO on the sampler's log-probs: no importance correction, no band mask, no log-ratio clamp,
# no dual-clip, no gradient clipping
PLAIN = L.LossConfig(old_logprobs="sampler", tis="none", dual_clip=0.0, mask_low=0.0, mask_high=math.inf,
                     log_ratio_clamp=math.inf, max_grad_norm=0.0)


def warm_policy(cfg: TinyConfig, sft_steps: int) -> TinyPolicy:
    torch.manual_seed(0)
    policy = TinyPolicy(cfg, seed=0, output_ids=tool_call_ids(TinyPolicy(cfg).encode))
    journal = [JournalEpisode(tuple(r["messages"]), r["reward"]) for r in random_tool_journal(256, seed=0)]
    sft(policy, journal, steps=sft_steps, lr=3e-3, batch_size=16)
    return policy


def run(policy, cfg, tmp_path, *, updates, episodes, epochs=2, minibatches=2, lr=5e-4, journal=False,
        target=None):
    ref = copy.deepcopy(policy).requires_grad_(False) if cfg.kl_coef else None
    trainer = PPOTrainer(policy, cfg, actor_lr=lr, critic_lr=1e-3, epochs=epochs, minibatches=minibatches,
                         ref_policy=ref)
    loop = LoopConfig(updates=updates, episodes_per_update=episodes, out_dir=str(tmp_path), checkpoint_every=0,
                      progress=False, journal=journal, target_reward=target)
    return train(trainer, ToyToolCallEnv, loop, COLLECT)


def smooth(history, key, width=10):
    values = [h[key] for h in history]
    return [sum(values[max(0, i - width + 1): i + 1]) / len(values[max(0, i - width + 1): i + 1])
            for i in range(len(values))]


@pytest.mark.slow
def test_ppo_lifts_the_toy_reward_from_chance_to_0_9_within_200_updates(tmp_path):
    # Why the settings (each measured on this test's seed; the README has the figures):
    # - rotary positions (the TinyConfig default): every JSON value follows the same '": "' ids, so the next
    #   id depends on the key a few ids back; with learned absolute positions the format warm-up left 38% of
    #   the calls invalid, which capped the reward of a two-call episode near 0.4-0.6 whatever PPO learned;
    # - 800 warm-up steps: 4% invalid calls after it (8% after 400);
    # - a k3 KL to the warm-up policy: without it the policy collapses onto one tool for several targets
    #   (entropy 0.05 nats per token, 0.38 reward at update 200) and a collapsed choice gets no gradient back;
    #   an entropy bonus instead acts alone while every reward is still 0 and unlearns the format
    #   (0.01 at lr 1e-3: 3.5 nats per token, reward 0); the KL has no gradient at the start (policy ==
    #   reference) and pulls a collapsed choice back toward the reference's uniform one.
    # One intra-op thread: CPU reductions then sum in one order on every machine. The run is sensitive to it:
    # with torch's default threads on two cores the same seed reached 0.81 at update 200, not 0.9 at 135.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        policy = warm_policy(TinyConfig(d_model=32, n_layers=1, n_heads=4, max_len=512), sft_steps=800)
        # lambda 1 (Monte-Carlo advantages) for the toy's short episodes; CUDA Agent's 0.95 is the default
        history = run(policy, L.LossConfig(lam=1.0, kl_coef=0.05), tmp_path, updates=200, episodes=32, target=0.9)
    finally:
        torch.set_num_threads(threads)
    reward = smooth(history, "rollout/reward_mean")
    print(f"smoothed reward: start {reward[4]:.3f}, end {reward[-1]:.3f} after {len(history)} updates")
    assert reward[4] <= 0.1  # the first five updates: chance
    assert len(history) <= 200 and reward[-1] >= 0.9  # the loop stops once ten updates average 0.9


@pytest.mark.slow
def test_plain_ppo_on_perturbed_sampler_logprobs_explodes_and_the_stabilisers_hold(tmp_path):
    # Measured on this seed: ratio_max 474 for plain PPO, 1 with the stabilisers. With the rotary tiny
    # policy the tool-call format no longer decays within these 25 updates (valid calls: 0.76 at the start,
    # 0.61 plain, 0.66 stable), so the test asserts the ratios, CUDA Agent's symptom, not the format.
    warm = warm_policy(TinyConfig(d_model=32, n_layers=1, n_heads=2, max_len=512), sft_steps=300)
    history = {}
    for name, cfg in (("plain", PLAIN), ("stable", L.LossConfig())):
        policy = copy.deepcopy(warm)
        policy.logprob_noise = 1.5  # the sampler reports log-probs off by N(0, 1.5^2) nats
        history[name] = run(policy, cfg, tmp_path / name, updates=25, episodes=16, epochs=1, minibatches=1)
    plain_ratio = max(h["train/ratio_max"] for h in history["plain"])
    stable_ratio = max(h["train/ratio_max"] for h in history["stable"])
    print(f"ratio_max plain {plain_ratio:.3g} stable {stable_ratio:.3g}")
    # plain PPO divides by the perturbed log-probs: ratios in the hundreds
    assert plain_ratio > 50 * stable_ratio
    # the stabilisers see the same perturbation and truncate it
    assert max(h["train/is_ratio_max"] for h in history["stable"]) > 10
    assert max(h["train/is_weight_mean"] for h in history["stable"]) <= 2.0
