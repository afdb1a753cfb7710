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
from cudagym.solution import Solution

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

    def act(self, observation: str) -> str:
        """The next action (``submit`` once the plan is spent); the observation is not read."""
        return self._queue.popleft() if self._queue else self._action("submit", {})

    def _action(self, name: str, arguments: dict[str, Any]) -> str:
        call = json.dumps({"name": name, "arguments": arguments})
        if self.form == "tagged":
            return f"Next I call {name}.\n<tool_call>{call}</tool_call>"
        return call


@dataclass(frozen=True)
class Turn:
    """One step of a replayed episode.

    Attributes:
        turn: 1-based step number.
        tool: The tool that ran.
        ok: Whether it did what was asked.
        observation: The full observation text.
        reward: The step's reward.
        info: The step's info dict.
    """

    turn: int
    tool: str
    ok: bool
    observation: str
    reward: float
    info: Mapping[str, Any]


@dataclass(frozen=True)
class EpisodeRecord:
    """A replayed episode.

    Attributes:
        task_id: The task.
        turns: Every step.
        reward: The final reward.
        evaluated: False when the reward did not come from a real evaluation (e.g. no GPU).
        terminated: True when it ended on ``submit``.
        last_eval: ``info["last_eval"]`` of the last step (empty when nothing was evaluated).
    """

    task_id: str
    turns: tuple[Turn, ...]
    reward: float
    evaluated: bool
    terminated: bool
    last_eval: Mapping[str, Any]


def replay(
    env: gym.Env[str, str],
    agent: ScriptedAgent,
    *,
    observation: str = "",
    on_turn: Callable[[Turn], None] | None = None,
    max_steps: int = 1000,
) -> EpisodeRecord:
    """Run ``agent`` in ``env`` (already reset) until the episode ends.

    Args:
        env: A reset CudaKernelEnv (or a wrapper of one).
        agent: The agent; reset here.
        observation: The reset observation (handed to the agent's first ``act``).
        on_turn: Called after every step (the demo prints from it).
        max_steps: Safety stop for envs without a turn limit.

    Raises:
        ConfigError: The agent's format is not the env's.
    """
    env_format = getattr(env.unwrapped, "solution_format", None)
    if env_format is not None and env_format.name != agent.format:
        raise ConfigError(f"expected an env with the {agent.format} format for this solution, got {env_format.name}")
    agent.reset()
    turns: list[Turn] = []
    info: Mapping[str, Any] = {}
    reward, terminated, truncated = 0.0, False, False
    while not (terminated or truncated) and len(turns) < max_steps:
        observation, step_reward, terminated, truncated, info = env.step(agent.act(observation))
        reward = float(step_reward)
        turn = Turn(len(turns) + 1, str(info.get("tool", "")), bool(info.get("ok")), observation, reward, info)
        turns.append(turn)
        if on_turn is not None:
            on_turn(turn)
    return EpisodeRecord(
        task_id=str(info.get("task_id", "")), turns=tuple(turns), reward=reward,
        evaluated=bool(info.get("evaluated")), terminated=terminated, last_eval=dict(info.get("last_eval", {})),
    )
