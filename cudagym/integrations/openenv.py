"""OpenEnv: cudagym as an OpenEnv ``Environment``, served by ``create_app``, with a typed WebSocket client.

OpenEnv's HTTP ``/reset`` and ``/step`` build a fresh environment per request, so a multi-turn episode
must use its WebSocket session (``/ws``): the server builds one :class:`CudaKernelEnvironment` per
connection from the factory :func:`make_app` hands to ``create_app``, and keeps it until the connection
closes. :class:`CudaKernelClient` is that session's client (``EnvClient``; ``.sync()`` for blocking use).

The wire is typed (pydantic, ``extra="forbid"``): a :class:`KernelAction` is one tool call (``name`` and
``arguments``) or a raw action string (``text``, e.g. model output holding ``<tool_call>`` tags); a
:class:`KernelObservation` carries the observation text and the env's info as typed fields.

Needs ``pip install 'cudagym[openenv]'`` (``openenv-core``).

Example:
    >>> import uvicorn
    >>> from cudagym.integrations.openenv import make_app, CudaKernelClient, KernelAction
    >>> uvicorn.run(make_app(suite="bundled"), host="127.0.0.1", port=8000)  # doctest: +SKIP
    >>> with CudaKernelClient(base_url="http://127.0.0.1:8000").sync() as env:  # doctest: +SKIP
    ...     env.reset(task="bundled/L1/01_Swish")
    ...     env.step(KernelAction(name="list_files"))
"""

from __future__ import annotations

import functools
import json
import uuid
from typing import Any

from cudagym.env import CudaKernelEnv
from cudagym.errors import ConfigError

try:
    from openenv.core.client_types import StepResult
    from openenv.core.env_client import EnvClient
    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, Observation, State
    from pydantic import Field, model_validator
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "cudagym.integrations.openenv needs OpenEnv: pip install 'cudagym[openenv]' (the openenv-core package)"
    ) from exc


class KernelAction(Action):
    """One tool call: ``name`` with ``arguments``, or ``text`` holding the action as the env parses it."""

    name: str = Field(default="", description="Tool name: read_file, write_file, ..., submit")
    arguments: dict[str, Any] = Field(default_factory=dict, description="The tool's arguments")
    text: str = Field(default="", description="A raw action string (JSON or <tool_call> tags), instead of name")

    @model_validator(mode="after")
    def _one_form(self) -> KernelAction:
        if bool(self.name) == bool(self.text):
            raise ValueError("expected exactly one of name (with arguments) or text")
        return self

    def to_action(self) -> str:
        """The action string the gymnasium env takes.

        Raises:
            ConfigError: ``arguments`` holds a value that is not JSON data (one made in Python, not off the wire).
        """
        try:
            return self.text or json.dumps({"name": self.name, "arguments": self.arguments})
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"expected the arguments of {self.name} to be JSON data (str, int, bool, ...), got "
                              f"{exc}") from exc


class KernelObservation(Observation):
    """What a step (or reset) returned; ``done`` and ``reward`` come from the base class."""

    text: str = Field(default="", description="The observation: the prompt at reset, then each tool's result")
    task_id: str = Field(default="", description="The task")
    turn: int = Field(default=0, description="Tool calls made")
    tool: str = Field(default="", description="The tool that ran (empty when the action named none)")
    ok: bool = Field(default=True, description="Whether the tool did what was asked")
    error: str = Field(default="", description="The tool's error kind, empty when ok")
    tokens_used: int = Field(default=0, description="Env tokens used so far")
    evaluated: bool = Field(default=False, description="Whether the reward came from a real evaluation")
    episode_end: str = Field(default="", description="submit, max_turns or token_budget once done")
    last_eval: dict[str, Any] = Field(default_factory=dict, description="The last verdict (EvalResult as JSON)")
    tool_schemas: list[dict[str, Any]] = Field(default_factory=list, description="The tools (at reset only)")


class KernelState(State):
    """The session's episode."""

    task_id: str = Field(default="", description="The task")
    done: bool = Field(default=False, description="Whether the episode ended")


class CudaKernelEnvironment(Environment[KernelAction, KernelObservation, KernelState]):
    """A :class:`~cudagym.env.CudaKernelEnv` behind OpenEnv's server; one instance per WebSocket session."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # each instance has its own workspace; the judge is thread-safe

    def __init__(self, suite: str = "bundled", **env_kwargs: Any) -> None:
        """Build the env (loaded lazily on the first reset).

        Args:
            suite: The task suite.
            **env_kwargs: More :class:`~cudagym.env.CudaKernelEnv` arguments (``judge``, ``solution_format``, ...).
        """
        super().__init__()
        self._env = CudaKernelEnv(suite, **env_kwargs)
        self._state = KernelState(episode_id=None, step_count=0)

    def reset(self, seed: int | None = None, episode_id: str | None = None, task: str | None = None,
              **kwargs: Any) -> KernelObservation:
        """Start an episode on ``task`` (or one drawn from ``seed``); the observation is the prompt.

        Raises:
            ConfigError: A keyword other than ``seed``, ``episode_id`` and ``task`` (a misspelt ``task`` would
                otherwise draw a random task; the server sends the client's error back to it).
        """
        if kwargs:
            raise ConfigError(f"unknown reset argument(s) {', '.join(sorted(map(repr, kwargs)))}; expected only "
                              "seed (int), episode_id (str) and task (a task id, or None to draw one from the seed)")
        # No episode until the env has started this one: a reset that raises leaves step() saying so.
        self._state = KernelState(episode_id=None, step_count=0)
        text, info = self._env.reset(seed=seed, options={"task": task} if task else None)
        self._state = KernelState(episode_id=episode_id or uuid.uuid4().hex, step_count=0,
                                  task_id=str(info["task_id"]))
        return self._observation(text, 0.0, False, info, tool_schemas=self._env.tool_schemas)

    def step(self, action: KernelAction, timeout_s: float | None = None, **kwargs: Any) -> KernelObservation:
        """Run one tool call; after the episode ended, say so (reset starts the next)."""
        if self._state.done or not self._state.task_id:
            return KernelObservation(text="No episode is running: reset first.", ok=False, error="reset_needed",
                                     done=self._state.done, reward=0.0, task_id=self._state.task_id)
        text, reward, terminated, truncated, info = self._env.step(action.to_action())
        done = bool(terminated or truncated)
        self._state = self._state.model_copy(update={"step_count": self._state.step_count + 1, "done": done})
        return self._observation(text, float(reward), done, info)

    @property
    def state(self) -> KernelState:
        """The session's episode id, step count and task."""
        return self._state

    def close(self) -> None:
        """Remove the workspace (the server calls this when the session ends)."""
        self._env.close()

    @staticmethod
    def _observation(text: str, reward: float, done: bool, info: dict[str, Any],
                     tool_schemas: list[dict[str, Any]] | None = None) -> KernelObservation:
        return KernelObservation(
            text=text, reward=reward, done=done, task_id=str(info.get("task_id", "")), turn=int(info.get("turn", 0)),
            tool=str(info.get("tool", "")), ok=bool(info.get("ok", True)), error=str(info.get("error", "")),
            tokens_used=int(info.get("tokens_used", 0)), evaluated=bool(info.get("evaluated", False)),
            episode_end=str(info.get("episode_end", "")), last_eval=dict(info.get("last_eval", {})),
            tool_schemas=tool_schemas or [],
        )


def make_app(*, max_concurrent_envs: int = 8, **env_kwargs: Any) -> Any:
    """OpenEnv's FastAPI app serving cudagym: one :class:`CudaKernelEnvironment` per WebSocket session.

    Args:
        max_concurrent_envs: Sessions at once (each holds a workspace; all share the judge).
        **env_kwargs: :class:`CudaKernelEnvironment` arguments (``suite``, ``judge``, ...).
    """
    factory = functools.partial(CudaKernelEnvironment, **env_kwargs)
    return create_app(factory, KernelAction, KernelObservation, env_name="cudagym",
                      max_concurrent_envs=max_concurrent_envs)


class CudaKernelClient(EnvClient[KernelAction, KernelObservation, KernelState]):
    """The WebSocket client of a :func:`make_app` server (async; ``.sync()`` for blocking use)."""

    def _step_payload(self, action: KernelAction) -> dict[str, Any]:
        return action.model_dump(exclude={"metadata"})

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[KernelObservation]:
        observation = KernelObservation(**payload.get("observation", {}), done=payload.get("done", False),
                                        reward=payload.get("reward"))
        return StepResult(observation=observation, reward=payload.get("reward"), done=payload.get("done", False))

    def _parse_state(self, payload: dict[str, Any]) -> KernelState:
        return KernelState(**{k: v for k, v in payload.items() if k in KernelState.model_fields})
