"""A toy multi-turn env with cudagym's tool-call interface, for testing the PPO baseline on CPU.

``CudaGymToy-ToolCall-v0``: the prompt names one of cudagym's tools (not ``submit``); the agent must call it,
then call ``submit``. Actions are parsed by :func:`cudagym.toolcalls.parse_action`, exactly as
``CudaKernelEnv`` parses them (a JSON object or a ``<tool_call>`` block), and each step's observation is a
short tool result, so episodes have several action turns with observation tokens between them.

Reward 1 when ``submit`` ends an episode in which the named tool was called, else 0; a malformed action
gets an observation saying what was wrong (as in cudagym) and counts as a turn. Truncated after
``max_turns`` turns. ``info`` has ``target``, ``turn``, ``tool`` and ``ok``.

A policy that calls a uniformly random tool each turn earns about 0.04 (``max_turns=3``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym

from cudagym.spaces import UnicodeText
from cudagym.toolcalls import TOOL_NAMES, ActionError, parse_action

TOY_ENV_ID = "CudaGymToy-ToolCall-v0"
TARGETS: tuple[str, ...] = tuple(name for name in TOOL_NAMES if name != "submit")
_NO_ARGS: dict[str, dict[str, Any]] = {name: {} for name in TOOL_NAMES}
_NO_ARGS.update({"read_file": {"path": "model.py"}, "write_file": {"path": "model_new.py", "content": ""},
                 "edit_file": {"path": "model_new.py", "old": "a", "new": "b"}})


def example_call(name: str) -> str:
    """A valid JSON tool call of ``name`` (with the arguments its schema requires)."""
    import json

    return json.dumps({"name": name, "arguments": _NO_ARGS[name]})


class ToyToolCallEnv(gym.Env[str, str]):
    """Call the named tool, then ``submit`` (see the module docstring)."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, max_turns: int = 3) -> None:
        if max_turns < 2:
            raise ValueError(f"expected max_turns >= 2 (the tool, then submit), got {max_turns}")
        self.max_turns = max_turns
        self.observation_space = UnicodeText(4096)
        self.action_space = UnicodeText(4096)
        self._target = TARGETS[0]
        self._turn = 0
        self._called = False

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Pick the target tool (uniformly, or ``options["target"]``)."""
        super().reset(seed=seed)
        target = (options or {}).get("target")
        if target is None:
            target = TARGETS[int(self.np_random.integers(len(TARGETS)))]
        if target not in TARGETS:
            raise ValueError(f"expected options['target'] in {TARGETS}, got {target!r}")
        self._target, self._turn, self._called = target, 0, False
        prompt = f"Call the tool {target}, then call submit. One JSON tool call per turn."
        return prompt, {"target": target, "turn": 0}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Run one tool call; the reward comes with ``submit``."""
        self._turn += 1
        call = parse_action(action)
        info: dict[str, Any] = {"target": self._target, "turn": self._turn}
        if isinstance(call, ActionError):
            obs, reward, terminated = f"error ({call.kind}): {call.message}", 0.0, False
            info.update(tool="", ok=False)
        elif call.name == "submit":
            reward = 1.0 if self._called else 0.0
            obs, terminated = f"submitted; reward {reward:g}", True
            info.update(tool="submit", ok=True)
        else:
            self._called = self._called or call.name == self._target
            obs, reward, terminated = f"{call.name}: done.", 0.0, False
            info.update(tool=call.name, ok=True)
        truncated = not terminated and self._turn >= self.max_turns
        return obs, reward, terminated, truncated, info


def register_toy_env() -> None:
    """Register :data:`TOY_ENV_ID` with Gymnasium (once)."""
    if TOY_ENV_ID not in gym.registry:
        gym.register(id=TOY_ENV_ID, entry_point=f"{__name__}:ToyToolCallEnv", max_episode_steps=None)


register_toy_env()


def tool_call_ids(encode: Callable[[str], list[int]]) -> list[int]:
    """Every id in the example calls of every tool: an output vocabulary for a tiny policy on this env."""
    return sorted({i for name in TOOL_NAMES for i in encode(example_call(name))})


def random_tool_journal(episodes: int, *, seed: int = 0, max_turns: int = 3) -> list[dict[str, Any]]:
    """Journal records of a scripted agent that calls a uniformly random tool each turn (the format, no skill).

    Fine-tuning on these teaches a policy the tool-call format while its choice of tool stays uniform, so
    its reward stays near that of chance (about 0.04): the starting point of the PPO learning test.
    """
    import random

    rng = random.Random(seed)
    env = ToyToolCallEnv(max_turns=max_turns)
    records = []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        messages = [{"role": "user", "content": obs}]
        total, done = 0.0, False
        while not done:
            action = example_call(rng.choice(TOOL_NAMES))
            obs, reward, terminated, truncated, _ = env.step(action)
            total += reward
            messages.append({"role": "assistant", "content": action})
            done = terminated or truncated
            if not done:
                messages.append({"role": "tool", "content": obs})
        records.append({"messages": messages, "reward": total})
    return records
