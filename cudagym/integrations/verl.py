"""verl: an ``AgentLoopBase`` subclass that plays cudagym episodes, its workspaces keyed by request id.

verl 0.10 dropped its ``interactions`` module and builds tools per call, so a tool cannot hold a
workspace across a trajectory. :class:`CudaKernelAgentLoop` owns the episode instead: each ``run`` opens
a session in :class:`KernelSessions` under its request id (the id verl's server manager also uses for
sticky routing), generates with verl's server manager, hands each reply to the env as the action (the
env parses the ``<tool_call>`` in it), appends the observation as a ``tool`` message through verl's
Continuous Token builder, and ends with the episode's reward as ``reward_score``. ``response_mask`` is 1 on
generated tokens and 0 on the env's.

Register it in the agent-loop config (``name: cudagym_kernel``, ``_target_:
cudagym.integrations.verl.CudaKernelAgentLoop``; the first access to the class also runs verl's
``register("cudagym_kernel")``); a dataset row names its task in ``extra_info["task"]`` (else
``extra_info["seed"]``).
Configure the env with :meth:`CudaKernelAgentLoop.configure` before the workers start, or with
``actor_rollout_ref.rollout.custom.cudagym`` (a mapping of :class:`~cudagym.env.CudaKernelEnv` arguments).

Needs verl (``pip install verl``); :class:`KernelSessions` and :func:`play_session` need only cudagym.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from uuid import uuid4

from cudagym import env_options
from cudagym.env import CudaKernelEnv
from cudagym.errors import ConfigError


@dataclass
class _Session:
    env: CudaKernelEnv
    done: bool = False
    reward: float = 0.0
    turns: int = 0


class KernelSessions:
    """Open cudagym episodes keyed by request id (thread-safe; one env per session, reused after it closes)."""

    def __init__(self, make_env: Callable[[], CudaKernelEnv], *, max_sessions: int = 1024) -> None:
        """Build the registry.

        Args:
            make_env: Builds a :class:`~cudagym.env.CudaKernelEnv` (give them all one judge).
            max_sessions: Most sessions open at once.

        Raises:
            ConfigError: ``max_sessions`` is not a positive int.
        """
        self._make_env = make_env
        self.max_sessions = env_options.positive_int("max_sessions", max_sessions)
        self._open: dict[str, _Session] = {}
        self._idle: list[CudaKernelEnv] = []
        self._lock = threading.Lock()

    def open(self, request_id: str, *, task: str | None = None, seed: int | None = None) -> tuple[str, list[Any]]:
        """Start an episode for ``request_id``; returns the prompt and the tool schemas.

        A reset that raises (an unknown task, a bad seed) opens no session: the id stays free and the env goes
        back to the idle ones.

        Raises:
            ConfigError: The id already has an open session, or ``max_sessions`` are open.
        """
        with self._lock:
            if request_id in self._open:
                raise ConfigError(f"expected a new request id, got {request_id!r} which already has a session")
            if len(self._open) >= self.max_sessions:
                raise ConfigError(f"expected at most {self.max_sessions} open sessions; finish some first")
            env = self._idle.pop() if self._idle else self._make_env()
            self._open[request_id] = _Session(env)
        try:
            prompt, _ = env.reset(seed=seed, options={"task": task} if task else None)
        except BaseException:
            with self._lock:
                del self._open[request_id]
                self._idle.append(env)
            raise
        return prompt, env.tool_schemas

    def step(self, request_id: str, action: str) -> tuple[str, bool]:
        """Run ``action`` in the request's episode; returns the observation and whether the episode ended."""
        session = self._get(request_id)
        if session.done:
            return "The episode is over.", True
        observation, reward, terminated, truncated, _ = session.env.step(action)
        session.turns += 1
        if terminated or truncated:
            session.done, session.reward = True, float(reward)
        return observation, session.done

    def finish(self, request_id: str) -> float:
        """Close the request's session; its reward (an episode that did not end is submitted first)."""
        session = self._get(request_id)
        if not session.done:
            self.step(request_id, '{"name": "submit", "arguments": {}}')
        with self._lock:
            del self._open[request_id]
            self._idle.append(session.env)
        return session.reward

    def __len__(self) -> int:
        return len(self._open)

    def close(self) -> None:
        """Close every env (open sessions are dropped)."""
        with self._lock:
            envs = [s.env for s in self._open.values()] + self._idle
            self._open, self._idle = {}, []
        for env in envs:
            env.close()

    def _get(self, request_id: str) -> _Session:
        with self._lock:
            if request_id not in self._open:
                raise ConfigError(f"expected an open session, got request id {request_id!r} (open() it first)")
            return self._open[request_id]


@dataclass(frozen=True)
class SessionResult:
    """What :func:`play_session` produced.

    Attributes:
        prompt_ids: Token ids of the prompt.
        response_ids: Token ids after it: generated and env tokens, interleaved.
        response_mask: 1 for generated tokens, 0 for the env's.
        reward: The episode's reward.
        assistant_turns: Replies generated.
        generate_s: Seconds in generation.
        tools_s: Seconds in the env (tool calls and the judge).
        tool_turns: Observations merged into the response as ``tool`` messages (none after the last reply: the
            response ends on the model's tokens).
    """

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    reward: float
    assistant_turns: int
    generate_s: float
    tools_s: float
    tool_turns: int = 0

    @property
    def num_turns(self) -> int:
        """The conversation's messages as verl's ``ToolAgentLoop`` counts them: user + assistant turns + 1.

        An episode of ``n`` replies that ends on ``submit`` is ``2n``: ``n`` replies, ``n - 1`` tool messages
        between them, and the prompt.
        """
        return self.tool_turns + self.assistant_turns + 1


async def play_session(
    loop: Any,
    sessions: KernelSessions,
    request_id: str,
    messages: list[dict[str, Any]],
    sampling_params: dict[str, Any],
    *,
    task: str | None,
    seed: int | None,
    response_length: int,
    max_turns: int,
) -> SessionResult:
    """One episode through an agent loop's server manager and Continuous Token helpers.

    Args:
        loop: The agent loop (``server_manager``, ``tokenizer``, ``ct_build_initial_tokens``,
            ``ct_merge_assistant_token``, ``ct_merge_context_msg``, as :class:`AgentLoopBase` has them).
        sessions: Where the episode lives.
        request_id: The session key, also verl's sticky-routing id.
        messages: The row's prompt messages (the task prompt is appended to the last user message).
        sampling_params: For ``server_manager.generate``.
        task: The task id (None: drawn from ``seed``).
        seed: Reset seed.
        response_length: Most response tokens (generated + env).
        max_turns: Most replies.
    """
    prompt, schemas = sessions.open(request_id, task=task, seed=seed)
    turns, tool_turns, timing = 0, 0, {"generate": 0.0, "tools": 0.0}
    mask: list[int] = []
    try:  # from here on the session is open: it is finished however this ends
        messages = _with_prompt(messages, prompt)
        ids = await loop.ct_build_initial_tokens(messages, tools=schemas)
        prompt_len = len(ids)
        while turns < max_turns and len(mask) < response_length:
            started = time.perf_counter()
            output = await loop.server_manager.generate(request_id=request_id, prompt_ids=ids,
                                                        sampling_params=sampling_params)
            timing["generate"] += time.perf_counter() - started
            turns += 1
            merged, mask, _ = await loop.ct_merge_assistant_token(ids, output.token_ids, mask, None)
            ids = merged.token_ids
            reply = loop.tokenizer.decode(output.token_ids, skip_special_tokens=True)
            started = time.perf_counter()
            observation, done = sessions.step(request_id, reply)
            timing["tools"] += time.perf_counter() - started
            # The response ends on the model's tokens, as verl's ToolAgentLoop ends it: verl puts reward_score
            # on the last response token, and its GAE drops a reward that lands on a token of mask 0.
            if done or len(mask) >= response_length or turns >= max_turns:
                break
            before = [*messages, {"role": "assistant", "content": reply}]
            messages = [*before, {"role": "tool", "content": observation}]
            merged, merged_mask, _ = await loop.ct_merge_context_msg(before, messages, ids, mask, None,
                                                                     tools=schemas)
            if len(merged_mask) >= response_length:  # a tool reply that fills the response is left out
                break
            ids, mask = merged.token_ids, merged_mask
            tool_turns += 1
    finally:
        started = time.perf_counter()
        reward = sessions.finish(request_id)
        timing["tools"] += time.perf_counter() - started
    response = ids[prompt_len:]
    return SessionResult(ids[:prompt_len], response[:response_length], mask[:response_length], reward, turns,
                         timing["generate"], timing["tools"], tool_turns)


def _with_prompt(messages: list[dict[str, Any]], prompt: str) -> list[dict[str, Any]]:
    out = [dict(m) for m in messages]
    if out and out[-1].get("role") == "user" and isinstance(out[-1].get("content"), str):
        out[-1]["content"] = f"{out[-1]['content']}\n\n{prompt}" if out[-1]["content"] else prompt
        return out
    return [*out, {"role": "user", "content": prompt}]


def _agent_loop_class() -> type:
    """Define (once) and register the verl subclass; needs verl."""
    try:
        from verl.experimental.agent_loop.agent_loop import (
            AgentLoopBase,
            AgentLoopMetrics,
            AgentLoopOutput,
            register,
        )
    except ImportError as exc:
        raise ImportError(f"CudaKernelAgentLoop needs verl (pip install verl): {exc}") from exc

    class CudaKernelAgentLoop(AgentLoopBase):
        """verl agent loop over cudagym episodes; the sessions (workspaces) live in :attr:`sessions`."""

        sessions: KernelSessions | None = None  # one registry per worker process, made on first use
        _env_kwargs: Mapping[str, Any] = {}
        _sessions_lock = threading.Lock()

        @classmethod
        def configure(cls, **env_kwargs: Any) -> None:
            """Set the :class:`~cudagym.env.CudaKernelEnv` arguments of the sessions made from now on."""
            with cls._sessions_lock:
                cls._env_kwargs = dict(env_kwargs)
                if cls.sessions is not None:
                    cls.sessions.close()
                cls.sessions = None

        def _sessions(self) -> KernelSessions:
            cls = type(self)
            with cls._sessions_lock:
                if cls.sessions is None:
                    custom = self.rollout_config.get("custom", None) or {}
                    kwargs = {**dict(custom.get("cudagym", None) or {}), **cls._env_kwargs}
                    cls.sessions = KernelSessions(lambda: CudaKernelEnv(**kwargs))
                return cls.sessions

        async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
            """Play one episode for the row in ``kwargs`` (``raw_prompt``, ``extra_info``)."""
            extra = kwargs.get("extra_info") or {}
            multi_turn = self.rollout_config.get("multi_turn", None) or {}
            result = await play_session(
                self, self._sessions(), f"cudagym-{uuid4().hex}", list(kwargs.get("raw_prompt") or []),
                sampling_params, task=extra.get("task"), seed=extra.get("seed"),
                response_length=int(self.rollout_config.response_length),
                max_turns=int(multi_turn.get("max_assistant_turns", None) or 200),
            )
            return AgentLoopOutput(
                prompt_ids=result.prompt_ids, response_ids=result.response_ids, response_mask=result.response_mask,
                reward_score=result.reward, num_turns=result.num_turns,
                metrics=AgentLoopMetrics(generate_sequences=result.generate_s, tool_calls=result.tools_s),
            )

    CudaKernelAgentLoop.__module__ = __name__  # so the registry's _target_ is this module's attribute
    CudaKernelAgentLoop.__qualname__ = "CudaKernelAgentLoop"
    register("cudagym_kernel")(CudaKernelAgentLoop)
    return CudaKernelAgentLoop


_CLASS: list[type] = []


def __getattr__(name: str) -> Any:
    # The verl subclass is made on first access (hydra's instantiate and `from ... import` both get here),
    # so KernelSessions and play_session import without verl.
    if name == "CudaKernelAgentLoop":
        if not _CLASS:
            _CLASS.append(_agent_loop_class())
        return _CLASS[0]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
