r"""An :class:`~cudagym.baselines.ppo.policy.LLMPolicy` over any Hugging Face causal LM, with a value head.

The actor is ``AutoModelForCausalLM`` loaded from a local path (or built from a config, for random
weights); the critic is a second copy of the backbone (``critic_path``, default the same path) with a
linear value head, as CUDA Agent trains a separate critic. ``transformers`` is imported only here, when an
``HFPolicy`` is built (``pip install cudagym[train]``).

The chat format is ChatML (``<|im_start|>role\\n ... <|im_end|>\\n``): the markers are single ids when the
tokenizer has them (Qwen and other ChatML models), otherwise ``<|im_start|>`` is encoded as text and the
tokenizer's EOS ends a turn.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
from cudagym.baselines.ppo.policy import ChatFormat, Generation, TokenScores, pad_batch, sample_next, selected_scores
from torch import nn

from cudagym.errors import ConfigError


def _transformers() -> Any:
    try:
        import transformers
    except ModuleNotFoundError as exc:
        raise ConfigError("expected the transformers package for HFPolicy; pip install 'cudagym[train]'") from exc
    return transformers


class HFPolicy(nn.Module):
    """A Hugging Face causal LM as actor, a copy of its backbone plus a value head as critic.

    Args:
        actor: The causal LM.
        critic: The critic's backbone (``AutoModel``: returns hidden states).
        tokenizer: The tokenizer.
    """

    def __init__(self, actor: Any, critic: Any, tokenizer: Any) -> None:
        super().__init__()
        self.actor, self.critic, self.tokenizer = actor, critic, tokenizer
        for module in (*actor.modules(), *critic.modules()):
            if isinstance(module, nn.Dropout):  # the ratio needs one function at sampling and at scoring
                module.p = 0.0
        hidden = critic.config.hidden_size
        self.value_head = nn.Linear(hidden, 1).to(next(critic.parameters()).device)
        nn.init.normal_(self.value_head.weight, std=1.0 / (hidden + 1) ** 0.5)
        nn.init.zeros_(self.value_head.bias)
        self.chat = _chat_format(tokenizer, self.encode)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.chat.stop_id

    @classmethod
    def from_pretrained(
        cls, path: str, *, critic_path: str | None = None, device: str = "cpu", dtype: str = "float32"
    ) -> HFPolicy:
        """Load actor, critic backbone and tokenizer from local paths (no download: ``local_files_only``)."""
        tf = _transformers()
        kw: dict[str, Any] = {"local_files_only": True, "dtype": getattr(torch, dtype)}
        actor = tf.AutoModelForCausalLM.from_pretrained(path, **kw).to(device)
        critic = tf.AutoModel.from_pretrained(critic_path or path, **kw).to(device)
        tokenizer = tf.AutoTokenizer.from_pretrained(path, local_files_only=True)
        return cls(actor, critic, tokenizer)

    @classmethod
    def from_config(cls, config: Any, tokenizer: Any, *, device: str = "cpu", seed: int = 0) -> HFPolicy:
        """Randomly initialised actor and critic of a ``transformers`` config (tests, throughput runs)."""
        tf = _transformers()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            actor = tf.AutoModelForCausalLM.from_config(config).to(device)
            critic = tf.AutoModel.from_config(config).to(device)
        return cls(actor, critic, tokenizer)

    @property
    def device(self) -> torch.device:
        """Where the actor's weights are."""
        return next(self.actor.parameters()).device

    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` without special tokens (markers in the text are split as plain text)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True))

    def decode(self, ids: Sequence[int]) -> str:
        """Text of the ids, special ids dropped."""
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=True))

    @torch.no_grad()
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        generator: torch.Generator | None = None,
    ) -> list[Generation]:
        """Sample with a KV cache until the stop id; log-probs of the distribution actually sampled."""
        ids, attn = pad_batch(prompts, self.pad_id, left=True)
        ids, attn = ids.to(self.device), attn.to(self.device)
        positions = (attn.cumsum(1) - 1).clamp(min=0)
        rows = len(prompts)
        out: list[list[int]] = [[] for _ in range(rows)]
        logps: list[list[float]] = [[] for _ in range(rows)]
        done = torch.zeros(rows, dtype=torch.bool, device=self.device)
        step = self.actor(input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=True)
        for _ in range(max_new_tokens):
            nxt, lp = sample_next(step.logits[:, -1], temperature, generator)
            for i in torch.nonzero(~done).flatten().tolist():
                out[i].append(int(nxt[i]))
                logps[i].append(float(lp[i]))
            done |= nxt == self.chat.stop_id
            if bool(done.all()):
                break
            attn = torch.cat([attn, (~done).long()[:, None]], dim=1)
            positions = positions[:, -1:] + 1
            step = self.actor(input_ids=nxt[:, None], attention_mask=attn, position_ids=positions,
                              past_key_values=step.past_key_values, use_cache=True)
        stop = self.chat.stop_id
        return [Generation(tuple(o), tuple(lp), bool(o and o[-1] == stop)) for o, lp in zip(out, logps, strict=True)]

    def score(
        self,
        tokens: torch.Tensor,
        attention_mask: torch.Tensor,
        action_mask: torch.Tensor,
        *,
        temperature: float = 1.0,
        with_entropy: bool = False,
    ) -> TokenScores:
        """Actor log-probs of the action tokens; the LM head runs on their positions only."""
        positions = (attention_mask.cumsum(1) - 1).clamp(min=0)
        hidden = self.actor.base_model(input_ids=tokens, attention_mask=attention_mask,
                                       position_ids=positions).last_hidden_state
        head = self.actor.get_output_embeddings()
        return selected_scores(hidden, tokens, action_mask, head, temperature=temperature, with_entropy=with_entropy)

    def values(self, tokens: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Critic value of each token's prefix (the head on the hidden state at ``t - 1``; 0 at ``t = 0``)."""
        positions = (attention_mask.cumsum(1) - 1).clamp(min=0)
        hidden = self.critic(input_ids=tokens, attention_mask=attention_mask, position_ids=positions).last_hidden_state
        v = self.value_head(hidden.to(self.value_head.weight.dtype)).squeeze(-1).float()
        return nn.functional.pad(v[:, :-1], (1, 0))

    def actor_parameters(self) -> Iterable[nn.Parameter]:
        """The causal LM's parameters."""
        return self.actor.parameters()

    def critic_parameters(self) -> Iterable[nn.Parameter]:
        """The critic backbone and the value head."""
        return [*self.critic.parameters(), *self.value_head.parameters()]


def _chat_format(tokenizer: Any, encode: Any) -> ChatFormat:
    vocab = tokenizer.get_vocab()
    if "<|im_start|>" in vocab and "<|im_end|>" in vocab:
        return ChatFormat(encode, start=(vocab["<|im_start|>"],), end=(vocab["<|im_end|>"], *encode("\n")))
    if tokenizer.eos_token_id is None:
        raise ConfigError("expected the tokenizer to have <|im_start|>/<|im_end|> or an EOS token, got neither")
    return ChatFormat(encode, start=tuple(encode("<|im_start|>")), end=(tokenizer.eos_token_id, *encode("\n")))


class ShippedTokenizer:
    """cudagym's shipped BPE behind the slice of the Hugging Face tokenizer API that :class:`HFPolicy` uses.

    For a Hugging Face architecture with random weights (throughput runs, tests) where no tokenizer files
    are available offline: ids ``0..16383`` are the BPE's, then ``<|im_start|>``, ``<|im_end|>``.
    """

    def __init__(self) -> None:
        from cudagym.tokens import shipped_encoding

        self.encoding = shipped_encoding()
        base = self.encoding.n_vocab
        self._specials = {"<|im_start|>": base, "<|im_end|>": base + 1}
        self.eos_token_id = base + 1
        self.pad_token_id = base + 1

    def __len__(self) -> int:
        return self.encoding.n_vocab + len(self._specials)

    def get_vocab(self) -> dict[str, int]:
        """The special tokens only (all :class:`HFPolicy` looks up)."""
        return dict(self._specials)

    def encode(self, text: str, **_: Any) -> list[int]:
        """Ordinary-text ids (markers in the text stay text)."""
        return self.encoding.encode_ordinary(text)

    def decode(self, ids: Sequence[int], **_: Any) -> str:
        """Text of the ids, special ids dropped."""
        return self.encoding.decode([i for i in ids if i < self.encoding.n_vocab])
