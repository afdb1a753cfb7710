"""The vector env of ``gym.make_vec(id, num_envs=N)``: sub-envs stepped at once, one shared judge.

Each sub-env's step runs on its own thread, so sub-envs whose tool call needs no judge (file tools) finish
at once while the compiles and GPU jobs of others run; every sub-env is a handle of the same judge
pipeline (one worker per GPU, one build pool), each its own client of the pipeline's fair dispatch. The
threads spend their time waiting on the judge or on the workspace's files. The threads share one GIL, so a
step starts the sub-envs whose action waits on the judge (:meth:`CudaKernelEnv.waits_on_judge`) first
and the others once those have handed their work to the judge: the file tools then run while the builds
do, instead of delaying every build's start (``benchmarks/bench_vec.py`` measures what is left of the
env's own time). Gymnasium 1.x semantics: ``NEXT_STEP`` autoreset (a
sub-env that ended is reset by the next step, whose action for it is ignored), infos batched with
``_key`` masks.

A sub-env whose step (or autoreset) raises does not take the batch down with it: the other sub-envs' actions
ran, so their results come back as usual, and the failed one's episode is cut off (``truncated``, reward 0, not
evaluated) with an observation saying what failed and ``info["error"] == "env_error"``,
``info["episode_end"] == "env_error"`` and the exception as ``info["env_error"]``; the next step resets it.

A sub-env whose ``reset()`` raises does not either: the others' observations and infos come back, and the failed
one's observation says what failed (nothing was evaluated, not the agent's fault), with ``info["error"] ==
"env_error"`` and the exception as ``info["env_error"]``. A reset has no ``truncated`` to end what it returned,
and under ``NEXT_STEP`` a step that resets a sub-env is dropped by its caller only when the step before ended
the episode; so that observation starts an episode of its own that the next step cuts off as above (its action
not run), and the step after that resets the sub-env. A caller's bookkeeping (``run_vector_episodes`` included)
then records one short ``env_error`` episode, never the error text as the start of the next task's episode. A
:class:`~cudagym.errors.CudaGymError` (``ConfigError``, ``UnknownTaskError``, ...) from a reset still raises: every
sub-env gets the same ``options``, so it is the caller's to fix.

For sub-envs in separate processes use ``vectorization_mode="async"`` with ``vector_kwargs={"shared_memory":
False}``; inside :func:`cudagym.judge.remote.serve_judge` those processes share the parent's judge too.
"""

from __future__ import annotations

import logging
import numbers
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from gymnasium.error import ClosedEnvironmentError
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space
from gymnasium.wrappers import TimeLimit

from cudagym.env_options import positive_int
from cudagym.errors import ConfigError, CudaGymError
from cudagym.tools import judge_waits_on_this_thread

logger = logging.getLogger(__name__)
ENV_ERROR = "env_error"  # info["error"] and info["episode_end"] of a sub-env whose step or reset raised


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
        if max_episode_steps is not None:  # 0 would read as "no TimeLimit", as gym.make refuses it
            positive_int("max_episode_steps", max_episode_steps)
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
        self._reset_errors: dict[int, str] = {}  # sub-envs whose reset raised (the error): the next step ends them
        self.closed = False

    def reset(self, *, seed: int | Sequence[int | None] | None = None,
              options: dict[str, Any] | None = None) -> tuple[tuple[str, ...], dict[str, Any]]:
        """Reset every sub-env (seeds ``seed + i``, or one per sub-env); ``options`` go to each sub-env's reset.

        A sub-env whose reset raises something other than a ``CudaGymError`` gets an observation saying so, and
        the others' resets come back (see the module docstring).

        Raises:
            ConfigError: ``options`` holds ``reset_mask`` (every sub-env is reset here, and one that ended is reset
                by the next step), or anything a sub-env's reset refuses.
        """
        if isinstance(options, dict) and "reset_mask" in options:
            raise ConfigError("expected reset options without 'reset_mask': this vector env resets every sub-env, "
                              "and autoresets one that ended at its next step (NEXT_STEP); call reset() without it")
        self._require_open("reset")
        seeds = _seeds(seed, self.num_envs)
        results = list(self._threads.map(lambda i: self._reset_one(i, seeds[i], options), range(self.num_envs)))
        self._autoreset[:] = False
        self._reset_errors = {i: error for i, (_, _, error) in enumerate(results) if error}
        return tuple(obs for obs, _, _ in results), self._batch_infos([info for _, info, _ in results])

    def _reset_one(self, i: int, seed: int | None,
                   options: dict[str, Any] | None) -> tuple[str, dict[str, Any], str]:
        """Sub-env ``i``'s reset: its observation, its info and ``""``, or those of a failed reset and the error."""
        env = self.envs[i]
        try:
            obs, info = env.reset(seed=seed, options=options)
            return obs, info, ""
        except CudaGymError:
            raise  # the caller's options or setup (the same for every sub-env): misuse, raised as documented
        except Exception as exc:  # the env's, or its host's (reset never raises for an agent's doing)
            logger.exception("sub-env %d raised in reset; the next step ends the episode it could not start", i)
            error = _error_text(exc)
            return *_failed_reset(env, error), error

    def step(self, actions: Sequence[str]) -> tuple[tuple[str, ...], np.ndarray, np.ndarray, np.ndarray,
                                                    dict[str, Any]]:
        """Step every sub-env at once (a sub-env that ended last step is reset instead).

        Raises:
            ConfigError: ``actions`` is not a list, tuple or array of one action per sub-env (a lone str included).
            ClosedEnvironmentError: The vector env was closed.
        """
        self._require_open("step")
        if (isinstance(actions, (str, bytes)) or not isinstance(actions, (Sequence, np.ndarray))
                or getattr(actions, "ndim", 1) != 1):
            raise ConfigError(f"expected a list of {self.num_envs} actions (one str per sub-env), got "
                              f"{type(actions).__name__} {_short(actions)}")
        if len(actions) != self.num_envs:
            raise ConfigError(f"expected {self.num_envs} actions, got {len(actions)}")
        results = self._step_all(actions)
        self._reset_errors = {}  # each of those sub-envs was cut off by this step: the next one resets it
        rewards = np.array([r[1] for r in results], dtype=np.float64)
        terminated = np.array([r[2] for r in results], dtype=np.bool_)
        truncated = np.array([r[3] for r in results], dtype=np.bool_)
        self._autoreset = terminated | truncated
        return tuple(r[0] for r in results), rewards, terminated, truncated, self._batch_infos([r[4] for r in results])

    def _step_all(self, actions: Sequence[str]) -> list[tuple[str, float, bool, bool, dict[str, Any]]]:
        # The sub-envs whose step waits on the judge go first, and the others start only once those have
        # handed their work to the judge: the threads share one GIL, so file tools running alongside would
        # slow each build's start (parse, snapshot, submit) by their own time; after the hand-off they run
        # while the builds do.
        judged = [i for i in range(self.num_envs) if self._waits_on_judge(i, actions[i])]
        handed = _Arrivals(len(judged))
        futures = {i: self._threads.submit(self._step_handing_off, i, actions[i], handed) for i in judged}
        handed.wait()
        for i in range(self.num_envs):
            if i not in futures:
                futures[i] = self._threads.submit(self._step_one, i, actions[i])
        return [futures[i].result() for i in range(self.num_envs)]

    def _step_handing_off(self, i: int, action: str,
                          handed: _Arrivals) -> tuple[str, float, bool, bool, dict[str, Any]]:
        try:
            with judge_waits_on_this_thread(lambda: handed.arrive(i)):
                return self._step_one(i, action)
        finally:
            handed.arrive(i)  # it ended without waiting on the judge (a malformed call, say)

    def _waits_on_judge(self, i: int, action: str) -> bool:
        env: Any = self.envs[i].unwrapped  # a CudaKernelEnv
        return not (self._autoreset[i] or i in self._reset_errors) and bool(env.waits_on_judge(action))

    def _step_one(self, i: int, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        env = self.envs[i]
        if i in self._reset_errors:  # its reset raised: the episode it returned ends here, its action not run
            return _failed_step(env, self._reset_errors[i], resetting=True)
        try:
            if self._autoreset[i]:
                obs, info = env.reset()
                return obs, 0.0, False, False, info
            obs, reward, terminated, truncated, info = env.step(action)
            return obs, float(reward), bool(terminated), bool(truncated), info
        except Exception as exc:  # not the action's fault (step never raises for it): the env's, or its host's
            resetting = bool(self._autoreset[i])
            logger.exception("sub-env %d raised in %s; its episode is cut off", i, "reset" if resetting else "step")
            return _failed_step(env, _error_text(exc), resetting)

    def _batch_infos(self, infos: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """The sub-envs' infos batched as folding gymnasium's ``_add_info`` over them would, a key at a time.

        The same arrays, dtypes, ``_key`` masks and key order; ``_add_info`` allocates a fresh mask for every
        key of every sub-env, which cost more than a millisecond a step with 64 sub-envs.
        """
        batched: dict[str, Any] = {}
        for key in dict.fromkeys(k for info in infos for k in info):
            present = [i for i, info in enumerate(infos) if key in info]
            values = [infos[i][key] for i in present]
            nested = key != "final_obs" and [isinstance(v, dict) for v in values]
            if nested and all(nested):
                batched[key] = self._batch_infos([info.get(key, {}) for info in infos])
            elif nested and any(nested):  # a dict in some sub-envs only: gymnasium's own way, whatever it does
                part: dict[str, Any] = {}
                for i in present:
                    part = self._add_info(part, {key: infos[i][key]}, i)
                batched[key] = part[key]
            else:
                batched[key] = self._info_array(key, present, values)
            everyone = len(present) == self.num_envs
            mask = np.ones(self.num_envs, dtype=np.bool_) if everyone else np.zeros(self.num_envs, dtype=np.bool_)
            if not everyone:
                mask[present] = True
            batched[f"_{key}"] = mask
        return batched

    def _info_array(self, key: str, present: list[int], values: list[Any]) -> np.ndarray:
        # the array gymnasium makes for a key (its type from the first sub-env's value), filled the same way
        first = values[0]
        if key != "final_obs" and isinstance(first, np.ndarray):
            dtype, shape = first.dtype, (self.num_envs, *first.shape)
        elif key != "final_obs" and (type(first) in (int, float, bool) or issubclass(type(first), np.number)):
            dtype, shape = np.dtype(type(first)), (self.num_envs,)
        else:
            dtype, shape = np.dtype(object), (self.num_envs,)
        if len(present) == self.num_envs and len(shape) == 1:
            return np.fromiter(values, dtype=dtype, count=self.num_envs)  # each value set as array[i] = value
        array = np.full(shape, fill_value=None, dtype=object) if dtype.kind == "O" else np.zeros(shape, dtype=dtype)
        for i, value in zip(present, values, strict=True):
            array[i] = value
        return array

    def _require_open(self, call: str) -> None:
        if self.closed:
            raise ClosedEnvironmentError(f"expected an open vector env, but {call}() was called after close(); "
                                         "make a new one with gym.make_vec")

    def render(self) -> Any:
        """Each sub-env's last observation (``render_mode="ansi"``), as a tuple."""
        return tuple(env.render() for env in self.envs)

    def close_extras(self, **kwargs: Any) -> None:
        """Close every sub-env (their queued judge jobs are cancelled) and the threads."""
        for env in self.envs:
            env.close()
        self._threads.shutdown(wait=True)


def _failed_step(env: Any, error: str, resetting: bool) -> tuple[str, float, bool, bool, dict[str, Any]]:
    """The step result of a sub-env whose step or reset raised: its episode cut off, not evaluated, reward 0.

    The sub-env's state is unknown after the exception (the action may have half run), so its episode ends here
    (truncation: the agent did not end it) and the next step resets it.
    """
    where = "starting a new episode" if resetting else "running this step"
    observation = (f"Error: the environment failed while {where} ({error}); this is not the action's fault.\n\n"
                   f"The episode was cut off ({ENV_ERROR}). Episode over. Reward 0: not evaluated.")
    info = {**_failed_info(env), "episode_end": ENV_ERROR, ENV_ERROR: error}
    return observation, 0.0, False, True, info


def _failed_reset(env: Any, error: str) -> tuple[str, dict[str, Any]]:
    """The reset result of a sub-env whose reset raised: no task to work on, nothing evaluated.

    A reset cannot end what it returns, so this observation opens an episode that the next step cuts off without
    running its action (:func:`_failed_step`); the step after that resets the sub-env.
    """
    observation = (f"Error: the environment failed while starting a new episode ({error}); this is not the "
                   "agent's fault, and nothing was evaluated.\n\nNo task was started: the next step ends this "
                   f"episode ({ENV_ERROR}) without running its action, and the step after it starts a new one.")
    return observation, {**_failed_info(env), ENV_ERROR: error}


def _failed_info(env: Any) -> dict[str, Any]:
    """The info keys a failed step and a failed reset share."""
    task = getattr(env.unwrapped, "task", None)
    return {"task_id": task.id if task is not None else "", "tool": "", "ok": False, "error": ENV_ERROR,
            "evaluated": False}


def _error_text(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"


class _Arrivals:
    """Which of ``expected`` sub-envs have arrived (each counts once); :meth:`wait` returns when all have."""

    def __init__(self, expected: int) -> None:
        self._expected = expected
        self._arrived: set[int] = set()
        self._lock = threading.Lock()
        self._all = threading.Event()
        if expected == 0:
            self._all.set()

    def arrive(self, i: int) -> None:
        """Sub-env ``i`` arrived (again, or for the first time)."""
        with self._lock:
            self._arrived.add(i)
            if len(self._arrived) >= self._expected:
                self._all.set()

    def wait(self) -> None:
        """Until every expected sub-env has arrived."""
        self._all.wait()


def _seeds(seed: int | Sequence[int | None] | None, n: int) -> list[int | None]:
    if seed is None:
        return [None] * n
    if isinstance(seed, numbers.Integral) and not isinstance(seed, bool):  # numpy's ints too
        return [int(seed) + i for i in range(n)]
    if isinstance(seed, (str, bytes)) or not isinstance(seed, (Sequence, np.ndarray)):
        raise ConfigError(f"expected seed to be an int, None, or a list of {n} (one per sub-env), got "
                          f"{type(seed).__name__} {_short(seed)}")
    seeds = list(seed)
    if len(seeds) != n:
        raise ConfigError(f"expected {n} seeds, got {len(seeds)}")
    return seeds


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."
