"""A tiny built-in transformer policy over cudagym's shipped BPE, for tests and CPU runs.

The tokenizer is ``cudagym.tokens.shipped_encoding()`` (``cudagym:code-bpe-16k``) plus two ids past its
vocabulary for ``<|im_start|>`` and ``<|im_end|>``; text is always encoded as ordinary text, so an
observation that contains those strings cannot open or close a turn. The actor and the critic are two
separate pre-norm transformers (as CUDA Agent trains a separate critic), so ``cudagym train critic`` can fit
the critic alone with the actor frozen.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F  # noqa: N812
from cudagym.baselines.ppo.policy import ChatFormat, Generation, TokenScores, pad_batch, sample_next, selected_scores
from torch import nn

from cudagym.tokens import shipped_encoding


@dataclass(frozen=True)
class TinyConfig:
    """Shape of the tiny transformer.

    Attributes:
        d_model: Width.
        n_layers: Transformer blocks.
        n_heads: Attention heads.
        max_len: Longest sequence (prompt, actions and observations), in tokens.
        rotary: Rotary position embeddings on queries and keys (attention then sees relative offsets);
            False: learned absolute position embeddings added to the tokens (GPT-2's).
    """

    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    max_len: int = 512
    rotary: bool = True


Rotary = tuple[torch.Tensor, torch.Tensor]
KV = tuple[torch.Tensor, torch.Tensor]


class _Block(nn.Module):
    """Pre-norm attention and MLP with residuals."""

    def __init__(self, cfg: TinyConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        width = 4 * cfg.d_model
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, width), nn.GELU(), nn.Linear(width, cfg.d_model))

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor, rotary: Rotary | None, past: KV | None = None
    ) -> tuple[torch.Tensor, KV]:
        """One block over new positions; returns their states and the keys and values of all positions.

        ``x`` ``[B, T, D]`` are the new positions, ``past`` the keys and values of the ones before them, and
        ``mask`` ``[B, 1, T, past + T]`` is True where attention is allowed.
        """
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        if rotary is not None:
            q, k = _rotate(q, *rotary), _rotate(k, *rotary)
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x)), (k, v)


def _rotary_angles(positions: torch.Tensor, head_dim: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos`` and ``sin`` ``[B, 1, T, head_dim / 2]`` of RoPE's angles ``position * base^(-2i / head_dim)``."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim)
    angles = positions[:, None, :, None].float() * inv_freq
    return angles.cos(), angles.sin()


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each (first half, second half) pair of ``x`` ``[B, H, T, head_dim]`` by the RoPE angles."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class _Trunk(nn.Module):
    """Token and position embeddings, blocks, final norm: ``[B, T]`` ids to ``[B, T, D]`` hidden states."""

    def __init__(self, vocab: int, cfg: TinyConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(vocab, cfg.d_model)
        self.pos = None if cfg.rotary else nn.Embedding(cfg.max_len, cfg.d_model)
        self.blocks = nn.ModuleList(_Block(cfg) for _ in range(cfg.n_layers))
        self.ln = nn.LayerNorm(cfg.d_model)
        for module in self.modules():  # GPT-2's init: small weights, so a fresh model samples near-uniformly
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, ids: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        """Hidden states; positions count real tokens only, so left and right padding give the same result."""
        return self.extend(ids, attn, None)[0]

    def extend(
        self, ids: torch.Tensor, attn: torch.Tensor, past: list[KV] | None
    ) -> tuple[torch.Tensor, list[KV]]:
        """Hidden states of ``ids`` ``[B, T]`` after the positions ``past`` holds (the KV cache of generation).

        ``attn`` covers the past and the new positions. Returns the hidden states and every layer's keys and
        values, for the next call; without ``past`` this is the full forward.
        """
        if attn.shape[1] > self.cfg.max_len:
            raise ValueError(f"expected at most max_len={self.cfg.max_len} tokens, got {attn.shape[1]}; "
                             "raise TinyConfig.max_len or shorten the episode")
        t, total = ids.shape[1], attn.shape[1]
        before = total - t
        positions = (attn.cumsum(dim=1) - 1).clamp(min=0)[:, before:]
        x = self.tok(ids)
        rotary = None
        if self.pos is None:
            rotary = _rotary_angles(positions, self.cfg.d_model // self.cfg.n_heads)
        else:
            x = x + self.pos(positions)
        causal = torch.ones(t, total, dtype=torch.bool, device=ids.device).tril(diagonal=before)
        mask = causal[None, None] & attn.bool()[:, None, None, :]
        own = torch.arange(t, device=ids.device)
        mask[..., own, before + own] = True  # padding positions attend to themselves
        present = []
        for i, block in enumerate(self.blocks):
            x, kv = block(x, mask, rotary, past[i] if past is not None else None)
            present.append(kv)
        return self.ln(x), present


class TinyPolicy(nn.Module):
    """An :class:`~cudagym.baselines.ppo.policy.LLMPolicy`: tiny actor and critic over the shipped BPE."""

    output_ids: torch.Tensor
    column: torch.Tensor

    def __init__(
        self, cfg: TinyConfig | None = None, *, seed: int = 0, output_ids: Sequence[int] | None = None
    ) -> None:
        super().__init__()
        self.cfg = cfg or TinyConfig()
        self.encoding = shipped_encoding()
        base = self.encoding.n_vocab
        self.im_start, self.im_end = base, base + 1
        self.vocab_size = base + 2
        # The output head covers the whole vocabulary, or only ``output_ids`` (and <|im_end|>): a CPU test
        # then learns in seconds instead of spending its time on a 16k-way softmax. Inputs use every id.
        out = sorted({*(output_ids if output_ids is not None else range(self.vocab_size)), self.im_end})
        if out[0] < 0 or out[-1] >= self.vocab_size:
            raise ValueError(f"expected output_ids within [0, {self.vocab_size}), got {out[0]}..{out[-1]}")
        column = torch.full((self.vocab_size,), -1, dtype=torch.long)
        column[torch.tensor(out)] = torch.arange(len(out))
        self.register_buffer("output_ids", torch.tensor(out), persistent=False)
        self.register_buffer("column", column, persistent=False)
        self.logprob_noise = 0.0
        """Std of Gaussian noise on the log-probs ``generate`` reports (sampling and scoring are untouched): a
        sampler whose numbers differ from the trainer's, as a vLLM or quantised engine's do, to reproduce
        CUDA Agent's collapse."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.actor = _Trunk(self.vocab_size, self.cfg)
            self.critic = _Trunk(self.vocab_size, self.cfg)
            self.value_head = nn.Linear(self.cfg.d_model, 1)
        # a fresh critic says 0 everywhere: with all-zero rewards the advantages are then 0, not whitened noise
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)
        self.chat = ChatFormat(self.encode, start=(self.im_start,), end=(self.im_end, *self.encode("\n")))

    @property
    def device(self) -> torch.device:
        """Where the weights are."""
        return self.actor.tok.weight.device

    @property
    def max_tokens(self) -> int:
        """The longest sequence it takes (prompt, actions and observations), in tokens."""
        return self.cfg.max_len

    def config_dict(self) -> dict[str, int]:
        """The shape, for checkpoints."""
        return asdict(self.cfg)

    def encode(self, text: str) -> list[int]:
        """Ordinary-text ids of the shipped BPE."""
        return self.encoding.encode_ordinary(text)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of the ids; the two marker ids are dropped."""
        return self.encoding.decode([i for i in ids if i < self.im_start])

    def _lm_head(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden @ self.actor.tok.weight[self.output_ids].T  # tied embeddings

    def _column_of(self, ids: torch.Tensor) -> torch.Tensor:
        columns = self.column[ids]
        if bool((columns < 0).any()):
            bad = sorted(set(ids[columns < 0].tolist()))[:5]
            raise ValueError(f"expected action tokens within the policy's output_ids, got ids {bad} "
                             f"({self.decode(bad)!r}); build TinyPolicy with output_ids covering them")
        return columns

    @torch.no_grad()
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        generator: torch.Generator | None = None,
    ) -> list[Generation]:
        """Sample until ``<|im_end|>`` or ``max_new_tokens``, one position per step on a KV cache; head on the last."""
        ids, attn = pad_batch(prompts, self.im_end, left=True)
        ids, attn = ids.to(self.device), attn.to(self.device)
        rows = len(prompts)
        out: list[list[int]] = [[] for _ in range(rows)]
        logps: list[list[float]] = [[] for _ in range(rows)]
        done = torch.zeros(rows, dtype=torch.bool)
        hidden, past = self.actor.extend(ids, attn, None)
        for _ in range(max_new_tokens):
            col, lp = sample_next(self._lm_head(hidden[:, -1]), temperature, generator)
            if self.logprob_noise:
                where = generator.device if generator else lp.device
                lp = lp + self.logprob_noise * torch.randn(lp.shape, generator=generator, device=where).to(lp.device)
            nxt = self.output_ids[col]
            for i in torch.nonzero(~done).flatten().tolist():
                out[i].append(int(nxt[i]))
                logps[i].append(float(lp[i]))
            done |= (nxt == self.im_end).cpu()
            if bool(done.all()):
                break
            attn = torch.cat([attn, (~done).long().to(self.device)[:, None]], dim=1)
            hidden, past = self.actor.extend(nxt[:, None], attn, past)  # one new position per row
        pairs = zip(out, logps, strict=True)
        return [Generation(tuple(o), tuple(lp), bool(o and o[-1] == self.im_end)) for o, lp in pairs]

    def score(
        self,
        tokens: torch.Tensor,
        attention_mask: torch.Tensor,
        action_mask: torch.Tensor,
        *,
        temperature: float = 1.0,
        with_entropy: bool = False,
    ) -> TokenScores:
        """Actor log-probs (and entropies) of the action tokens."""
        hidden = self.actor(tokens, attention_mask)
        return selected_scores(hidden, tokens, action_mask, self._lm_head, temperature=temperature,
                               with_entropy=with_entropy, column_of=self._column_of)

    def values(self, tokens: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Critic value of each token's prefix: the head on the hidden state at ``t - 1`` (0 at ``t = 0``)."""
        v = self.value_head(self.critic(tokens, attention_mask)).squeeze(-1)
        return F.pad(v[:, :-1], (1, 0))

    def actor_parameters(self) -> Iterable[nn.Parameter]:
        """The actor trunk (its embedding is the tied LM head)."""
        return self.actor.parameters()

    def critic_parameters(self) -> Iterable[nn.Parameter]:
        """The critic trunk and the value head."""
        return [*self.critic.parameters(), *self.value_head.parameters()]
