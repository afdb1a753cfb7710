"""An episode as chat messages plus the tool schemas, and as token ids with a mask of the env's tokens.

:func:`chat_view` turns an :class:`~cudagym.rollout.EpisodeRecord` into the messages a chat model saw and
wrote: the prompt as the user message; each action as an assistant message (a native ``tool_calls`` entry
when the action was a bare JSON call, its text otherwise); each observation as the ``tool`` message
answering that call, or as a ``user`` message after a text action.

:func:`segments` and :func:`tokenize` give token-level trainers (PPO over tokens, GRPO with tool masks)
exact masks: each piece of text is tokenized on its own and the ids concatenated, so every token belongs to
exactly one piece: the agent's actions (``action_mask`` 1) or the environment's prompt and observations
(``observation_mask`` 1). A :class:`ChatTemplate` wraps pieces in role markers (ChatML is provided); the
markers that open a turn count as the environment's, the marker that closes an assistant turn as the
agent's (the model has to learn to emit it: its stop id), and what follows that marker (ChatML's newline) as
the environment's again, as the PPO and RFT trainers of ``baselines/ppo`` lay a turn out.

Example:
    >>> from cudagym.messages import chat_view, tokenize, segments, CHATML
    >>> view = chat_view(record)  # doctest: +SKIP
    >>> tokens = tokenize(segments(record, CHATML), tiktoken.get_encoding("o200k_base"))  # doctest: +SKIP
    >>> sum(tokens.observation_mask), sum(tokens.action_mask)  # doctest: +SKIP
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from cudagym.errors import ConfigError
from cudagym.rollout import EpisodeRecord
from cudagym.toolcalls import ToolCall, parse_action, tool_schemas


@dataclass(frozen=True)
class ChatView:
    """An episode as chat messages.

    Attributes:
        messages: OpenAI-style messages (``role``, ``content``, ``tool_calls``, ``tool_call_id``).
        tools: The tool schemas (OpenAI function-calling format) the episode offered.
        reward: The episode's reward.
        task_id: The task.
    """

    messages: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...]
    reward: float
    task_id: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (``messages``, ``tools``, ``reward``, ``task_id``)."""
        return {**asdict(self), "messages": list(self.messages), "tools": list(self.tools)}


def chat_view(record: EpisodeRecord, *, system: str | None = None, native_tools: bool = True) -> ChatView:
    """The episode as chat messages.

    Args:
        record: A played episode.
        system: A system message to put first (None: none).
        native_tools: Bare JSON actions become ``tool_calls`` (answered by ``tool`` messages); when False
            every action is assistant text and every observation a user message.
    """
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": record.prompt})
    for turn in record.turns:
        call = parse_action(turn.action)
        if native_tools and isinstance(call, ToolCall) and call.form == "json":
            call_id = f"call_{turn.turn}"
            function = {"name": call.name, "arguments": json.dumps(dict(call.arguments))}
            messages.append({"role": "assistant", "content": None,
                             "tool_calls": [{"id": call_id, "type": "function", "function": function}]})
            messages.append({"role": "tool", "tool_call_id": call_id, "content": turn.observation})
        else:
            messages.append({"role": "assistant", "content": turn.action})
            messages.append({"role": "user", "content": turn.observation})
    return ChatView(tuple(messages), tuple(tool_schemas()), record.reward, record.task_id)


@dataclass(frozen=True)
class Segment:
    """A piece of an episode's text.

    Attributes:
        text: The text.
        trainable: True for what the agent wrote (actions), False for what the environment wrote.
        role: ``user`` (the prompt), ``assistant`` (an action), ``tool`` (an observation) or ``template``
            (a role marker of the chat template).
        turn: The turn it belongs to (0 for the prompt).
    """

    text: str
    trainable: bool
    role: str
    turn: int


@dataclass(frozen=True)
class ChatTemplate:
    """Role markers around each piece of text.

    Attributes:
        opening: Role -> text before a message of that role (``{role}`` is filled in).
        closing: The marker that ends every message (ChatML's ``<|im_end|>``); after an assistant message it is
            the agent's, the stop token a model must learn to emit.
        separator: Text after the closing marker (ChatML's newline); never the agent's: generation stops at the
            closing marker, and the environment writes what follows it.
        observation_role: The role observations are written as (``tool`` or ``user``).
    """

    opening: Mapping[str, str] = field(default_factory=dict)
    closing: str = ""
    separator: str = ""
    observation_role: str = "tool"

    def open(self, role: str) -> str:
        """The text before a message of ``role``."""
        return self.opening.get(role, self.opening.get("*", "")).format(role=role)


PLAIN = ChatTemplate()
CHATML = ChatTemplate(opening={"*": "<|im_start|>{role}\n"}, closing="<|im_end|>", separator="\n")


def segments(record: EpisodeRecord, template: ChatTemplate = PLAIN) -> list[Segment]:
    """The episode's text in order, each piece marked as the agent's or the environment's.

    Args:
        record: A played episode.
        template: Role markers (:data:`PLAIN`: none; :data:`CHATML`).
    """
    out: list[Segment] = []

    def add(role: str, text: str, turn: int) -> None:
        trainable = role == "assistant"
        opening = template.open(role)
        if opening:
            out.append(Segment(opening, False, "template", turn))
        out.append(Segment(text, trainable, role, turn))
        if template.closing:
            out.append(Segment(template.closing, trainable, "template", turn))
        if template.separator:
            out.append(Segment(template.separator, False, "template", turn))

    add("user", record.prompt, 0)
    for turn in record.turns:
        add("assistant", turn.action, turn.turn)
        add(template.observation_role, turn.observation, turn.turn)
    return out


@dataclass(frozen=True)
class TokenizedEpisode:
    """An episode's token ids with per-token masks.

    Attributes:
        ids: Token ids of every segment, concatenated.
        action_mask: 1 where the token is the agent's (train on these), else 0.
        observation_mask: 1 where the token is the environment's (the complement of ``action_mask``).
        turn: The turn of each token (0 for the prompt).
    """

    ids: tuple[int, ...]
    action_mask: tuple[int, ...]
    observation_mask: tuple[int, ...]
    turn: tuple[int, ...]


Encoder = Callable[[str], Sequence[int]]


def tokenize(pieces: Sequence[Segment], tokenizer: Any) -> TokenizedEpisode:
    """Tokenize each segment on its own and concatenate, with the masks.

    Args:
        pieces: From :func:`segments`.
        tokenizer: A ``tiktoken.Encoding``, a Hugging Face tokenizer (special tokens are not added, and special-
            token text in actions and observations stays text), an object with ``encode(str) -> ids``, or a
            callable ``str -> ids``.

    Raises:
        ConfigError: ``tokenizer`` is none of these, or returns something other than ids.
    """
    encode_marker = _encoder(tokenizer)
    encode = _encoder(tokenizer, content=True)
    ids: list[int] = []
    action: list[int] = []
    turns: list[int] = []
    for piece in pieces:
        if not piece.text:
            continue
        got = encode_marker(piece.text) if piece.role == "template" else encode(piece.text)
        if not all(isinstance(i, int) for i in got):
            raise ConfigError(f"expected the tokenizer to return token ids (ints), got {list(got)[:5]!r}")
        ids.extend(got)
        action.extend([int(piece.trainable)] * len(got))
        turns.extend([piece.turn] * len(got))
    return TokenizedEpisode(tuple(ids), tuple(action), tuple(1 - a for a in action), tuple(turns))


def _encoder(tokenizer: Any, *, content: bool = False) -> Encoder:
    """The encode function for a template's role markers, or (``content``) for an action's or observation's text.

    Content is always ordinary text: a Hugging Face tokenizer would otherwise read ``<|im_start|>`` written in a
    file the agent made, or in its action, as the chat template's own token, forging turns in the transcript.
    """
    encode = getattr(tokenizer, "encode", None)
    if callable(encode):
        if type(tokenizer).__module__.startswith("tiktoken"):
            return lambda text: encode(text, disallowed_special=())  # special-token text stays ordinary text
        params: Mapping[str, inspect.Parameter] = {}
        try:
            params = inspect.signature(encode).parameters
        except (TypeError, ValueError):  # some builtins have no introspectable signature
            pass
        if "add_special_tokens" in params and content and (
                "split_special_tokens" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())):
            return lambda text: encode(text, add_special_tokens=False, split_special_tokens=True)
        if "add_special_tokens" in params:
            return lambda text: encode(text, add_special_tokens=False)
        return encode
    if callable(tokenizer):
        return tokenizer
    raise ConfigError(f"expected a tokenizer (tiktoken Encoding, Hugging Face tokenizer or a callable "
                      f"str -> ids), got {type(tokenizer).__name__}")
