"""TRL: a class for ``GRPOTrainer(environment_factory=...)`` whose public methods are cudagym's tools.

TRL builds one instance per rollout, exposes every public method except ``reset`` and ``get_reward`` as a
tool (schema from the type hints and the Google-style docstring), calls ``reset(**row)`` with the dataset
row before generating (the returned text is appended to the last user message as it is, ``content +
observation``, so it opens with :data:`PROMPT_SEPARATOR`), runs the model's tool
calls against the methods, and scores the rollout with ``get_reward()``.

A row names its task with ``task`` (or ``task_id``), e.g. ``{"prompt": [{"role": "user", "content":
"Make this faster."}], "task": "bundled/L1/01_Swish"}``; without one, the task is drawn from ``seed``.

The instance is picklable (TRL's async trainer ships it to a rollout process): the env inside drops a
judge it made and builds it again where it is unpickled, so that process reaches the judge it is
configured for (``judge=`` a backend name from :data:`cudagym.env.JUDGES`, e.g. a client of a remote
judge, since the rollout process may have no GPU), or carries a Judge instance that pickles itself.

Example:
    >>> from functools import partial
    >>> from trl import GRPOConfig, GRPOTrainer
    >>> from cudagym.integrations.trl import CudaKernelTools
    >>> trainer = GRPOTrainer(model, args=GRPOConfig(...), train_dataset=rows,  # doctest: +SKIP
    ...                       environment_factory=partial(CudaKernelTools, suite="bundled"))
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Mapping
from typing import Any

from cudagym.env import CudaKernelEnv
from cudagym.errors import ConfigError

PROMPT_SEPARATOR = "\n\n"
"""What :meth:`CudaKernelTools.reset` puts before the task prompt: TRL joins it to the row's user message with no
space (``"Make it fast." + observation``), so without one the model would read ``Make it fast.# Task: ...``."""


class CudaKernelTools:
    """One cudagym episode driven by TRL's tool-calling loop (methods = tools)."""

    def __init__(self, suite: str = "bundled", **env_kwargs: Any) -> None:
        """Build the env (nothing is loaded until the first reset).

        Args:
            suite: The task suite.
            **env_kwargs: More :class:`~cudagym.env.CudaKernelEnv` arguments (``judge``, ``solution_format``,
                ``max_turns``, ``token_counter``, ...).
        """
        self._env = CudaKernelEnv(suite, **env_kwargs)
        self._done = True
        self._reward = 0.0
        self._task_id = ""
        self._last_info: dict[str, Any] = {}

    # -- the trainer's hooks (not tools) -----------------------------------------------------------

    def reset(self, **row: Any) -> str:
        """Start an episode on the row's task; returns the task prompt behind :data:`PROMPT_SEPARATOR`.

        TRL appends the returned text to the row's last user message as it is.

        Args:
            **row: The dataset row: ``task`` or ``task_id`` names the task, ``seed`` draws one; other
                fields (``prompt``, ...) are ignored.

        Raises:
            ConfigError: ``task`` and ``task_id`` name different tasks, or ``seed`` is not a whole number >= 0.
            UnknownTaskError: The row's task is not one of the env's.
        """
        task, seed = _row_task(row), _row_seed(row.get("seed"))
        # Until the env has started the row's episode there is none: a reset that raises leaves the tools
        # saying so (and get_reward 0), not stepping an env whose last episode it ended.
        self._done, self._reward, self._task_id, self._last_info = True, 0.0, "", {}
        observation, info = self._env.reset(seed=seed, options={"task": task} if task is not None else None)
        self._done, self._reward = False, 0.0
        self._task_id = str(info.get("task_id", ""))
        self._last_info = dict(info)
        return PROMPT_SEPARATOR + observation

    def get_reward(self) -> float:
        """The episode's reward: its final score, or, when the model never submitted, the score of a submit now."""
        if not self._done and self._task_id:
            self._call("submit")
        return self._reward

    @property
    def info(self) -> dict[str, Any]:
        """The env's info dict of the last step."""
        return dict(self._last_info)

    # -- the tools ---------------------------------------------------------------------------------

    def read_file(self, path: str, offset: int | None = None, limit: int | None = None) -> str:
        """Read a text file of the workspace, with line numbers.

        Args:
            path: Path relative to the workspace root, e.g. kernels/relu.cu.
            offset: First line to show (1-based).
            limit: Most lines to show.
        """
        return self._call("read_file", path=path, offset=offset, limit=limit)

    def write_file(self, path: str, content: str) -> str:
        """Create or overwrite a writable file (model_new.py, kernels/...) with the given text.

        Args:
            path: Path relative to the workspace root, e.g. kernels/relu.cu.
            content: The whole new file.
        """
        return self._call("write_file", path=path, content=content)

    def edit_file(self, path: str, old: str, new: str, replace_all: bool = False) -> str:
        """Replace an exact string in a writable file; it must occur exactly once unless replace_all is true.

        Args:
            path: Path relative to the workspace root.
            old: Exact text to find (whitespace matters).
            new: Replacement text.
            replace_all: Replace every occurrence.
        """
        return self._call("edit_file", path=path, old=old, new=new, replace_all=replace_all)

    def list_files(self, path: str | None = None) -> str:
        """List the files of the workspace (or of one folder) with sizes and which are read-only.

        Args:
            path: Folder relative to the workspace root (default: the root).
        """
        return self._call("list_files", path=path)

    def compile(self) -> str:
        """Build the solution and report compiler errors, warnings and per-kernel resources."""
        return self._call("compile")

    def verify(self) -> str:
        """Build, then check the outputs against the reference on the protocol's inputs."""
        return self._call("verify")

    def profile(self) -> str:
        """Verify, then time candidate, eager PyTorch and torch.compile, with a per-kernel breakdown."""
        return self._call("profile")

    def submit(self) -> str:
        """End the episode: the final evaluation scores the current files."""
        return self._call("submit")

    # -- plumbing ----------------------------------------------------------------------------------

    def _call(self, name: str, **arguments: Any) -> str:
        if not self._task_id:
            return "No episode is running: the trainer calls reset() with a dataset row first."
        if self._done:
            return f"The episode is over (reward {self._reward:g}); {name} did not run."
        given = {k: v for k, v in arguments.items() if v is not None}
        try:
            action = json.dumps({"name": name, "arguments": given})
        except (TypeError, ValueError) as exc:  # not JSON data: the env could not be told what was meant
            return f"Error: {name}: expected JSON values (str, int, bool) as arguments, got {exc}; {name} did not run."
        observation, reward, terminated, truncated, info = self._env.step(action)
        self._last_info = dict(info)
        if terminated or truncated:
            self._done, self._reward = True, float(reward)
        return observation

    # Not a public method: TRL would offer it to the model as a tool. Each reset removes the last workspace.
    def _close(self) -> None:
        """Remove the workspace (and stop a judge the env made)."""
        self._env.close()

    def __enter__(self) -> CudaKernelTools:
        return self

    def __exit__(self, *exc: object) -> None:
        self._close()


def _row_task(row: Mapping[str, Any]) -> str | None:
    """The task a dataset row names in ``task`` or ``task_id`` (None for neither, or both empty).

    Raises:
        ConfigError: The two name different tasks, or one is not a str.
    """
    named = {key: row[key] for key in ("task", "task_id") if row.get(key) not in (None, "")}
    for key, value in named.items():
        if not isinstance(value, str):
            raise ConfigError(f"expected the row's {key} to be a task id (str), got {type(value).__name__} {value!r}")
    if len(set(named.values())) > 1:
        raise ConfigError(f"expected the row's task and task_id to name one task, got {named['task']!r} and "
                          f"{named['task_id']!r}; give one of them")
    return next(iter(named.values()), None)


def _row_seed(seed: object) -> int | None:
    """The row's ``seed`` as an int (an int of any kind, numpy's included, or a str of digits), or None.

    Raises:
        ConfigError: Anything else: a bool, a fraction, a negative number, other text.
    """
    if seed is None:
        return None
    value: int | None = None
    if isinstance(seed, numbers.Integral) and not isinstance(seed, bool):
        value = int(seed)
    elif isinstance(seed, str) and seed.strip().isdigit():
        value = int(seed)
    if value is None or value < 0:
        raise ConfigError(f"expected the row's seed to be a whole number >= 0 (or None to draw freely), got "
                          f"{type(seed).__name__} {seed!r}")
    return value
