"""The vector env of ``gym.make_vec(id, num_envs=N)``: sub-envs stepped at once, one shared judge.

Each sub-env's step runs on its own thread, so sub-envs whose tool call needs no judge (file tools) finish
at once while the compiles and GPU jobs of others run; every sub-env is a handle of the same judge
pipeline (one worker per GPU, one build pool), each its own client of the pipeline's fair dispatch. The
threads spend their time waiting on the judge or on the workspace's files; the env's own Python work per
step is small (see ``benchmarks/bench_vec.py``). Gymnasium 1.x semantics: ``NEXT_STEP`` autoreset (a
sub-env that ended is reset by the next step, whose action for it is ignored), infos batched with
``_key`` masks.

For sub-envs in separate processes use ``vectorization_mode="async"`` with ``vector_kwargs={"shared_memory":
False}``; inside :func:`cudagym.judge.remote.serve_judge` those processes share the parent's judge too.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space
from gymnasium.wrappers import TimeLimit

from cudagym.errors import ConfigError


class CudaKernelVectorEnv(VectorEnv[Any, Any, Any]):
    """``num_envs`` cudagym envs stepped concurrently on threads, sharing one judge.

    Args:
        num_envs: Sub-envs.
        max_episode_steps: The TimeLimit of each sub-env (the registered 200 by default).
        env_kwargs: ``CudaKernelEnv`` arguments, the same for every sub-env (``judge``, ``judge_options``,
            ``suite_options``, ...).
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi"], "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: int = 1, *, max_episode_steps: int | None = None, **env_kwargs: Any) -> None:
        from cudagym.env import CudaKernelEnv

        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ConfigError(f"expected num_envs to be a positive int, got {num_envs!r}")
        self.num_envs = num_envs
        self.envs = []
        for _ in range(num_envs):
            env: Any = CudaKernelEnv(**env_kwargs)
            self.envs.append(TimeLimit(env, max_episode_steps) if max_episode_steps else env)
        first = self.envs[0]
        self.single_observation_space = first.observation_space
        self.single_action_space = first.action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.render_mode = first.unwrapped.render_mode
        self._threads = ThreadPoolExecutor(num_envs, thread_name_prefix="cudagym-subenv")
        self._autoreset = np.zeros(num_envs, dtype=np.bool_)
        self.closed = False

    def reset(self, *, seed: int | Sequence[int | None] | None = None,
              options: dict[str, Any] | None = None) -> tuple[tuple[str, ...], dict[str, Any]]:
        """Reset every sub-env (seeds ``seed + i``, or one per sub-env)."""
        seeds = _seeds(seed, self.num_envs)
        results = list(self._threads.map(lambda i: self.envs[i].reset(seed=seeds[i], options=options),
                                         range(self.num_envs)))
        self._autoreset[:] = False
        infos: dict[str, Any] = {}
        for i, (_, info) in enumerate(results):
            infos = self._add_info(infos, info, i)
        return tuple(obs for obs, _ in results), infos

    def step(self, actions: Sequence[str]) -> tuple[tuple[str, ...], np.ndarray, np.ndarray, np.ndarray,
                                                    dict[str, Any]]:
        """Step every sub-env at once (a sub-env that ended last step is reset instead)."""
        if len(actions) != self.num_envs:
            raise ConfigError(f"expected {self.num_envs} actions, got {len(actions)}")
        results = list(self._threads.map(lambda i: self._step_one(i, actions[i]), range(self.num_envs)))
        rewards = np.array([r[1] for r in results], dtype=np.float64)
        terminated = np.array([r[2] for r in results], dtype=np.bool_)
        truncated = np.array([r[3] for r in results], dtype=np.bool_)
        self._autoreset = terminated | truncated
        infos: dict[str, Any] = {}
        for i, result in enumerate(results):
            infos = self._add_info(infos, result[4], i)
        return tuple(r[0] for r in results), rewards, terminated, truncated, infos

    def _step_one(self, i: int, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        env = self.envs[i]
        if self._autoreset[i]:
            obs, info = env.reset()
            return obs, 0.0, False, False, info
        obs, reward, terminated, truncated, info = env.step(action)
        return obs, float(reward), bool(terminated), bool(truncated), info

    def render(self) -> Any:
        """Each sub-env's last observation (``render_mode="ansi"``), as a tuple."""
        return tuple(env.render() for env in self.envs)

    def close_extras(self, **kwargs: Any) -> None:
        """Close every sub-env (their queued judge jobs are cancelled) and the threads."""
        for env in self.envs:
            env.close()
        self._threads.shutdown(wait=True)


def _seeds(seed: int | Sequence[int | None] | None, n: int) -> list[int | None]:
    if seed is None:
        return [None] * n
    if isinstance(seed, int):
        return [seed + i for i in range(n)]
    seeds = list(seed)
    if len(seeds) != n:
        raise ConfigError(f"expected {n} seeds, got {len(seeds)}")
    return seeds
