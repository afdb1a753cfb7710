"""What each ``cudagym train`` stage does, given its typed ``Args`` (see :mod:`cudagym.baselines.ppo.commands`)."""

from __future__ import annotations

import logging
import pickle
from dataclasses import replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from cudagym.baselines.ppo import losses as L  # noqa: N812
from cudagym.baselines.ppo.collect import CollectConfig, collect
from cudagym.baselines.ppo.commands import (
    CriticArgs,
    EnvArgs,
    PolicyArgs,
    PPOArgs,
    RFTArgs,
    parse_env_kwargs,
    save_policy,
)
from cudagym.baselines.ppo.loop import LoopConfig, MetricsLogger, train
from cudagym.baselines.ppo.trainer import PPOTrainer
from cudagym.baselines.ppo.warmup import pretrain_critic, read_journal, rft_filter, sft

from cudagym.errors import ConfigError

log = logging.getLogger(__name__)


def build_policy(args: PolicyArgs) -> Any:
    """The policy ``--policy`` names, with ``--init`` weights loaded when given."""
    if args.policy == "tiny":
        from cudagym.baselines.ppo.tiny import TinyPolicy
        from cudagym.baselines.ppo.toy import tool_call_ids

        if args.tiny_vocab not in ("full", "toy-tools"):
            raise ConfigError(f"expected --tiny-vocab full or toy-tools, got {args.tiny_vocab!r}")
        out_ids = tool_call_ids(TinyPolicy().encode) if args.tiny_vocab == "toy-tools" else None
        policy: Any = TinyPolicy(seed=args.seed, output_ids=out_ids).to(args.device)
    else:
        if not Path(args.policy).is_dir():
            raise ConfigError(f"expected --policy tiny or a local Hugging Face model folder, got {args.policy!r}")
        from cudagym.baselines.ppo.hf import HFPolicy

        policy = HFPolicy.from_pretrained(args.policy, device=args.device)
    if args.init:
        if not Path(args.init).is_file():
            raise ConfigError(f"expected --init to be a policy.pt from an earlier stage, found no file {args.init}")
        try:
            state = torch.load(args.init, map_location=args.device, weights_only=True)
            policy.load_state_dict(state)
        except (EOFError, RuntimeError, KeyError, TypeError, AttributeError, pickle.UnpicklingError) as exc:
            raise ConfigError(f"expected --init to be a policy.pt of this policy from an earlier stage; "
                              f"{args.init} is not ({type(exc).__name__}: {str(exc)[:300]})") from None
    return policy


def _make_env(args: EnvArgs) -> Any:
    import cudagym.baselines.ppo.toy  # noqa: F401  (registers the toy id)

    import cudagym  # noqa: F401  (registers cudagym's ids)

    kwargs = parse_env_kwargs(args.env_kwargs)
    if args.env_id not in gym.registry:
        raise ConfigError(f"unknown env id {args.env_id!r}; expected a registered id such as CudaKernel-Bundled-v0")
    return lambda: gym.make(args.env_id, **kwargs)


def _collect_cfg(args: EnvArgs) -> CollectConfig:
    return CollectConfig(max_new_tokens=args.max_new_tokens, max_tokens=args.max_tokens, temperature=args.temperature)


def run_rft(args: RFTArgs) -> Path:
    """Filter the journal, fine-tune the actor, write ``policy.pt``."""
    if not args.journal:
        raise ConfigError("expected --journal PATH (a JSONL trajectory journal)")
    episodes = read_journal(args.journal)
    kept = rft_filter(episodes, min_reward=None if args.keep_all else args.min_reward, max_repeats=args.max_repeats)
    log.warning("rft: kept %d of %d episodes", len(kept), len(episodes))
    policy = build_policy(args)
    losses = sft(policy, kept, steps=args.steps, lr=args.lr, batch_size=args.batch_size, seed=args.seed)
    sink = MetricsLogger(args.out_dir)
    for step, loss in enumerate(losses):
        sink.log(step, {"rft/nll": loss})
    sink.close()
    return save_policy(policy, args.out_dir)


def run_critic(args: CriticArgs) -> Path:
    """Roll out the frozen actor, fit the critic to the returns, write ``policy.pt``."""
    policy = build_policy(args)
    make_env = _make_env(args)
    envs = [make_env() for _ in range(args.episodes)]
    gen = torch.Generator().manual_seed(args.seed)
    rollout = collect(policy, envs, _collect_cfg(args), seeds=[args.seed + i for i in range(args.episodes)],
                      generator=gen)
    for env in envs:
        env.close()
    losses = pretrain_critic(policy, rollout.episodes, steps=args.steps, lr=args.lr, batch_size=args.batch_size,
                             seed=args.seed)
    sink = MetricsLogger(args.out_dir)
    for step, loss in enumerate(losses):
        sink.log(step, {"critic/value_loss": loss})
    sink.close()
    return save_policy(policy, args.out_dir)


def run_ppo(args: PPOArgs) -> Path:
    """Agentic PPO; metrics and checkpoints in ``--out-dir``; writes ``policy.pt`` at the end."""
    policy = build_policy(args)
    cfg = replace(L.LossConfig(), clip_low=args.clip_low, clip_high=args.clip_high, dual_clip=args.dual_clip,
                  kl_coef=args.kl_coef, tis=args.tis, entropy_coef=args.entropy_coef)
    ref = build_policy(args).requires_grad_(False) if args.kl_coef else None
    trainer = PPOTrainer(policy, cfg, actor_lr=args.actor_lr, critic_lr=args.critic_lr, ref_policy=ref,
                         epochs=args.epochs, minibatches=args.minibatches, temperature=args.temperature)
    loop = LoopConfig(updates=args.updates, episodes_per_update=args.episodes_per_update, seed=args.seed,
                      out_dir=args.out_dir, checkpoint_every=args.checkpoint_every, journal=args.journal,
                      target_reward=args.target_reward)
    train(trainer, _make_env(args), loop, _collect_cfg(args), resume=args.resume)
    return save_policy(policy, args.out_dir)
