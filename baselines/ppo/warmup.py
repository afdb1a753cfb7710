"""CUDA Agent's warm-up before agentic PPO: rejection fine-tuning (RFT) and critic pretraining.

CUDA Agent found plain PPO collapsing (CUDA tokens near 1e-9 under the base model made importance ratios
explode); it first fine-tunes the actor on its own good trajectories, then fits the critic alone to the
returns of the frozen actor's rollouts.

- **RFT** reads a trajectory journal (JSONL, one episode per line: ``{"messages": [{"role", "content"}, ...],
  "reward": float}``; any agent can write one: scripted, chat, or earlier PPO rollouts via
  :func:`~cudagym.baselines.ppo.collect.write_journal`), keeps episodes with ``reward > min_reward``, drops
  those with an invalid tool call (``cudagym.toolcalls.parse_action``) or a loop (the same action
  ``max_repeats`` times in a row), and minimises the negative log-likelihood of the assistant tokens.
- **Critic pretraining** regresses the critic's values on action tokens to the returns (outcome on the last
  action token, gamma 1, lambda 1: the Monte-Carlo return; an episode the collector cut off bootstraps from
  the critic's own value after its last action token), with the actor untouched. CUDA Agent regresses to
  GAE targets with lambda 0.95 instead (``V + A``); with a critic that starts knowing nothing, the
  Monte-Carlo return is the target that does not lean on it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from cudagym.baselines.ppo import losses as L  # noqa: N812
from cudagym.baselines.ppo.collect import Episode
from cudagym.baselines.ppo.policy import LLMPolicy, pad_batch
from cudagym.baselines.ppo.trainer import critic_values, make_batch

from cudagym.errors import ConfigError
from cudagym.toolcalls import ActionError, parse_action

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JournalEpisode:
    """One episode of a trajectory journal."""

    messages: tuple[dict[str, str], ...]
    reward: float


def read_journal(path: str | Path) -> list[JournalEpisode]:
    """Read a JSONL trajectory journal; malformed lines are skipped with a warning.

    Raises:
        ConfigError: The file does not exist or holds no valid episode.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"expected a trajectory journal (JSONL) at {path}, found no file")
    episodes: list[JournalEpisode] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        episode, problem = _parse_line(line)
        if episode is None:
            log.warning("%s:%d: skipped: %s", path, number, problem)
        else:
            episodes.append(episode)
    if not episodes:
        raise ConfigError(f"expected episodes {{'messages': [...], 'reward': float}} in {path}, found none")
    return episodes


def _parse_line(line: str) -> tuple[JournalEpisode | None, str]:
    try:
        record: Any = json.loads(line)
    except ValueError as exc:
        return None, f"not JSON ({exc})"
    if not isinstance(record, dict) or not isinstance(record.get("messages"), list):
        return None, "expected an object with a 'messages' list"
    if not isinstance(record.get("reward"), (int, float)):
        return None, "expected a numeric 'reward'"
    messages = record["messages"]
    if not all(isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
               for m in messages):
        return None, "expected every message to have string 'role' and 'content'"
    clean = tuple({"role": m["role"], "content": m["content"]} for m in messages)
    return JournalEpisode(clean, float(record["reward"])), ""


def rft_filter(
    episodes: Iterable[JournalEpisode], *, min_reward: float | None = 0.0, max_repeats: int = 3
) -> list[JournalEpisode]:
    """Episodes fit for rejection fine-tuning (see the module docstring); ``min_reward=None`` keeps any reward."""
    kept = []
    for episode in episodes:
        actions = [m["content"] for m in episode.messages if m["role"] == "assistant"]
        if not actions or (min_reward is not None and episode.reward <= min_reward):
            continue
        if any(isinstance(parse_action(a), ActionError) for a in actions):
            continue  # an invalid tool call: do not teach it
        if _longest_run(actions) >= max_repeats:
            continue  # a loop: the same action again and again
        kept.append(episode)
    return kept


def _longest_run(items: Sequence[str]) -> int:
    best = run = 0
    for i, item in enumerate(items):
        run = run + 1 if i and item == items[i - 1] else 1
        best = max(best, run)
    return best


def _minibatches(n: int, size: int, steps: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
    for _ in range(steps):
        yield torch.randint(n, (min(size, n),), generator=generator)


def sft(
    policy: LLMPolicy,
    episodes: Sequence[JournalEpisode],
    *,
    steps: int,
    lr: float = 1e-5,
    batch_size: int = 8,
    seed: int = 0,
    max_grad_norm: float = 1.0,
) -> list[float]:
    """Minimise the NLL of the assistant tokens of ``episodes``; returns the loss of each step."""
    if not episodes:
        raise ConfigError("expected at least one episode to fine-tune on; the filter kept none")
    chats = [policy.chat.conversation(e.messages) for e in episodes]
    limit = getattr(policy, "max_tokens", None)  # a policy of fixed context says so (the tiny one: 512)
    longest = max(len(ids) for ids, _ in chats)
    if isinstance(limit, int) and longest > limit:
        raise ConfigError(f"expected episodes of at most {limit} tokens for this policy, got one of {longest} "
                          f"({sum(len(ids) > limit for ids, _ in chats)} of {len(chats)} are longer): fine-tune a "
                          "policy of a longer context (--policy <a Hugging Face model folder>)")
    params = list(policy.actor_parameters())
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    history = []
    for index in _minibatches(len(chats), batch_size, steps, torch.Generator().manual_seed(seed)):
        picked = [chats[i] for i in index.tolist()]
        tokens, attn = pad_batch([ids for ids, _ in picked], policy.chat.stop_id, left=False)
        mask, _ = pad_batch([m for _, m in picked], 0, left=False)
        tokens, attn, mask = tokens.to(policy.device), attn.to(policy.device), mask.float().to(policy.device)
        logp = policy.score(tokens, attn, mask).logprobs
        loss = -L.masked_mean(logp, mask)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        L.clip_gradients(params, max_grad_norm)
        opt.step()
        history.append(float(loss.detach()))
    return history


def pretrain_critic(
    policy: LLMPolicy,
    episodes: Sequence[Episode],
    *,
    steps: int,
    lr: float = 6e-6,
    batch_size: int = 8,
    seed: int = 0,
    gamma: float = 1.0,
    max_grad_norm: float = 1.0,
) -> list[float]:
    """Fit the critic alone to the Monte-Carlo returns of ``episodes``; returns each step's value loss."""
    if not episodes:
        raise ConfigError("expected rollouts to pretrain the critic on, got none")
    params = list(policy.critic_parameters())
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    history = []
    for index in _minibatches(len(episodes), batch_size, steps, torch.Generator().manual_seed(seed)):
        batch = make_batch([episodes[i] for i in index.tolist()], policy.chat.stop_id, policy.device)
        mask = batch.action_mask
        rewards = L.token_rewards(batch.outcome, mask)
        values, bootstrap = critic_values(policy, batch)  # a cut episode's return: its own current estimate
        _, returns = L.masked_gae(rewards, torch.zeros_like(values), mask, gamma, 1.0, last_values=bootstrap)
        loss = L.value_loss(values, values.detach(), returns, mask, 0.0)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        L.clip_gradients(params, max_grad_norm)
        opt.step()
        history.append(float(loss.detach()))
    return history
