"""Rollouts: any agent against a cudagym env, recorded turn by turn as JSON-serialisable data.

An :class:`Agent` is anything with ``reset()`` and ``act(observation, info) -> str``: the scripted replay,
a chat-endpoint LLM, a random baseline, a PPO policy. :func:`run_episode` plays one episode and returns an
:class:`EpisodeRecord` (every action, observation, tool, verdict, token count and timing);
:func:`run_episodes` plays many on a thread pool, one env and one agent per thread, all sharing the judge
the env factory gives them (the local judge is one process-wide service and is thread-safe), and
:func:`run_vector_episodes` plays them over a Gymnasium vector env.

Example:
    >>> import cudagym
    >>> from cudagym.rollout import run_episode
    >>> from cudagym.baselines.scripted import ScriptedAgent
    >>> env = cudagym.CudaKernelEnv("bundled")  # doctest: +SKIP
    >>> agent = ScriptedAgent.from_bundled("bundled/L1/01_Swish")  # doctest: +SKIP
    >>> record = run_episode(env, agent, options={"task": "bundled/L1/01_Swish"})  # doctest: +SKIP
    >>> record.to_json()  # doctest: +SKIP

Agents that talk to a model may also implement :class:`ReportsUsage` (``last_usage()``), whose numbers
(prompt and completion tokens of the last ``act``) land in :attr:`Turn.usage`. An agent that cannot go on
(an endpoint down after its retries) raises :class:`AgentError`: the episode ends there and its record
says why, instead of the whole batch failing.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym

from cudagym.errors import ConfigError, CudaGymError

EVALUATING_TOOLS: frozenset[str] = frozenset({"verify", "profile", "submit"})
DEFAULT_MAX_STEPS = 1000


class AgentError(CudaGymError, RuntimeError):
    """An agent could not produce an action (e.g. its endpoint failed after every retry)."""


@runtime_checkable
class Agent(Protocol):
    """What :func:`run_episode` drives: one action string per observation."""

    def reset(self) -> None:
        """Forget the previous episode."""

    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        """The next action (a tool call as text) for ``observation`` and the env's ``info``."""


@runtime_checkable
class ReportsUsage(Protocol):
    """An agent that reports what its last :meth:`Agent.act` cost in model tokens."""

    def last_usage(self) -> Mapping[str, int]:
        """``{"prompt_tokens": ..., "completion_tokens": ...}`` of the last ``act`` (empty when none)."""


@dataclass(frozen=True)
class Turn:
    """One step of an episode.

    Attributes:
        turn: 1-based step number.
        tool: The tool that ran (empty when the action named none).
        ok: Whether the tool did what was asked.
        observation: The full observation text.
        reward: The step's reward.
        info: The step's info dict (JSON-serialisable).
        action: The action string the agent sent.
        error: The tool's error kind (empty when ok).
        tokens: Env tokens this step used (action + observation, the env's counter).
        tokens_used: Env tokens used so far in the episode, the prompt included.
        verdict: ``info["last_eval"]`` when this step evaluated (verify, profile, submit or the final
            evaluation on truncation), else empty.
        usage: Model tokens the agent reported for this action (:class:`ReportsUsage`), else empty.
        agent_time_s: Seconds the agent took to act.
        env_time_s: Seconds ``env.step`` took.
    """

    turn: int
    tool: str
    ok: bool
    observation: str
    reward: float
    info: Mapping[str, Any]
    action: str = ""
    error: str = ""
    tokens: int = 0
    tokens_used: int = 0
    verdict: Mapping[str, Any] = field(default_factory=dict)
    usage: Mapping[str, int] = field(default_factory=dict)
    agent_time_s: float = 0.0
    env_time_s: float = 0.0


@dataclass(frozen=True)
class EpisodeRecord:
    """One played episode.

    Attributes:
        task_id: The task.
        turns: Every step.
        reward: The final reward.
        evaluated: False when the reward did not come from a real evaluation (e.g. no GPU).
        terminated: True when it ended on ``submit``.
        last_eval: ``info["last_eval"]`` of the last step (empty when nothing was evaluated).
        truncated: True when the env cut it off (turns or tokens).
        prompt: The reset observation.
        prompt_tokens: Env tokens of the prompt.
        episode_end: ``submit``, ``max_turns``, ``token_budget``, ``max_steps``, ``agent_error`` or ``env_error``
            (a sub-env of the vector env raised: :mod:`cudagym.vector`).
        agent_error: Why the agent stopped (:class:`AgentError`), empty otherwise.
        wall_time_s: Seconds from the first action to the last step.
        agent: A name for the agent (its class name unless given).
    """

    task_id: str
    turns: tuple[Turn, ...]
    reward: float
    evaluated: bool
    terminated: bool
    last_eval: Mapping[str, Any]
    truncated: bool = False
    prompt: str = ""
    prompt_tokens: int = 0
    episode_end: str = ""
    agent_error: str = ""
    wall_time_s: float = 0.0
    agent: str = ""

    @property
    def tools(self) -> list[str]:
        """The tool of every turn, in order."""
        return [t.tool for t in self.turns]

    @property
    def tokens_used(self) -> int:
        """Env tokens of the whole episode (prompt, actions, observations)."""
        return self.turns[-1].tokens_used if self.turns else self.prompt_tokens

    @property
    def model_tokens(self) -> dict[str, int]:
        """The agent's reported model tokens, summed over the turns."""
        total: dict[str, int] = {}
        for t in self.turns:
            for key, value in t.usage.items():
                total[key] = total.get(key, 0) + int(value)
        return total

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (inverse: :meth:`from_dict`)."""
        return asdict(self)

    def to_json(self, **kwargs: Any) -> str:
        """The record as JSON text (``kwargs`` go to :func:`json.dumps`)."""
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EpisodeRecord:
        """Rebuild a record from :meth:`to_dict` output.

        Raises:
            ConfigError: ``data`` lacks a field, has one this record does not know, or one whose value has another
                type (named as ``record.reward`` or ``record.turns[2].action``).
        """
        if not isinstance(data, Mapping):
            raise ConfigError(f"expected an EpisodeRecord dict (EpisodeRecord.to_dict()), got {type(data).__name__}")
        if "turns" not in data:
            raise ConfigError("expected an EpisodeRecord dict (EpisodeRecord.to_dict()), got one without 'turns'")
        turns = data["turns"]
        if not isinstance(turns, list | tuple) or not all(isinstance(t, Mapping) for t in turns):
            got = type(turns).__name__ if not isinstance(turns, list | tuple) else "a list holding something else"
            raise ConfigError(f"expected record.turns to be a list of Turn dicts, got {got}")
        try:
            record = cls(**{**data, "turns": tuple(Turn(**t) for t in turns)})
        except TypeError as exc:
            raise ConfigError(f"expected an EpisodeRecord dict (EpisodeRecord.to_dict()), got an error: {exc}") from exc
        _check_field_types(record, "record.")
        for i, turn in enumerate(record.turns):
            _check_field_types(turn, f"record.turns[{i}].")
        return record

    @classmethod
    def from_json(cls, text: str) -> EpisodeRecord:
        """Rebuild a record from :meth:`to_json` output.

        Raises:
            ConfigError: ``text`` is not JSON of a record.
        """
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"expected EpisodeRecord JSON, got text that is not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"expected EpisodeRecord JSON (an object), got {type(data).__name__}")
        return cls.from_dict(data)


# What each field of a Turn and an EpisodeRecord must hold (by its annotation): a hand-edited or damaged journal line
# is refused with the field named, before a filter compares a text with a number or takes a number for an action.
def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


_FIELD_CHECKS: dict[str, Callable[[Any], bool]] = {
    "str": lambda v: isinstance(v, str),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float": _is_number,
    "bool": lambda v: isinstance(v, bool),
    "Mapping[str, Any]": lambda v: isinstance(v, Mapping) and all(isinstance(k, str) for k in v),
    "Mapping[str, int]": lambda v: isinstance(v, Mapping) and all(isinstance(k, str) and _is_number(x)
                                                                  for k, x in v.items()),
}


def _check_field_types(record: Turn | EpisodeRecord, where: str) -> None:
    """Raise a ConfigError naming the first field of ``record`` whose value is not of its declared type."""
    for item in fields(record):
        check = _FIELD_CHECKS.get(str(item.type))
        value = getattr(record, item.name)
        if check is None or check(value):
            continue
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        raise ConfigError(f"expected {where}{item.name} to be {item.type}, got {type(value).__name__} {shown}; "
                          "the record was edited or damaged")


def run_episode(
    env: gym.Env[str, str],
    agent: Agent,
    *,
    seed: int | None = None,
    options: Mapping[str, Any] | None = None,
    on_turn: Callable[[Turn], None] | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
    name: str = "",
) -> EpisodeRecord:
    """Reset ``env`` and ``agent``, then play until the episode ends.

    Args:
        env: A CudaKernelEnv (or a wrapper of one).
        agent: The agent.
        seed: ``env.reset`` seed.
        options: ``env.reset`` options, e.g. ``{"task": "bundled/L1/01_Swish"}``.
        on_turn: Called after every step.
        max_steps: Safety stop for envs without a turn limit.
        name: The agent's name in the record (its class name when empty).
    """
    observation, info = env.reset(seed=seed, options=dict(options) if options is not None else None)
    return play(env, agent, observation, info, on_turn=on_turn, max_steps=max_steps, name=name)


def play(
    env: gym.Env[str, str],
    agent: Agent,
    observation: str,
    info: Mapping[str, Any],
    *,
    on_turn: Callable[[Turn], None] | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
    name: str = "",
) -> EpisodeRecord:
    """Play an episode in an env that was just reset (``observation, info`` are what reset returned).

    Args:
        env: The reset env.
        agent: The agent; reset here.
        observation: The reset observation.
        info: The reset info.
        on_turn: Called after every step.
        max_steps: Safety stop for envs without a turn limit.
        name: The agent's name in the record (its class name when empty).
    """
    if max_steps < 1:
        raise ConfigError(f"expected max_steps >= 1, got {max_steps}")
    agent.reset()
    recorder = _Recorder(observation, info)
    ended = False
    while not ended and len(recorder.turns) < max_steps:
        start = time.perf_counter()
        try:
            action = agent.act(observation, info)
        except AgentError as exc:
            recorder.agent_error = str(exc) or type(exc).__name__
            break
        acted = time.perf_counter()
        observation, reward, terminated, truncated, info = env.step(action)
        usage = agent.last_usage() if isinstance(agent, ReportsUsage) else {}
        turn = recorder.add(action, observation, float(reward), info, usage, acted - start,
                            time.perf_counter() - acted)
        recorder.terminated, recorder.truncated = bool(terminated), bool(truncated)
        ended = recorder.terminated or recorder.truncated
        if on_turn is not None:
            on_turn(turn)
    return recorder.record(name or type(agent).__name__)


@dataclass
class _Recorder:
    """Builds an :class:`EpisodeRecord` step by step."""

    prompt: str
    reset_info: Mapping[str, Any]
    turns: list[Turn] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False
    agent_error: str = ""
    started: float = field(default_factory=time.perf_counter)

    def add(self, action: str, observation: str, reward: float, info: Mapping[str, Any],
            usage: Mapping[str, int], agent_s: float, env_s: float) -> Turn:
        previous = self.turns[-1].tokens_used if self.turns else int(self.reset_info.get("tokens_used", 0))
        used = int(info.get("tokens_used", previous))
        tool = str(info.get("tool", ""))
        ended = "episode_end" in info
        verdict = dict(info.get("last_eval", {})) if tool in EVALUATING_TOOLS or ended else {}
        turn = Turn(
            turn=len(self.turns) + 1, tool=tool, ok=bool(info.get("ok")), observation=observation, reward=reward,
            info=dict(info), action=action if isinstance(action, str) else repr(action),
            error=str(info.get("error", "")), tokens=used - previous, tokens_used=used, verdict=verdict,
            usage={str(k): int(v) for k, v in usage.items()}, agent_time_s=agent_s, env_time_s=env_s,
        )
        self.turns.append(turn)
        return turn

    def record(self, agent: str) -> EpisodeRecord:
        last = self.turns[-1].info if self.turns else self.reset_info
        if self.agent_error:
            end = "agent_error"
        elif self.terminated or self.truncated:
            end = str(last.get("episode_end", "submit" if self.terminated else "max_turns"))
        else:
            end = "max_steps"
        return EpisodeRecord(
            task_id=str(last.get("task_id", self.reset_info.get("task_id", ""))), turns=tuple(self.turns),
            reward=self.turns[-1].reward if self.turns else 0.0, evaluated=bool(last.get("evaluated")),
            terminated=self.terminated, last_eval=dict(last.get("last_eval", {})), truncated=self.truncated,
            prompt=self.prompt, prompt_tokens=int(self.reset_info.get("tokens_used", 0)), episode_end=end,
            agent_error=self.agent_error, wall_time_s=time.perf_counter() - self.started, agent=agent,
        )


@dataclass(frozen=True)
class EpisodeSpec:
    """Which episode to play: the ``env.reset`` arguments.

    Attributes:
        seed: Reset seed.
        options: Reset options, e.g. ``{"task": "bundled/L1/01_Swish"}``.
    """

    seed: int | None = None
    options: Mapping[str, Any] | None = None

    @classmethod
    def for_task(cls, task_id: str, seed: int | None = None) -> EpisodeSpec:
        """An episode on the task ``task_id``."""
        return cls(seed=seed, options={"task": task_id})


def run_episodes(
    make_env: Callable[[], gym.Env[str, str]],
    make_agent: Callable[[], Agent],
    episodes: int | Iterable[EpisodeSpec],
    *,
    max_workers: int = 4,
    on_episode: Callable[[EpisodeRecord], None] | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
) -> list[EpisodeRecord]:
    """Play episodes concurrently: one thread per worker, each with its own env and agent.

    Episodes overlap where they wait: on the judge (builds and GPU jobs run in the judge's own threads
    and processes) and on model endpoints. Give every env the same judge (``make_env`` closing over one
    ``Judge``, or the default local judge, which is one per process) so they share its workers.

    Args:
        make_env: Builds an env; called once per worker thread. Envs are closed at the end.
        make_agent: Builds an agent; called once per worker thread.
        episodes: How many (seeds 0..n-1), or the :class:`EpisodeSpec` of each.
        max_workers: Threads (and so envs and agents) at most.
        on_episode: Called (from the worker thread) as each episode ends.
        max_steps: Safety stop per episode.

    Returns:
        The records, in the order of ``episodes``.
    """
    specs = [EpisodeSpec(seed=i) for i in range(episodes)] if isinstance(episodes, int) else list(episodes)
    if max_workers < 1:
        raise ConfigError(f"expected max_workers >= 1, got {max_workers}")
    slots: list[tuple[gym.Env[str, str], Agent]] = []
    free: list[int] = []
    lock = threading.Lock()

    def one(spec: EpisodeSpec) -> EpisodeRecord:
        with lock:
            if free:
                slot = free.pop()
            else:
                slots.append((make_env(), make_agent()))
                slot = len(slots) - 1
        env, agent = slots[slot]
        try:
            record = run_episode(env, agent, seed=spec.seed, options=spec.options, max_steps=max_steps)
        finally:
            with lock:
                free.append(slot)
        if on_episode is not None:
            on_episode(record)
        return record

    try:
        with ThreadPoolExecutor(min(max_workers, max(len(specs), 1)), thread_name_prefix="cudagym-rollout") as pool:
            return list(pool.map(one, specs))
    finally:
        for env, _ in slots:
            env.close()


def run_vector_episodes(
    venv: gym.vector.VectorEnv,
    agents: Sequence[Agent],
    episodes: int,
    *,
    seed: int | None = None,
) -> list[EpisodeRecord]:
    """Play ``episodes`` episodes over a vector env with next-step autoreset, one agent per sub-env.

    A sync vector env runs its sub-envs in this process, sharing its judge; an async one (``shared_memory
    =False``) steps them in parallel processes, each with its own judge.

    Args:
        venv: A vector env of CudaKernelEnvs (``autoreset_mode`` NEXT_STEP, the env's default).
        agents: One agent per sub-env.
        episodes: Episodes to finish in all.
        seed: ``venv.reset`` seed.

    Returns:
        The records, in the order the episodes ended (the env's ``max_turns`` ends every episode).

    Raises:
        ConfigError: The agents do not match the sub-envs, or the autoreset mode is not NEXT_STEP.
    """
    n = venv.num_envs
    if len(agents) != n:
        raise ConfigError(f"expected one agent per sub-env ({n}), got {len(agents)}")
    mode = venv.metadata.get("autoreset_mode")
    if mode is not None and getattr(mode, "value", mode) != "NextStep":
        raise ConfigError(f"expected a vector env with autoreset_mode NEXT_STEP, got {mode}")
    observations, infos = venv.reset(seed=seed)
    recorders = [_Recorder(observations[i], unbatch_info(infos, i)) for i in range(n)]
    for agent in agents:
        agent.reset()
    records: list[EpisodeRecord] = []
    while len(records) < episodes:
        actions, times = [], []
        for agent, rec in zip(agents, recorders, strict=True):
            start = time.perf_counter()
            if rec.terminated or rec.truncated:
                actions.append("")  # next-step autoreset: this sub-env resets and ignores its action
            else:
                last = rec.turns[-1] if rec.turns else None
                actions.append(agent.act(last.observation if last else rec.prompt,
                                         last.info if last else rec.reset_info))
            times.append(time.perf_counter() - start)
        stepped = time.perf_counter()
        observations, rewards, terminated, truncated, infos = venv.step(actions)
        env_s = (time.perf_counter() - stepped) / n
        for i, (agent, rec) in enumerate(zip(agents, recorders, strict=True)):
            if rec.terminated or rec.truncated:
                recorders[i] = _Recorder(observations[i], unbatch_info(infos, i))
                agent.reset()
                continue
            usage = agent.last_usage() if isinstance(agent, ReportsUsage) else {}
            rec.add(actions[i], observations[i], float(rewards[i]), unbatch_info(infos, i), usage, times[i], env_s)
            rec.terminated, rec.truncated = bool(terminated[i]), bool(truncated[i])
            if (rec.terminated or rec.truncated) and len(records) < episodes:
                records.append(rec.record(type(agent).__name__))
    return records


def unbatch_info(infos: Mapping[str, Any], index: int) -> dict[str, Any]:
    """Sub-env ``index``'s info out of a vector env's batched info (keys it lacks are left out)."""
    out: dict[str, Any] = {}
    for key, value in infos.items():
        if key.startswith("_"):
            continue
        mask = infos.get(f"_{key}")
        if mask is not None and not bool(mask[index]):
            continue
        if isinstance(value, Mapping):
            out[key] = unbatch_info(value, index)
        else:
            item = value[index]
            out[key] = item.item() if hasattr(item, "item") else item
    return out
