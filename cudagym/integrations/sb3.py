"""Launch-configuration tuning as a numeric Gymnasium env that Stable-Baselines3 trains on directly.

:class:`LaunchTuningEnv` wraps a :class:`~cudagym.env.CudaKernelEnv` on one bundled task in the ``raw``
format. Each action picks a launch configuration of the task's kernel family
(:mod:`cudagym.integrations.kernel_families`); the step writes that solution through the env's real
``write_file`` tool calls and runs ``profile`` (or ``verify``) through the judge. The observation is the
verdict's numbers, the reward its speedup.

## Action Space

``MultiDiscrete(family.space.nvec)``: one index per knob of the task's family (every bundled task has one;
for the elementwise, row and scan families ``[5, 4, 3]``: block size 64..1024, items per thread 1..8, vector
width 1, 2, 4; for the tiled GEMMs ``[3, 3, 3, 3]``: tile M, N, K and outputs per thread; see each family
module); ``action_space="discrete"`` gives the same configurations as ``Discrete(family.space.size)``.

## Observation Space

``Box(17,)`` float32 with finite bounds; :data:`FEATURES` names each entry: the tier (-1..3, 0 when not
evaluated), evaluated / correct / built flags, log10(1 + time in us) of candidate, eager and
torch.compile, both speedups (clipped to 100), the kernels' most registers per thread, most shared memory
(KiB), log2(1 + spilled bytes) from ptxas, the fraction of the evaluation budget spent, and the chosen
configuration (each knob's index scaled to 0..1; a family with fewer than 4 knobs leaves the rest 0). All
zeros at reset. Without a GPU the build still runs, so registers, shared memory and spills are real; the
timing entries stay 0.

## Rewards

``speedup_vs_eager`` of the configuration when it is correct and timed; -1 when it fails to build, is
wrong or breaks a rule; 0 when it was not evaluated (no GPU).

## Episode End

Truncation after ``budget`` evaluations; never terminates.

Example:
    >>> from stable_baselines3 import PPO
    >>> from cudagym.integrations.sb3 import LaunchTuningEnv
    >>> env = LaunchTuningEnv("bundled/L1/01_Swish", budget=8)  # doctest: +SKIP
    >>> PPO("MlpPolicy", env, n_steps=16, batch_size=16).learn(64)  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from typing import Any, Literal, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from cudagym import env_options
from cudagym.env import CudaKernelEnv
from cudagym.errors import ConfigError
from cudagym.integrations.kernel_families import get_family
from cudagym.integrations.launch_params import MAX_KNOBS
from cudagym.judge.interface import Judge
from cudagym.judge.records import EvalResult, from_dict
from cudagym.reward import score

FEATURES: tuple[str, ...] = (
    "tier", "evaluated", "correct", "built", "log10_candidate_us", "log10_eager_us", "log10_compile_us",
    "speedup_vs_eager", "speedup_vs_compile", "registers", "shared_mem_kib", "log2_spill_bytes",
    "budget_spent", *(f"knob_{k}_index" for k in range(MAX_KNOBS)),
)
_KNOBS = len(FEATURES) - MAX_KNOBS  # where the configuration's slots start
_HIGH = np.array([3, 1, 1, 1, 10, 10, 10, 100, 100, 255, 256, 40, 1] + [1] * MAX_KNOBS, dtype=np.float32)
_LOW = np.array([-1] + [0] * (len(FEATURES) - 1), dtype=np.float32)
DEFAULT_TOKENIZER = "cudagym:code-bpe-16k"  # shipped: no download; tokens do not matter to this env
# CudaKernelEnv arguments LaunchTuningEnv gives the inner env itself (env_kwargs may not set them)
_SET_HERE = frozenset({"suite", "tasks", "solution_format", "judge", "max_turns"})


class LaunchTuningEnv(gym.Env[np.ndarray, Any]):
    """Tune a bundled task's kernel launch configuration; see the module docstring for the spaces."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        task: str = "bundled/L1/01_Swish",
        *,
        budget: int = 16,
        action_space: Literal["multidiscrete", "discrete"] = "multidiscrete",
        tool: Literal["profile", "verify"] = "profile",
        judge: str | Judge = "local",
        env_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        """Build the env.

        Args:
            task: A bundled task with a kernel family.
            budget: Evaluations per episode.
            action_space: ``multidiscrete`` (one index per knob) or ``discrete`` (one of the family's
                configurations).
            tool: The judge tool each step runs: ``profile`` (times it) or ``verify`` (checks only).
            judge: A judge backend name or a Judge, shared with the inner env.
            env_kwargs: More :class:`CudaKernelEnv` arguments (e.g. ``protocol``, ``suite_options``).

        Raises:
            ConfigError: No family for ``task``, a budget that is not a positive int, an unknown action space or
                tool, or ``env_kwargs`` that are not a dict or set what this env sets itself.
        """
        self.family = get_family(task)
        self.space = self.family.space
        env_options.positive_int("budget", budget)
        if action_space not in ("multidiscrete", "discrete") or tool not in ("profile", "verify"):
            raise ConfigError(f"expected action_space multidiscrete|discrete and tool profile|verify, got "
                              f"{action_space!r}, {tool!r}")
        extra = env_options.plain_dict("env_kwargs", env_kwargs)
        taken = sorted(_SET_HERE & set(extra))
        if taken:
            raise ConfigError(f"expected env_kwargs without {', '.join(taken)}: LaunchTuningEnv sets "
                              f"{', '.join(sorted(_SET_HERE))} itself (pass the task as task=, the judge as judge=, "
                              "the evaluations per episode as budget=)")
        self.task_id, self.budget, self.tool = task, budget, tool
        kwargs = {"token_counter": DEFAULT_TOKENIZER, "token_budget": 1 << 40, **extra}
        # two writes and one evaluation per step, and room to spare
        self.inner = CudaKernelEnv("bundled", tasks=[task], solution_format="raw", judge=judge,
                                   max_turns=3 * budget + 8, **kwargs)
        self.action_space: spaces.Space[Any] = (
            spaces.MultiDiscrete(np.array(self.space.nvec)) if action_space == "multidiscrete"
            else spaces.Discrete(self.space.size)
        )
        self.observation_space = spaces.Box(_LOW, _HIGH, dtype=np.float32)
        self._evals = 0

    def decode(self, action: Any) -> Any:
        """The configuration an action names (a record of the family's space).

        Raises:
            ConfigError: The action is not in the action space.
        """
        if not self.action_space.contains(np.asarray(action) if not np.isscalar(action) else action):
            raise ConfigError(f"expected an action in {self.action_space}, got {action!r}")
        if isinstance(self.action_space, spaces.Discrete):
            indices = [int(x) for x in np.unravel_index(int(action), self.space.nvec)]
        else:
            indices = [int(x) for x in np.asarray(action)]
        return self.space.decode(indices)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        """Start a new tuning episode (a fresh inner episode on the task)."""
        super().reset(seed=seed)
        self.inner.reset(seed=seed, options={"task": self.task_id})
        self._evals = 0
        return np.zeros(len(FEATURES), dtype=np.float32), {"task_id": self.task_id}

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        """Write the configuration's solution, evaluate it, and observe the verdict."""
        params = self.decode(action)
        for path, text in self.family.files(params).items():
            self.inner.step(json.dumps({"name": "write_file", "arguments": {"path": path, "content": text}}))
        _, _, _, inner_truncated, info = self.inner.step(json.dumps({"name": self.tool, "arguments": {}}))
        self._evals += 1
        verdict = from_dict(EvalResult, info["last_eval"]) if "last_eval" in info else None
        obs, reward = self._observe(verdict, params)
        truncated = self._evals >= self.budget or bool(inner_truncated)
        out = {"params": dataclasses.asdict(params), "status": verdict.status.value if verdict else "none",
               "candidate_us": verdict.candidate.median_us if verdict else 0.0,
               "speedup_vs_eager": verdict.speedup_vs_eager if verdict else 0.0}
        return obs, reward, False, truncated, out

    def _observe(self, verdict: EvalResult | None, params: Any) -> tuple[np.ndarray, float]:
        vec = np.zeros(len(FEATURES), dtype=np.float32)
        vec[12] = self._evals / self.budget
        for k, (i, n) in enumerate(zip(self.space.indices(params), self.space.nvec, strict=True)):
            vec[_KNOBS + k] = i / max(n - 1, 1)
        if verdict is None:
            return np.clip(vec, _LOW, _HIGH), 0.0
        s = score(verdict, self.inner.reward_config)
        kernels = verdict.build.kernels
        spills = max((k.spill_stores_bytes + k.spill_loads_bytes for k in kernels), default=0)
        vec[0:4] = [s.tier, s.evaluated, verdict.correct, verdict.build.ok]
        vec[4:7] = [math.log10(1 + t.median_us) for t in (verdict.candidate, verdict.eager, verdict.compiled)]
        vec[7:9] = [verdict.speedup_vs_eager, verdict.speedup_vs_compile]
        vec[9:12] = [max((k.registers for k in kernels), default=0),
                     max((k.shared_mem_bytes for k in kernels), default=0) / 1024, math.log2(1 + spills)]
        if not s.evaluated:
            reward = 0.0
        elif s.tier < 0:
            reward = -1.0
        else:
            reward = float(verdict.speedup_vs_eager) if verdict.timed else 0.0
        return np.clip(vec, _LOW, _HIGH), reward

    def close(self) -> None:
        """Close the inner env (and a judge it made)."""
        self.inner.close()
