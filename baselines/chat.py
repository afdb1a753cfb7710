"""ChatAgent: an LLM behind any OpenAI-compatible chat-completions endpoint (vLLM, SGLang, a hosted API).

The env's tool schemas (``env.unwrapped.tool_schemas``) go out as native function calling; the model's
first tool call becomes the action. When the endpoint rejects ``tools`` (some servers need a flag for tool
parsing) or the agent is built with ``tool_mode="text"``, no schemas are sent and the model's text is the
action: the env's prompt already explains the ``<tool_call>{...}</tool_call>`` form.

HTTP goes through `httpx <https://www.python-httpx.org>`_: a small, maintained client with per-phase
timeouts and a thread-safe connection pool that many agents (one per concurrent episode) share. The
``openai`` package was not used: its typed responses drop the non-standard fields local servers return,
and its own retry loop would hide the attempts this agent records; the wire format is a handful of JSON
fields, which this module reads directly.

Example:
    >>> from cudagym.baselines.chat import ChatAgent, ChatConfig
    >>> from cudagym.rollout import run_episodes
    >>> make_agent = ChatAgent.factory(ChatConfig(base_url="http://127.0.0.1:8000/v1", model="qwen"))
    >>> records = run_episodes(make_env, make_agent, 8, max_workers=8)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from cudagym.errors import ConfigError

try:
    import httpx
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError("cudagym.baselines.chat needs httpx: pip install 'cudagym[chat]' (or httpx)") from exc

from cudagym.rollout import AgentError
from cudagym.toolcalls import tool_schemas

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Variables read when an argument is not given: cudagym's own first, then the OpenAI SDK's.
BASE_URL_VARS = ("CUDAGYM_CHAT_BASE_URL", "OPENAI_BASE_URL")
MODEL_VARS = ("CUDAGYM_CHAT_MODEL", "OPENAI_MODEL")
API_KEY_VARS = ("CUDAGYM_CHAT_API_KEY", "OPENAI_API_KEY")
RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


def _from_env(value: str | None, names: Sequence[str], default: str | None = None) -> str | None:
    if value:
        return value
    return next((os.environ[n] for n in names if os.environ.get(n)), default)


@dataclass(frozen=True)
class ChatConfig:
    """Where the model is and how to call it.

    Attributes:
        base_url: The API root (``.../v1``); else ``CUDAGYM_CHAT_BASE_URL``, ``OPENAI_BASE_URL``, or OpenAI's.
        model: The model name; else ``CUDAGYM_CHAT_MODEL`` or ``OPENAI_MODEL`` (required).
        api_key: Bearer token; else ``CUDAGYM_CHAT_API_KEY`` or ``OPENAI_API_KEY`` (local servers need none).
        tool_mode: ``native`` (send the schemas), ``text`` (never send them), ``auto`` (native, falling
            back to text for the rest of the episode when the endpoint rejects ``tools`` with a 400/422).
        temperature: Sampling temperature (None: the server's default).
        max_tokens: Most completion tokens per reply (None: the server's default).
        timeout_s: Seconds per request (connect, read and write each).
        max_retries: Further attempts after a timeout, a connection error, a 429 or a 5xx.
        backoff_s: First wait before a retry; doubles each time, with jitter, up to ``max_backoff_s``.
        max_backoff_s: Longest wait between attempts (a ``Retry-After`` header is honoured up to this).
        system_prompt: A system message before the task prompt (None: none).
        extra_body: More JSON fields for every request (e.g. ``{"top_p": 0.95}``).
    """

    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None
    tool_mode: Literal["native", "text", "auto"] = "auto"
    temperature: float | None = None
    max_tokens: int | None = None
    timeout_s: float = 120.0
    max_retries: int = 3
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    system_prompt: str | None = None
    extra_body: Mapping[str, Any] = field(default_factory=dict)

    def resolved(self) -> ChatConfig:
        """This config with arguments filled from the environment.

        Raises:
            ConfigError: No model is named, or an option is out of range.
        """
        model = _from_env(self.model, MODEL_VARS)
        if not model:
            raise ConfigError(f"expected a model name: pass model= or set {' or '.join(MODEL_VARS)}")
        if self.tool_mode not in ("native", "text", "auto"):
            raise ConfigError(f"expected tool_mode native, text or auto, got {self.tool_mode!r}")
        if self.max_retries < 0 or self.timeout_s <= 0 or self.backoff_s < 0:
            raise ConfigError(f"expected max_retries >= 0, timeout_s > 0 and backoff_s >= 0, got "
                              f"{self.max_retries}, {self.timeout_s}, {self.backoff_s}")
        base = str(_from_env(self.base_url, BASE_URL_VARS, DEFAULT_BASE_URL)).rstrip("/")
        if not base.startswith(("http://", "https://")):
            raise ConfigError(f"expected base_url to start with http:// or https://, got {base!r}")
        return replace(self, base_url=base, model=model, api_key=_from_env(self.api_key, API_KEY_VARS, ""))


@dataclass(frozen=True)
class Exchange:
    """One chat-completions call, as the transcript keeps it.

    Attributes:
        message: The assistant message the model returned (the choice's ``message``).
        usage: The reply's ``usage`` (prompt, completion and total tokens; empty when the server sent none).
        latency_s: Seconds from the first attempt to the reply.
        attempts: Requests made (1 when the first succeeded).
        tool_mode: ``native`` or ``text``: whether the schemas were sent.
        finish_reason: The choice's ``finish_reason``.
    """

    message: Mapping[str, Any]
    usage: Mapping[str, int]
    latency_s: float
    attempts: int
    tool_mode: str
    finish_reason: str = ""


class ChatAgent:
    """An agent that asks a chat-completions endpoint for each action.

    The conversation is the env's prompt as the user message, then for each turn the assistant's reply and
    the observation: a ``tool`` message answering the native tool call, or a ``user`` message after a text
    reply. The full transcript (:attr:`messages`, :attr:`exchanges`) is kept until :meth:`reset`.
    """

    def __init__(
        self,
        config: ChatConfig | None = None,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        client: httpx.Client | None = None,
        sleep: Callable[[float], None] = time.sleep,
        **options: Any,
    ) -> None:
        """Build an agent.

        Args:
            config: Endpoint and sampling options; ``options`` override its fields.
            tools: Tool schemas for native calling (default: cudagym's, as ``env.unwrapped.tool_schemas``).
            client: An httpx client to share between agents (made here when None).
            sleep: How to wait between retries (tests pass a recorder).
            **options: :class:`ChatConfig` fields.
        """
        try:
            merged = replace(config or ChatConfig(), **options)
        except TypeError as exc:
            raise ConfigError(f"expected ChatConfig fields as options, got {sorted(options)}: {exc}") from exc
        self.config = merged.resolved()
        self.tools = [dict(t) for t in (tools if tools is not None else tool_schemas())]
        self._own_client = client is None
        self._client = client or make_client(self.config)
        self._sleep = sleep
        self.messages: list[dict[str, Any]] = []
        self.exchanges: list[Exchange] = []
        self._mode = self.config.tool_mode
        self._pending_call_id = ""

    @classmethod
    def factory(cls, config: ChatConfig | None = None, **kwargs: Any) -> Callable[[], ChatAgent]:
        """A zero-argument agent maker for :func:`cudagym.rollout.run_episodes`; the agents share one client."""
        resolved = (config or ChatConfig()).resolved()
        client = make_client(resolved)
        return lambda: cls(resolved, client=client, **kwargs)

    # -- the Agent protocol -------------------------------------------------------------------------

    def reset(self) -> None:
        """Start a new conversation (the transcript of the last one is dropped)."""
        self.messages, self.exchanges = [], []
        self._mode = self.config.tool_mode
        self._pending_call_id = ""

    def act(self, observation: str, info: Mapping[str, Any] | None = None) -> str:
        """Send the conversation with ``observation`` appended; the reply's tool call (or text) is the action.

        Raises:
            AgentError: The endpoint failed after every retry, or answered with something that is not a
                chat completion.
        """
        self._append_observation(observation)
        exchange = self._complete()
        self.exchanges.append(exchange)
        return self._take_action(exchange.message)

    def last_usage(self) -> Mapping[str, int]:
        """Model tokens of the last reply (:class:`cudagym.rollout.ReportsUsage`)."""
        return dict(self.exchanges[-1].usage) if self.exchanges else {}

    @property
    def usage(self) -> dict[str, int]:
        """Model tokens of the episode so far, summed over the replies."""
        total: dict[str, int] = {}
        for ex in self.exchanges:
            for key, value in ex.usage.items():
                total[key] = total.get(key, 0) + value
        return total

    def transcript(self) -> dict[str, Any]:
        """The episode's conversation as JSON-serialisable data: ``messages``, and per reply ``exchanges``."""
        return {"model": self.config.model, "base_url": self.config.base_url, "messages": list(self.messages),
                "exchanges": [asdict(ex) for ex in self.exchanges]}

    def close(self) -> None:
        """Close the HTTP client if this agent made it."""
        if self._own_client:
            self._client.close()

    # -- the conversation ---------------------------------------------------------------------------

    def _append_observation(self, observation: str) -> None:
        if not self.messages:
            if self.config.system_prompt:
                self.messages.append({"role": "system", "content": self.config.system_prompt})
            self.messages.append({"role": "user", "content": observation})
        elif self._pending_call_id:
            self.messages.append({"role": "tool", "tool_call_id": self._pending_call_id, "content": observation})
        else:
            self.messages.append({"role": "user", "content": observation})
        self._pending_call_id = ""

    def _take_action(self, message: Mapping[str, Any]) -> str:
        calls = message.get("tool_calls") or []
        content = message.get("content") or ""
        if calls and isinstance(calls[0], Mapping) and isinstance(calls[0].get("function"), Mapping):
            first = dict(calls[0])
            # only the first call runs (the env's rule); the transcript keeps just that one, so every
            # tool_call id in it is answered by the next tool message
            first.setdefault("id", f"call_{len(self.exchanges)}")
            first.setdefault("type", "function")
            self._pending_call_id = str(first["id"])
            self.messages.append({"role": "assistant", "content": content or None, "tool_calls": [first]})
            function = first["function"]
            return json.dumps({"name": function.get("name"), "arguments": function.get("arguments") or {}})
        self.messages.append({"role": "assistant", "content": content})
        return str(content)

    # -- HTTP ---------------------------------------------------------------------------------------

    def _complete(self) -> Exchange:
        started = time.perf_counter()
        attempts = 0
        while True:
            attempts += 1
            mode = "native" if self._mode in ("native", "auto") else "text"
            try:
                response = self._client.post("/chat/completions", json=self._body(mode))
            except httpx.HTTPError as exc:  # timeouts, refused connections, broken transfers
                failure = f"{type(exc).__name__}: {exc}"
                retry_after = None
            else:
                if response.status_code == 200:
                    return self._exchange(response, started, attempts, mode)
                failure = f"HTTP {response.status_code}: {response.text[:300]}"
                if response.status_code in (400, 422) and self._mode == "auto":
                    self._mode = "text"  # the server will not take tools: the env's prompt explains the text form
                    attempts -= 1
                    continue
                if response.status_code not in RETRY_STATUSES:
                    raise AgentError(f"{self.config.base_url}/chat/completions refused the request: {failure}")
                retry_after = _retry_after(response)
            if attempts > self.config.max_retries:
                raise AgentError(f"{self.config.base_url}/chat/completions failed {attempts} times; last: {failure}")
            self._sleep(self._backoff(attempts, retry_after))

    def _body(self, mode: str) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.config.model, "messages": self.messages, **self.config.extra_body}
        if mode == "native":
            body["tools"] = self.tools
            body["tool_choice"] = "auto"
        if self.config.temperature is not None:
            body["temperature"] = self.config.temperature
        if self.config.max_tokens is not None:
            body["max_tokens"] = self.config.max_tokens
        return body

    def _exchange(self, response: httpx.Response, started: float, attempts: int, mode: str) -> Exchange:
        try:
            data = response.json()
            choice = data["choices"][0]
            message = choice["message"]
            if not isinstance(message, dict):
                raise TypeError(f"message is {type(message).__name__}")
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise AgentError(f"expected a chat completion from {self.config.base_url}, got "
                             f"{response.text[:200]!r} ({type(exc).__name__}: {exc})") from exc
        raw_usage = data.get("usage") or {}
        usage = {k: int(v) for k, v in raw_usage.items() if isinstance(v, int) and not isinstance(v, bool)}
        return Exchange(message=message, usage=usage, latency_s=time.perf_counter() - started, attempts=attempts,
                        tool_mode=mode, finish_reason=str(choice.get("finish_reason") or ""))

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.config.max_backoff_s)
        wait = self.config.backoff_s * (2 ** (attempt - 1))
        return min(wait * (0.5 + random.random() / 2), self.config.max_backoff_s)  # jitter: 50-100%


def make_client(config: ChatConfig) -> httpx.Client:
    """An httpx client for ``config`` (resolved): base URL, bearer key, timeouts; safe to share across threads."""
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    return httpx.Client(base_url=str(config.base_url), headers=headers, timeout=httpx.Timeout(config.timeout_s),
                        limits=httpx.Limits(max_connections=256, max_keepalive_connections=64))


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return max(float(value), 0.0) if value is not None else None
    except ValueError:
        return None
