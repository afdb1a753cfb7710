"""The PPO training loop: collect, update, log, checkpoint; resumable, with a progress bar over updates.

Metrics go to a :class:`MetricsLogger` sink under namespaced keys (``rollout/*``, ``train/*``, ``perf/*``):
one JSON line per update in ``metrics.jsonl``, and TensorBoard scalars when ``tensorboard`` is installed.
A checkpoint (``checkpoint.pt``: policy weights, both optimisers, the update counter, the sampling RNG)
is written every ``checkpoint_every`` updates and at the end; ``resume=True`` continues from it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from cudagym.baselines.ppo.collect import CollectConfig, Rollout, collect, tier_counts, write_journal
from cudagym.baselines.ppo.trainer import PPOTrainer

from cudagym.errors import ConfigError

log = logging.getLogger(__name__)
CHECKPOINT = "checkpoint.pt"
METRICS = "metrics.jsonl"


class MetricsLogger:
    """A sink for namespaced metrics: JSONL always, TensorBoard when installed (``tensorboard=None``: auto)."""

    def __init__(self, out_dir: str | Path, *, tensorboard: bool | None = None) -> None:
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.out_dir / METRICS
        self._tb: Any = None
        if tensorboard is not False:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                if tensorboard:
                    raise
                log.info("tensorboard is not installed; metrics go to %s only", self.path)
            else:
                self._tb = SummaryWriter(str(self.out_dir / "tb"))

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        """Write one record; numeric values also go to TensorBoard (dicts as one scalar per key)."""
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"step": step, **metrics}, default=str) + "\n")
        if self._tb is None:
            return
        for key, value in metrics.items():
            if isinstance(value, dict):
                for sub, v in value.items():
                    self._tb.add_scalar(f"{key}/{sub}", float(v), step)
            elif isinstance(value, (int, float)):
                self._tb.add_scalar(key, float(value), step)

    def close(self) -> None:
        """Flush TensorBoard."""
        if self._tb is not None:
            self._tb.close()


def read_metrics(out_dir: str | Path) -> list[dict[str, Any]]:
    """The records a run logged, in order."""
    path = Path(out_dir) / METRICS
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def rollout_metrics(rollout: Rollout) -> dict[str, Any]:
    """``rollout/*`` and ``perf/tokens_per_s`` of one batch of episodes."""
    episodes = rollout.episodes
    return {
        "rollout/reward_mean": sum(e.reward for e in episodes) / len(episodes),
        "rollout/tier_counts": tier_counts(episodes),
        "rollout/action_tokens_mean": sum(e.action_tokens for e in episodes) / len(episodes),
        "rollout/truncated_frac": sum(e.truncated for e in episodes) / len(episodes),
        "perf/tokens_per_s": rollout.tokens_per_s,
    }


@dataclass(frozen=True)
class LoopConfig:
    """How long to train and where to write.

    Attributes:
        updates: PPO updates in all (a resumed run counts the ones already done).
        episodes_per_update: Episodes collected per update (one env each).
        seed: Seeds the envs' resets and the sampling RNG.
        out_dir: Metrics, checkpoints and the rollout journal go here.
        checkpoint_every: Updates between checkpoints (0: only at the end).
        journal: Also append every episode to ``rollouts.jsonl`` (input for ``cudagym train rft``).
        progress: Show a progress bar over updates.
        target_reward: Stop early once the mean ``rollout/reward_mean`` of the last ``target_window`` updates
            reaches this (SB3's ``StopTrainingOnRewardThreshold``); ``None`` runs every update.
        target_window: Updates averaged for ``target_reward``.
    """

    updates: int = 200
    episodes_per_update: int = 16
    seed: int = 0
    out_dir: str = "runs/ppo"
    checkpoint_every: int = 50
    journal: bool = False
    progress: bool = True
    target_reward: float | None = None
    target_window: int = 10

    def __post_init__(self) -> None:
        if self.target_window < 1:
            raise ConfigError(f"expected target_window >= 1, got {self.target_window}")


def save_checkpoint(path: Path, trainer: PPOTrainer, update: int, generator: torch.Generator) -> None:
    """Write weights, optimisers, the update counter and the RNG state (atomically: temp file, then rename)."""
    state = {"policy": trainer.policy.state_dict(), "actor_opt": trainer.actor_opt.state_dict(),
             "critic_opt": trainer.critic_opt.state_dict(), "update": update, "rng": generator.get_state()}
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    tmp.replace(path)


def load_checkpoint(path: Path, trainer: PPOTrainer, generator: torch.Generator) -> int:
    """Restore a checkpoint written by :func:`save_checkpoint`; returns the updates it had done."""
    state = torch.load(path, map_location=trainer.policy.device, weights_only=True)
    trainer.policy.load_state_dict(state["policy"])
    trainer.actor_opt.load_state_dict(state["actor_opt"])
    trainer.critic_opt.load_state_dict(state["critic_opt"])
    generator.set_state(state["rng"].cpu())
    return int(state["update"])


def train(
    trainer: PPOTrainer,
    make_env: Callable[[], gym.Env[Any, Any]],
    loop: LoopConfig,
    collect_cfg: CollectConfig,
    *,
    resume: bool = False,
    logger: MetricsLogger | None = None,
) -> list[dict[str, Any]]:
    """Run PPO updates until ``loop.updates`` are done (or ``loop.target_reward`` is reached).

    Returns:
        This call's metrics, one dict per update.
    """
    out = Path(loop.out_dir)
    sink = logger or MetricsLogger(out)
    generator = torch.Generator().manual_seed(loop.seed)
    start = load_checkpoint(out / CHECKPOINT, trainer, generator) if resume and (out / CHECKPOINT).exists() else 0
    envs = [make_env() for _ in range(loop.episodes_per_update)]
    history: list[dict[str, Any]] = []
    done = start
    try:
        for update in _progress(range(start, loop.updates), loop.progress, start, loop.updates):
            history.append(_one_update(trainer, envs, collect_cfg, loop, update, generator, sink))
            done = update + 1
            if loop.checkpoint_every and done % loop.checkpoint_every == 0:
                save_checkpoint(out / CHECKPOINT, trainer, done, generator)
            if _reached(history, loop):
                log.info("mean reward %.3f over the last %d updates reached the target; stopping after update %d",
                         _recent_reward(history, loop.target_window), loop.target_window, done)
                break
        save_checkpoint(out / CHECKPOINT, trainer, max(start, done), generator)
    finally:
        for env in envs:
            env.close()
        if logger is None:
            sink.close()
    return history


def _one_update(
    trainer: PPOTrainer,
    envs: Sequence[gym.Env[Any, Any]],
    collect_cfg: CollectConfig,
    loop: LoopConfig,
    update: int,
    generator: torch.Generator,
    sink: MetricsLogger,
) -> dict[str, Any]:
    t0 = time.perf_counter()
    seeds = [loop.seed * 1_000_003 + update * len(envs) + i for i in range(len(envs))]
    rollout = collect(trainer.policy, envs, collect_cfg, seeds=seeds, generator=generator)
    if loop.journal:
        write_journal(Path(loop.out_dir) / "rollouts.jsonl", rollout.episodes)
    metrics = {**rollout_metrics(rollout), **trainer.update(rollout.episodes, generator)}
    metrics["perf/update_s"] = time.perf_counter() - t0
    sink.log(update, metrics)
    return metrics


def _recent_reward(history: Sequence[dict[str, Any]], window: int) -> float:
    recent = [h["rollout/reward_mean"] for h in history[-window:]]
    return sum(recent) / len(recent)


def _reached(history: Sequence[dict[str, Any]], loop: LoopConfig) -> bool:
    """Whether the last ``target_window`` updates' mean reward reached ``target_reward``."""
    if loop.target_reward is None or len(history) < loop.target_window:
        return False
    return _recent_reward(history, loop.target_window) >= loop.target_reward


def _progress(items: range, enabled: bool, start: int, total: int) -> Any:
    if not enabled:
        return items
    try:
        from tqdm import tqdm
    except ImportError:
        return items
    return tqdm(items, initial=start, total=total, desc="ppo updates", unit="update")
