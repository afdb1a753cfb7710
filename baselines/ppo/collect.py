"""Rollouts: multi-turn episodes through Gymnasium envs, one token sequence per episode.

Episodes are played by :func:`cudagym.rollout.run_episode` (one thread per env, the policy behind a
:class:`PolicyAgent`), so a PPO rollout is recorded like any other agent's
(:class:`~cudagym.rollout.EpisodeRecord`, kept in ``Episode.record``).
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
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from cudagym.baselines.ppo.policy import Generation, LLMPolicy

from cudagym.rollout import AgentError, EpisodeRecord, run_episode


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
        cut: The collector ended it before the env did (the token limit, or the rollout's step limit): its
            return is unknown, so the update bootstraps from the critic's value after its last action token
            (``losses.end_values``). An episode the env ended (submit, or its own turn or token limit, after
            which cudagym judges the files) is not cut: its reward is the outcome.
        info: The env's last ``info`` (JSON-serialisable values only).
        record: The episode as :func:`cudagym.rollout.run_episode` recorded it (every turn's tool, verdict,
            timings); ``None`` for an episode built by hand.
    """

    tokens: list[int] = field(default_factory=list)
    action_mask: list[int] = field(default_factory=list)
    sampler_logprobs: list[float] = field(default_factory=list)
    reward: float = 0.0
    messages: list[dict[str, str]] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False
    cut: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    record: EpisodeRecord | None = None

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
        max_tokens: Longest episode (all ids); an episode whose next turn (the observation, the assistant
            header, ``max_new_tokens`` and the turn's end ids) would exceed it is cut off before that turn.
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
    """Run one episode in each env, in lock-step; returns them in the order of ``envs``.

    Each env is played by :func:`cudagym.rollout.run_episode` in a thread of its own, with a
    :class:`PolicyAgent` that writes the token sequence; the agents' prompts meet in one batched ``generate``
    per turn (:class:`LockStep`), in the order of ``envs``, so a seeded ``generator`` gives the same episodes.
    """
    start = time.perf_counter()
    seed_list = list(seeds) if seeds is not None else [None] * len(envs)
    if len(seed_list) != len(envs):
        raise ValueError(f"expected one seed per env ({len(envs)}), got {len(seed_list)}")
    if not envs:
        raise ValueError("expected at least one env, got none")
    lockstep = LockStep(policy, cfg, generator, live=len(envs))
    agents = [PolicyAgent(policy, cfg, lockstep, i) for i in range(len(envs))]

    def play(i: int) -> EpisodeRecord:
        try:
            return run_episode(envs[i], agents[i], seed=seed_list[i], name="ppo")
        finally:
            lockstep.leave()

    with ThreadPoolExecutor(len(envs), thread_name_prefix="ppo-collect") as pool:
        records = list(pool.map(play, range(len(envs))))
    episodes = [agent.episode(record) for agent, record in zip(agents, records, strict=True)]
    return Rollout(episodes, time.perf_counter() - start)


class LockStep:
    """Gathers the next prompt of every live episode, then samples them all in one batched ``generate``.

    Each episode's thread calls :meth:`generate` and waits; the thread whose prompt completes the batch (or
    whose episode ends, :meth:`leave`, while the others wait) runs ``policy.generate`` on the prompts in
    episode order and hands every thread its row. A failure there is raised in every waiting thread.
    """

    def __init__(self, policy: LLMPolicy, cfg: CollectConfig, generator: torch.Generator | None, live: int) -> None:
        self.policy, self.cfg, self.generator = policy, cfg, generator
        self._live = live
        self._cond = threading.Condition()
        self._pending: dict[int, list[int]] = {}
        self._results: dict[int, Generation] = {}
        self._error: BaseException | None = None

    def generate(self, index: int, prompt: list[int]) -> Generation:
        """Episode ``index``'s next assistant turn, sampled with every other live episode's."""
        with self._cond:
            self._pending[index] = prompt
            self._run_if_complete()
            while index not in self._results and self._error is None:
                self._cond.wait()
            if index in self._results:
                return self._results.pop(index)
            raise AgentError(f"the batched generate failed: {self._error!r}") from self._error

    def leave(self) -> None:
        """An episode ended: the batch no longer waits for it."""
        with self._cond:
            self._live -= 1
            self._run_if_complete()

    def _run_if_complete(self) -> None:
        if not self._pending or len(self._pending) < self._live or self._error is not None:
            return
        order = sorted(self._pending)
        prompts = [self._pending.pop(i) for i in order]
        try:
            gens = self.policy.generate(prompts, max_new_tokens=self.cfg.max_new_tokens,
                                        temperature=self.cfg.temperature, generator=self.generator)
        except BaseException as exc:
            self._error = exc
            raise
        finally:
            self._cond.notify_all()
        self._results.update(zip(order, gens, strict=True))


class PolicyAgent:
    """A :class:`cudagym.rollout.Agent` that samples from an ``LLMPolicy`` and writes the episode's tokens.

    The first observation becomes the ``user`` turn (after the optional ``system`` turn), later ones ``tool``
    turns; each action is an ``assistant`` turn whose ids are masked in (``Episode.add``). When the next turn
    would not fit in ``max_tokens`` it raises :class:`~cudagym.rollout.AgentError`, which ends the episode
    there (``cut``: the update bootstraps its return from the critic).
    """

    def __init__(self, policy: LLMPolicy, cfg: CollectConfig, lockstep: LockStep, index: int) -> None:
        self.policy, self.cfg, self.lockstep, self.index = policy, cfg, lockstep, index
        self._episode = Episode()

    def reset(self) -> None:
        """Start an empty token sequence."""
        self._episode = Episode()

    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        """Append the observation's turn, sample the assistant turn, append it; returns its text."""
        chat, episode = self.policy.chat, self._episode
        if not episode.messages:
            if self.cfg.system_prompt:
                episode.messages.append({"role": "system", "content": self.cfg.system_prompt})
                episode.add(chat.turn("system", self.cfg.system_prompt))
            role = "user"
        else:
            role = "tool"
        turn = chat.turn(role, str(observation))
        # the sampled ids (the stop id among them when sampled) and the end ids that close the turn after them
        reply = self.cfg.max_new_tokens + len(chat.end)
        needed = len(episode.tokens) + len(turn) + len(chat.header("assistant")) + reply
        if needed > self.cfg.max_tokens:
            if role == "tool":  # the next turn would not fit: cut off here (Episode.cut)
                raise AgentError(f"token budget: the next turn would pass max_tokens={self.cfg.max_tokens}")
            raise ValueError(f"expected the prompt and one turn to fit in max_tokens={self.cfg.max_tokens}, "
                             f"got a prompt of {len(turn)} tokens; raise CollectConfig.max_tokens")
        episode.messages.append({"role": role, "content": str(observation)})
        episode.add(turn)
        episode.add(chat.header("assistant"))
        gen = self.lockstep.generate(self.index, episode.tokens)
        episode.add(gen.tokens, generated=gen.logprobs)
        episode.add(chat.end[1:] if gen.stopped else chat.end)  # close the turn the sampler left open
        action = self.policy.decode(gen.tokens)
        episode.messages.append({"role": "assistant", "content": action})
        return action

    def episode(self, record: EpisodeRecord) -> Episode:
        """The finished episode: the tokens written here, the return and ending from ``record``."""
        episode = self._episode
        episode.reward = sum(t.reward for t in record.turns)
        episode.terminated = record.terminated
        episode.cut = record.episode_end in ("agent_error", "max_steps")  # ended here, not by the env
        episode.truncated = record.truncated or episode.cut
        episode.info = _jsonable(dict(record.turns[-1].info) if record.turns else {})
        episode.record = record
        return episode


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
