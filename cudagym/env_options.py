"""The env's options, checked where they enter: gym.make's keyword arguments and ``reset(options=...)``.

:class:`~cudagym.env.CudaKernelEnv` calls these once, in its constructor and at the top of ``reset``, so a bad
value is a :class:`~cudagym.errors.ConfigError` naming the option, what it expects and what it got, before
anything acts on it. The options with a home of their own are checked there, by the same call the env makes to
resolve them: ``protocol`` (:func:`cudagym.judge.protocol.get_protocol`), ``solution_format``
(:func:`cudagym.solution.get_format`), ``workspace_limits`` (:meth:`cudagym.workspace.WorkspaceLimits.of`),
``suite_options`` values (:func:`cudagym.suites.load_source`), ``reward`` and ``scoring`` (``cudagym.reward``),
``token_counter`` (``cudagym.tokens``) and ``judge_options`` (``cudagym.judge.backends``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from cudagym.errors import ConfigError
from cudagym.task import Task

# The keys ``reset(options=...)`` accepts. Gymnasium's vector envs and wrappers add none on the way to a sub-env
# (SyncVectorEnv and AsyncVectorEnv take their own ``reset_mask`` out first), so any other key is a mistake: a
# misspelt "task" would otherwise quietly draw a random task.
RESET_OPTIONS: dict[str, str] = {
    "task": "a task id of this env's list (str), a Task, or None (drawn from the seed)",
}


def reset_options(options: object) -> Mapping[str, Any]:
    """``reset``'s options, checked: None or a dict of :data:`RESET_OPTIONS` keys.

    Raises:
        ConfigError: Not a dict, an unknown key, or a ``task`` that is neither None, a str nor a Task.
    """
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise ConfigError(f"expected reset options to be a dict such as {{'task': 'bundled/L1/01_Swish'}} or None, "
                          f"got {type(options).__name__} {options!r}")
    unknown = sorted(repr(k) for k in options if k not in RESET_OPTIONS)
    if unknown:
        known = "; ".join(f"{k!r}, {what}" for k, what in RESET_OPTIONS.items())
        raise ConfigError(f"unknown reset option(s) {', '.join(unknown)}; expected only these keys: {known}")
    task = options.get("task")
    if task is not None and not isinstance(task, (str, Task)):
        raise ConfigError(f"expected reset options['task'] to be {RESET_OPTIONS['task']}, got "
                          f"{type(task).__name__} {task!r}")
    return options


def positive_int(name: str, value: object) -> int:
    """``value`` when it is an int >= 1 (not a bool).

    Raises:
        ConfigError: Anything else, naming ``name``.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"expected {name} to be a positive int, got {value!r}")
    return value


def flag(name: str, value: object) -> bool:
    """``value`` when it is True or False (a truthy string such as ``"no"`` would read as True).

    Raises:
        ConfigError: Anything else, naming ``name``.
    """
    if not isinstance(value, bool):
        raise ConfigError(f"expected {name} to be True or False, got {type(value).__name__} {value!r}")
    return value


def plain_dict(name: str, value: object) -> dict[str, Any]:
    """A copy of ``value`` when it is a dict (or another Mapping) or None (an empty dict).

    Raises:
        ConfigError: Anything else, naming ``name``.
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"expected {name} to be a dict or None, got {type(value).__name__} {value!r}")
    return dict(value)


def suite_name(value: object) -> str:
    """``value`` when it is a str (an unknown name is refused, listing the suites, when the tasks load).

    Raises:
        ConfigError: Not a str.
    """
    if not isinstance(value, str):
        raise ConfigError(f"expected suite to be a suite name such as 'bundled' or 'kernelbench', got "
                          f"{type(value).__name__} {value!r}")
    return value


def task_ids(tasks: object) -> list[str] | None:
    """The ``tasks`` option as a list of ids: None, one id (a str) or a non-empty list or tuple of ids.

    Raises:
        ConfigError: An empty list, or anything but task id strings.
    """
    if tasks is None:
        return None
    if isinstance(tasks, str):
        return [tasks]  # one id, not its letters
    ids = list(tasks) if isinstance(tasks, (list, tuple)) else None
    if not ids or not all(isinstance(i, str) for i in ids):
        raise ConfigError(f"expected tasks to be a task id (str), a non-empty list of them, or None, got "
                          f"{type(tasks).__name__} {tasks!r}")
    return ids


def task_filter(value: object) -> Callable[[Task], bool] | None:
    """``value`` when it is None or callable.

    Raises:
        ConfigError: Anything else.
    """
    if value is not None and not callable(value):
        raise ConfigError(f"expected task_filter to be a callable (Task) -> bool or None, got "
                          f"{type(value).__name__} {value!r}")
    return value


def workspace_dir(value: object) -> str | None:
    """``value`` as a str when it names an existing folder, or None (the system's temp folder).

    Raises:
        ConfigError: Not a str or path, or not an existing folder.
    """
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise ConfigError(f"expected workspace_dir to be a folder path (str) or None, got {type(value).__name__} "
                          f"{value!r}")
    path = os.fspath(value)
    if not isinstance(path, str) or not os.path.isdir(path):
        raise ConfigError(f"expected workspace_dir to be an existing folder, got {value!r}; create it first or pass "
                          "None for the system's temp folder")
    return path
