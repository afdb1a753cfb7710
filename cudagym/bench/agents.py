"""The agents ``cudagym bench`` runs, by name: a small registry of makers with one signature.

An :data:`AgentMaker` builds the agent of one episode from the task id and the episode's seed, so agents
that depend on the task (the scripted replay of a bundled solution) or on the seed (the random baseline)
get what they need. ``module:callable`` names any callable; it is called with the keywords among
``task_id`` and ``seed`` that its signature takes, and must return an object with ``reset()`` and
``act(observation, info)`` (:class:`cudagym.rollout.Agent`).

The agents themselves live in ``cudagym.baselines`` and are imported by name only when chosen: the engine
imports nothing from there.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cudagym.errors import ConfigError, CudaGymError
from cudagym.rollout import Agent

AgentMaker = Callable[[str, int], Agent]


@dataclass(frozen=True)
class ChatOptions:
    """Where the chat agent's model is (unset fields fall back to ChatConfig's environment variables).

    Attributes:
        base_url: The API root (``.../v1``).
        model: The model name.
        temperature: Sampling temperature (None: the server's default).
        max_tokens: Most completion tokens per reply (None: the server's default).
        tool_mode: ``native``, ``text`` or ``auto``.
    """

    base_url: str | None = None
    model: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    tool_mode: str = "auto"


def _scripted(options: ChatOptions) -> AgentMaker:
    from cudagym.baselines.scripted import ScriptedAgent
    from cudagym.sources.bundled import BundledSource

    source = BundledSource()

    def make(task_id: str, seed: int) -> Agent:
        if not task_id.startswith("bundled/"):
            raise ConfigError(f"the scripted agent replays bundled reference solutions; {task_id} is not bundled")
        return ScriptedAgent.from_bundled(task_id, source)

    return make


def _random(options: ChatOptions) -> AgentMaker:
    from cudagym.baselines.random_agent import RandomAgent

    return lambda task_id, seed: RandomAgent(seed=seed)


def _chat(options: ChatOptions) -> AgentMaker:
    from cudagym.baselines.chat import ChatAgent, ChatConfig

    config = ChatConfig(base_url=options.base_url, model=options.model, temperature=options.temperature,
                        max_tokens=options.max_tokens, tool_mode=options.tool_mode)
    factory = ChatAgent.factory(config)  # one shared HTTP client for every episode
    return lambda task_id, seed: factory()


AGENTS: dict[str, Callable[[ChatOptions], AgentMaker]] = {"scripted": _scripted, "random": _random, "chat": _chat}


def agent_maker(spec: str, options: ChatOptions | None = None) -> AgentMaker:
    """The maker for ``spec``: ``scripted``, ``random``, ``chat`` or ``module:callable``.

    Raises:
        ConfigError: An unknown name, a module or attribute that does not exist, or one that is not callable;
            from the maker, a callable that fails or returns no agent.
    """
    options = options or ChatOptions()
    if spec in AGENTS:
        return AGENTS[spec](options)
    target = load_callable(spec, what="agent")
    wanted = _keywords(target, ("task_id", "seed"))

    def make(task_id: str, seed: int) -> Agent:
        given: Mapping[str, Any] = {"task_id": task_id, "seed": seed}
        try:
            agent = target(**{k: given[k] for k in wanted})
        except CudaGymError:
            raise
        except Exception as exc:  # noqa: BLE001 - user code: its failure is a message naming it, not a traceback
            keywords = ", ".join(f"{k}={given[k]!r}" for k in wanted)
            raise ConfigError(f"--agent {spec}: calling it as {attr_of(spec)}({keywords}) failed: "
                              f"{type(exc).__name__}: {exc}") from exc
        if not (callable(getattr(agent, "act", None)) and callable(getattr(agent, "reset", None))):
            raise ConfigError(f"expected {spec} to return an agent with reset() and act(observation, info), "
                              f"got {type(agent).__name__}")
        return agent

    return make


def load_callable(spec: str, *, what: str) -> Callable[..., Any]:
    """Import ``module:callable`` (``what`` names it in errors).

    Raises:
        ConfigError: ``spec`` is not of that form, or does not name a callable.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        known = f"{', '.join(AGENTS)} or " if what == "agent" else ""
        raise ConfigError(f"expected the {what} as {known}module:callable, got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import {module_name!r} for the {what} {spec!r}: {exc}") from exc
    target = module
    for part in attr.split("."):
        target = getattr(target, part, None)  # type: ignore[assignment]
        if target is None:
            raise ConfigError(f"module {module_name!r} has no {attr!r} (the {what} {spec!r})")
    if not callable(target):
        raise ConfigError(f"expected {spec} to be callable, got {type(target).__name__}")
    return target


def attr_of(spec: str) -> str:
    """The callable's name in ``module:callable``."""
    return spec.partition(":")[2] or spec


def _keywords(target: Callable[..., Any], names: tuple[str, ...]) -> tuple[str, ...]:
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return ()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return names
    return tuple(n for n in names if n in params)
