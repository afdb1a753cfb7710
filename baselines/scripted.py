"""A scripted agent that replays a known solution through the env's real tool calls.

It writes each file of the solution with ``write_file``, then calls ``compile``, ``verify``, ``profile``
and ``submit``: the path an LLM agent takes, with no model in the loop. ``cudagym demo`` uses it to replay
the bundled reference solutions; tests use it to drive whole episodes.

Example:
    >>> import cudagym
    >>> from cudagym.baselines.scripted import ScriptedAgent, replay
    >>> env = cudagym.CudaKernelEnv("bundled")  # doctest: +SKIP
    >>> env.reset(options={"task": "bundled/L1/01_Swish"})  # doctest: +SKIP
    >>> record = replay(env, ScriptedAgent.from_bundled("bundled/L1/01_Swish"))  # doctest: +SKIP
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import gymnasium as gym

from cudagym.errors import ConfigError
from cudagym.rollout import EpisodeRecord, Turn, play
from cudagym.solution import Solution

__all__ = ["JUDGE_STEPS", "EpisodeRecord", "ScriptedAgent", "Turn", "replay"]

JUDGE_STEPS: tuple[str, ...] = ("compile", "verify", "profile", "submit")


@dataclass
class ScriptedAgent:
    """Writes a fixed set of files, then runs the judge tools in order; ends with ``submit``.

    Attributes:
        files: Relative path -> text of the solution to write.
        format: The files' solution format (must match the env's).
        steps: Tool calls after the writes (no arguments), in order.
        form: ``json`` for bare JSON actions, ``tagged`` for ``<tool_call>`` tags after a line of text.
    """

    files: Mapping[str, str]
    format: str = "extension"
    steps: Sequence[str] = JUDGE_STEPS
    form: Literal["json", "tagged"] = "json"
    _queue: deque[str] = field(default_factory=deque, init=False, repr=False)

    def __post_init__(self) -> None:
        self.reset()

    @classmethod
    def from_solution(cls, solution: Solution, **kwargs: Any) -> ScriptedAgent:
        """An agent replaying ``solution``."""
        return cls(files=dict(solution.files), format=solution.format, **kwargs)

    @classmethod
    def from_bundled(cls, task_id: str, source: Any = None, **kwargs: Any) -> ScriptedAgent:
        """An agent replaying the bundled reference solution of ``task_id``.

        Args:
            task_id: A bundled id, e.g. ``bundled/L1/01_Swish``.
            source: A ``cudagym.sources.bundled.BundledSource`` (the installed suite when None).
            **kwargs: Further :class:`ScriptedAgent` fields.
        """
        if source is None:
            from cudagym.sources.bundled import BundledSource

            source = BundledSource()
        return cls.from_solution(source.solution(task_id), **kwargs)

    def plan(self) -> list[str]:
        """Every action of the episode, in order."""
        writes = [self._action("write_file", {"path": p, "content": t}) for p, t in sorted(self.files.items())]
        return writes + [self._action(name, {}) for name in self.steps]

    def reset(self) -> None:
        """Start the plan again."""
        self._queue = deque(self.plan())

    def act(self, observation: str, info: Mapping[str, Any] | None = None) -> str:
        """The next action (``submit`` once the plan is spent); the observation and info are not read."""
        return self._queue.popleft() if self._queue else self._action("submit", {})

    def _action(self, name: str, arguments: dict[str, Any]) -> str:
        call = json.dumps({"name": name, "arguments": arguments})
        if self.form == "tagged":
            return f"Next I call {name}.\n<tool_call>{call}</tool_call>"
        return call


def replay(
    env: gym.Env[str, str],
    agent: ScriptedAgent,
    *,
    observation: str = "",
    info: Mapping[str, Any] | None = None,
    on_turn: Callable[[Turn], None] | None = None,
    max_steps: int = 1000,
) -> EpisodeRecord:
    """Run ``agent`` in ``env`` (already reset) until the episode ends.

    Args:
        env: A reset CudaKernelEnv (or a wrapper of one).
        agent: The agent; reset here.
        observation: The reset observation (handed to the agent's first ``act``).
        info: The reset info (the task id and token count the record starts from).
        on_turn: Called after every step (the demo prints from it).
        max_steps: Safety stop for envs without a turn limit.

    Raises:
        ConfigError: The agent's format is not the env's.
    """
    env_format = getattr(env.unwrapped, "solution_format", None)
    if env_format is not None and env_format.name != agent.format:
        raise ConfigError(f"expected an env with the {agent.format} format for this solution, got {env_format.name}")
    return play(env, agent, observation, info or {}, on_turn=on_turn, max_steps=max_steps)
