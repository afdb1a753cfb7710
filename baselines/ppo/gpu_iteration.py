"""One full PPO iteration on ``CudaKernel-Bundled-v0`` through the real judge, with a Hugging Face model.

For the H200: a LLaMA-architecture causal LM with random weights (no model is available offline) over
cudagym's shipped BPE, ``--episodes`` rollouts through the env and its local judge (each episode is cut off
after ``--max-turns`` tool calls and then judged on its files), one PPO update. Prints and writes (to
``--out``) the rollout and update throughput::

    python -m cudagym.baselines.ppo.gpu_iteration --out "$OUT"
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import gymnasium as gym
import torch
from cudagym.baselines.ppo.collect import CollectConfig, collect, tier_counts
from cudagym.baselines.ppo.hf import HFPolicy, ShippedTokenizer
from cudagym.baselines.ppo.losses import LossConfig
from cudagym.baselines.ppo.trainer import PPOTrainer

import cudagym  # noqa: F401  (registers the env ids)

log = logging.getLogger(__name__)


def main(argv: list[str] | None = None) -> dict[str, object]:
    """Run the iteration; returns (and prints) the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=4, help="rollout episodes (one env each)")
    parser.add_argument("--max-turns", type=int, default=3, help="tool calls per episode before truncation")
    parser.add_argument("--max-new-tokens", type=int, default=256, help="longest assistant turn")
    parser.add_argument("--hidden", type=int, default=1024, help="model width")
    parser.add_argument("--layers", type=int, default=16, help="transformer layers")
    parser.add_argument("--out", default="", help="folder for gpu_iteration.json")
    args = parser.parse_args(argv)
    if args.hidden < 128 or args.hidden % 128:
        parser.error(f"expected --hidden a multiple of 128 (64-wide heads, two per KV head), got {args.hidden}")
    import transformers

    device = "cuda" if torch.cuda.is_available() else "cpu"
    t0 = time.perf_counter()
    tokenizer = ShippedTokenizer()
    config = transformers.LlamaConfig(vocab_size=len(tokenizer), hidden_size=args.hidden,
                                      intermediate_size=args.hidden * 4, num_hidden_layers=args.layers,
                                      num_attention_heads=args.hidden // 64, num_key_value_heads=args.hidden // 128,
                                      max_position_embeddings=32768)
    policy = HFPolicy.from_config(config, tokenizer, device=device, seed=0)
    build_s = time.perf_counter() - t0
    envs = [gym.make("CudaKernel-Bundled-v0", max_turns=args.max_turns, max_episode_steps=args.max_turns,
                     token_counter="cudagym:code-bpe-16k") for _ in range(args.episodes)]
    cfg = CollectConfig(max_new_tokens=args.max_new_tokens, max_tokens=32768)
    rollout = collect(policy, envs, cfg, seeds=list(range(args.episodes)), generator=None)
    trainer = PPOTrainer(policy, LossConfig())
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    stats = trainer.update(rollout.episodes)
    if device == "cuda":
        torch.cuda.synchronize()
    update_s = time.perf_counter() - t0
    for env in envs:
        env.close()
    figures: dict[str, object] = {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "params_m": sum(p.numel() for p in policy.parameters()) / 1e6,
        "episodes": len(rollout.episodes),
        "rollout_s": rollout.seconds,
        "rollout_generated_tokens": sum(e.action_tokens for e in rollout.episodes),
        "rollout_tokens_per_s": rollout.tokens_per_s,
        "episode_tokens": [len(e.tokens) for e in rollout.episodes],
        "tier_counts": tier_counts(rollout.episodes),
        "evaluated": [e.info.get("evaluated") for e in rollout.episodes],
        "episode_end": [e.record.episode_end if e.record else "" for e in rollout.episodes],
        "verdicts": [e.record.last_eval.get("status", "") if e.record else "" for e in rollout.episodes],
        "env_s": [sum(t.env_time_s for t in e.record.turns) if e.record else 0.0 for e in rollout.episodes],
        "model_build_s": build_s,
        "update_s": update_s,
        "update_tokens_per_s": sum(len(e.tokens) for e in rollout.episodes) / update_s,
        **{k: v for k, v in stats.items() if isinstance(v, float)},
    }
    print(json.dumps(figures, indent=2, default=str))
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "gpu_iteration.json").write_text(json.dumps(figures, indent=2, default=str))
    return figures


if __name__ == "__main__":  # pragma: no cover
    main()
