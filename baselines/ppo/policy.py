"""The ``LLMPolicy`` protocol the PPO baseline trains, and the chat format its episodes are written in.

A policy turns text into token ids and back, samples actions (returning the sampler's log-prob of every
token it drew) and scores token sequences (per-token log-probs and entropies from the actor, per-token
values from the critic). Two adapters ship: :class:`~cudagym.baselines.ppo.tiny.TinyPolicy` (a small
transformer over cudagym's own BPE, for tests and CPU runs) and :class:`~cudagym.baselines.ppo.hf.HFPolicy`
(any Hugging Face causal LM with a value head). Your own stack (a vLLM server sampling, an FSDP trainer
scoring) plugs in by implementing these methods: the sampler's log-probs travel per token, so a sampler
that differs from the trainer is corrected in the update (``losses.sampler_correction``).

Per-token tensors are aligned to tokens: ``logp[b, t]`` scores token ``t`` given tokens ``< t`` (0 at
``t = 0``), ``values[b, t]`` is the critic's value of that prefix.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch

ROLES = ("system", "user", "assistant", "tool")


@dataclass(frozen=True)
class ChatFormat:
    r"""ChatML-style turns: ``start + "<role>\\n" + text + end``; tool results are their own ``tool`` turns.

    Attributes:
        encode: Text to ids (ordinary text only: markers inside ``text`` stay text, so an observation cannot
            forge a turn).
        start: Ids that open a turn (``<|im_start|>``).
        end: Ids that close a turn (``<|im_end|>`` and whatever follows it).
        stop_id: The id that ends generation of an assistant turn (the first of ``end``).
    """

    encode: Callable[[str], list[int]] = field(repr=False)
    start: tuple[int, ...]
    end: tuple[int, ...]

    @property
    def stop_id(self) -> int:
        """The id whose sampling ends an assistant turn."""
        return self.end[0]

    def header(self, role: str) -> list[int]:
        """The ids that open a ``role`` turn (for ``assistant``: the generation prompt)."""
        if role not in ROLES:
            raise ValueError(f"expected a role in {ROLES}, got {role!r}")
        return [*self.start, *self.encode(f"{role}\n")]

    def turn(self, role: str, text: str) -> list[int]:
        """One whole turn: header, text, end."""
        return [*self.header(role), *self.encode(text), *self.end]

    def conversation(self, messages: Sequence[Mapping[str, str]]) -> tuple[list[int], list[int]]:
        """Ids of a whole conversation and a mask that is 1 where a policy generates: assistant text and stop id.

        The same layout as a collected episode, so fine-tuning and PPO train on the same positions.
        """
        ids: list[int] = []
        mask: list[int] = []
        for message in messages:
            role, text = message["role"], message["content"]
            head, body, tail = self.header(role), [*self.encode(text), self.stop_id], list(self.end[1:])
            ids += head + body + tail
            mask += [0] * len(head) + [int(role == "assistant")] * len(body) + [0] * len(tail)
        return ids, mask


@dataclass(frozen=True)
class Generation:
    """One sampled assistant turn.

    Attributes:
        tokens: The sampled ids, the stop id included when sampling stopped on it.
        logprobs: The sampler's log-prob of each sampled id (the distribution it actually sampled from).
        stopped: True when the stop id was sampled; False when ``max_new_tokens`` ran out.
    """

    tokens: tuple[int, ...]
    logprobs: tuple[float, ...]
    stopped: bool


@dataclass(frozen=True)
class TokenScores:
    """The actor's scores of a batch of sequences, ``[B, T]`` each (0 where not computed)."""

    logprobs: torch.Tensor
    entropy: torch.Tensor | None = None


@runtime_checkable
class LLMPolicy(Protocol):
    """What the PPO baseline needs from a policy (see the module docstring)."""

    chat: ChatFormat

    @property
    def device(self) -> torch.device:
        """Where the weights are (batches are moved here)."""
        ...

    def encode(self, text: str) -> list[int]:
        """Text to ids (ordinary text, no special tokens)."""
        ...

    def decode(self, ids: Sequence[int]) -> str:
        """Ids to text (special ids dropped)."""
        ...

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        generator: torch.Generator | None = None,
    ) -> list[Generation]:
        """Sample one assistant turn per prompt, with the sampler's per-token log-probs."""
        ...

    def score(
        self,
        tokens: torch.Tensor,
        attention_mask: torch.Tensor,
        action_mask: torch.Tensor,
        *,
        temperature: float = 1.0,
        with_entropy: bool = False,
    ) -> TokenScores:
        """Actor log-probs (and entropies) of the tokens where ``action_mask`` is 1; 0 elsewhere."""
        ...

    def values(self, tokens: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Critic values ``[B, T]`` of each token's prefix."""
        ...

    def actor_parameters(self) -> Iterable[torch.nn.Parameter]:
        """Parameters the actor's optimiser updates."""
        ...

    def critic_parameters(self) -> Iterable[torch.nn.Parameter]:
        """Parameters the critic's optimiser updates (disjoint from the actor's)."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Weights, for checkpoints."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> Any:
        """Load weights saved by :meth:`state_dict`."""
        ...


def selected_scores(
    hidden: torch.Tensor,
    tokens: torch.Tensor,
    action_mask: torch.Tensor,
    head: Callable[[torch.Tensor], torch.Tensor],
    *,
    temperature: float,
    with_entropy: bool,
    column_of: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> TokenScores:
    """Log-probs (and entropies) of the action tokens from the hidden states before them.

    The LM head runs only on the hidden states at ``t - 1`` for action tokens ``t``: the head over a large
    vocabulary is most of a small model's cost, and observation tokens are never scored. ``column_of`` maps
    token ids to the head's columns when the head covers a sub-vocabulary.
    """
    target = action_mask.bool().clone()
    target[:, 0] = False  # token 0 has no prefix to predict it
    source = torch.roll(target, shifts=-1, dims=1)  # position t - 1 predicts token t
    logits = head(hidden[source]).float() / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    columns = tokens[target] if column_of is None else column_of(tokens[target])
    picked = logp_all.gather(-1, columns.unsqueeze(-1)).squeeze(-1)
    logprobs = torch.zeros(tokens.shape, dtype=picked.dtype, device=tokens.device)
    logprobs = logprobs.masked_scatter(target, picked)
    entropy = None
    if with_entropy:
        ent = -(logp_all.exp() * logp_all).sum(-1)
        entropy = torch.zeros(tokens.shape, dtype=ent.dtype, device=tokens.device).masked_scatter(target, ent)
    return TokenScores(logprobs, entropy)


def sample_next(
    logits: torch.Tensor, temperature: float, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one id per row from ``softmax(logits / temperature)``; returns the ids and their log-probs."""
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    # Gumbel-max: argmax(logp + Gumbel noise) is a draw from softmax(logp), and on CPU it is several times
    # faster than torch.multinomial over a 16k vocabulary
    uniform = torch.rand(logp.shape, generator=generator, device=generator.device if generator else logp.device)
    uniform = uniform.to(logp.device).clamp_(min=1e-20)  # drawn where the generator lives (a CPU one is fine)
    ids = (logp - torch.log(-torch.log(uniform))).argmax(dim=-1)
    return ids, logp.gather(-1, ids.unsqueeze(-1)).squeeze(-1)


def pad_batch(seqs: Sequence[Sequence[int]], pad_id: int, *, left: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad id lists to ``[B, T]`` ids and attention mask (left padding for generation, right for training)."""
    if not seqs:
        raise ValueError("expected at least one sequence, got none")
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, seq in enumerate(seqs):
        span = slice(width - len(seq), width) if left else slice(0, len(seq))
        ids[i, span] = torch.tensor(list(seq), dtype=torch.long)
        attn[i, span] = 1
    return ids, attn
