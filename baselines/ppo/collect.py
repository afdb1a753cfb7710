"""Rollouts: multi-turn episodes through Gymnasium envs, one token sequence per episode.

Each episode is written as a chat: the reset observation is the first ``user`` turn (after an optional
``system`` turn), every action an ``assistant`` turn the policy generated, every later observation a
``tool`` turn. The token sequence is that chat's ids; ``action_mask`` is 1 on generated ids only (the
assistant content and its end marker), so the prompt, the turn headers and the env's observations never
enter the losses. Episodes run in lock-step over a list of envs, one batched ``generate`` per turn.

This collector speaks only the plain Gymnasium API (``reset``/``step``, strings in and out), so it works
with ``CudaKernelEnv``, the toy env, or any text env.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from cudagym.baselines.ppo.policy import LLMPolicy


@dataclass
class Episode:
    """One episode as a token sequence and as a chat.

    Attributes:
        tokens: Prompt, action and observation ids, in order.
        action_mask: 1 on generated ids, 0 elsewhere.
        sampler_logprobs: The sampler's log-prob of each generated id; 0 elsewhere.
        reward: The episode's return (sum of the env's rewards).
        messages: The chat (``role``, ``content``), as in a trajectory journal.
        terminated: The env terminated it (e.g. ``submit``).
        truncated: The env or the token limit cut it off.
        info: The env's last ``info`` (JSON-serialisable values only).
    """

    tokens: list[int] = field(default_factory=list)
    action_mask: list[int] = field(default_factory=list)
    sampler_logprobs: list[float] = field(default_factory=list)
    reward: float = 0.0
    messages: list[dict[str, str]] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)

    def add(self, ids: Sequence[int], *, generated: Sequence[float] | None = None) -> None:
        """Append ids: generated ones with their sampler log-probs, context ones (``generated=None``) masked."""
        self.tokens += list(ids)
        if generated is None:
            self.action_mask += [0] * len(ids)
            self.sampler_logprobs += [0.0] * len(ids)
        else:
            self.action_mask += [1] * len(ids)
            self.sampler_logprobs += list(generated)

    @property
    def action_tokens(self) -> int:
        """How many ids the policy generated."""
        return sum(self.action_mask)

    def journal_line(self) -> str:
        """This episode as one JSON line of a trajectory journal (what ``cudagym train rft`` reads)."""
        record = {"messages": self.messages, "reward": self.reward, "terminated": self.terminated,
                  "truncated": self.truncated, "info": self.info}
        return json.dumps(record, default=str)


@dataclass(frozen=True)
class CollectConfig:
    """How episodes are sampled.

    Attributes:
        max_new_tokens: Longest assistant turn, in tokens.
        max_tokens: Longest episode (all ids); an episode that would exceed it is truncated.
        temperature: Sampling temperature (the trainer scores at the same temperature).
        system_prompt: An optional system turn before the reset observation.
    """

    max_new_tokens: int = 64
    max_tokens: int = 512
    temperature: float = 1.0
    system_prompt: str = ""


@dataclass(frozen=True)
class Rollout:
    """A batch of episodes and how long sampling them took."""

    episodes: list[Episode]
    seconds: float

    @property
    def tokens_per_s(self) -> float:
        """Generated ids per second of wall time (env time included)."""
        return sum(e.action_tokens for e in self.episodes) / max(self.seconds, 1e-9)


def collect(
    policy: LLMPolicy,
    envs: Sequence[gym.Env[Any, Any]],
    cfg: CollectConfig,
    *,
    seeds: Iterable[int | None] | None = None,
    generator: torch.Generator | None = None,
) -> Rollout:
    """Run one episode in each env, in lock-step; returns them in the order of ``envs``."""
    start = time.perf_counter()
    seed_list = list(seeds) if seeds is not None else [None] * len(envs)
    if len(seed_list) != len(envs):
        raise ValueError(f"expected one seed per env ({len(envs)}), got {len(seed_list)}")
    episodes = [_reset(policy, env, seed, cfg) for env, seed in zip(envs, seed_list, strict=True)]
    active = list(range(len(envs)))
    while active:
        prompts = [episodes[i].tokens + policy.chat.header("assistant") for i in active]
        gens = policy.generate(prompts, max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
                               generator=generator)
        still: list[int] = []
        for i, gen in zip(active, gens, strict=True):
            if _step(policy, envs[i], episodes[i], gen.tokens, gen.logprobs, gen.stopped, cfg):
                still.append(i)
        active = still
    return Rollout(episodes, time.perf_counter() - start)


def _reset(policy: LLMPolicy, env: gym.Env[Any, Any], seed: int | None, cfg: CollectConfig) -> Episode:
    obs, info = env.reset(seed=seed)
    episode = Episode(info=_jsonable(info))
    if cfg.system_prompt:
        episode.messages.append({"role": "system", "content": cfg.system_prompt})
        episode.add(policy.chat.turn("system", cfg.system_prompt))
    episode.messages.append({"role": "user", "content": str(obs)})
    episode.add(policy.chat.turn("user", str(obs)))
    return episode


def _step(
    policy: LLMPolicy,
    env: gym.Env[Any, Any],
    episode: Episode,
    tokens: Sequence[int],
    logprobs: Sequence[float],
    stopped: bool,
    cfg: CollectConfig,
) -> bool:
    """Append one assistant turn and the env's answer; returns whether the episode goes on."""
    chat = policy.chat
    action = policy.decode(tokens)
    episode.add(chat.header("assistant"))
    episode.add(tokens, generated=logprobs)
    episode.add(chat.end[1:] if stopped else chat.end)  # close the turn the sampler left open
    episode.messages.append({"role": "assistant", "content": action})
    obs, reward, terminated, truncated, info = env.step(action)
    episode.reward += float(reward)
    episode.info = _jsonable(info)
    episode.terminated, episode.truncated = bool(terminated), bool(truncated)
    if terminated or truncated:
        return False
    observation = chat.turn("tool", str(obs))
    if len(episode.tokens) + len(observation) + len(chat.header("assistant")) + cfg.max_new_tokens > cfg.max_tokens:
        episode.truncated = True  # the next turn would not fit: cut off here, keeping the reward so far
        return False
    episode.messages.append({"role": "tool", "content": str(obs)})
    episode.add(observation)
    return True


def _jsonable(info: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(info, default=str))


def tier_counts(episodes: Sequence[Episode]) -> dict[str, int]:
    """How many episodes ended with each return (cudagym's tiers are -1, 0, 1, 2, 3)."""
    counts: dict[str, int] = {}
    for episode in episodes:
        key = f"{episode.reward:g}"
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


def write_journal(path: str | Path, episodes: Iterable[Episode]) -> None:
    """Append episodes to a JSONL trajectory journal."""
    with open(path, "a", encoding="utf-8") as fh:
        for episode in episodes:
            fh.write(episode.journal_line() + "\n")


def episode_dict(episode: Episode) -> dict[str, Any]:
    """The whole episode as plain data (tokens included)."""
    return asdict(episode)
