"""The suite registry: suite names -> task sources, and task ids -> the suite that owns them.

Built-in suites:

============  ==========================================================  ================================
suite         ids                                                         data
============  ==========================================================  ================================
kernelbench   ``L1/19_ReLU`` (levels 1-4)                                 checkout, parquet, or the hub
ops6k         ``ops6k/000123_Conv2d_ReLU``                                parquet or the hub
bundled       ``bundled/L1/01_Swish``                                     shipped in the package
============  ==========================================================  ================================

Every suite accepts ``level=`` (KernelBench level; bundled level; Ops-6K number of composed ops) besides
its own filters. Loading touches disk or network only when tasks are asked for.

Example:
    >>> from cudagym.suites import load_tasks, get_task
    >>> tasks = load_tasks("bundled", level=1)  # doctest: +SKIP
    >>> get_task("L1/19_ReLU").name  # doctest: +SKIP
    '19_ReLU'
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cudagym.errors import ConfigError, UnknownTaskError
from cudagym.sources.base import TaskSource
from cudagym.task import Task

LevelArg = int | Iterable[int]


@dataclass(frozen=True)
class Suite:
    """A named family of tasks and how to load it.

    Attributes:
        name: Suite name (``Task.suite`` of its tasks).
        summary: One line for listings.
        factory: Builds the source from filter keyword arguments.
        filters: Keyword arguments ``factory`` accepts.
        id_pattern: Matches the ids this suite owns.
        route: Filters that load the source holding a matched id (cheaply: one level, one row).
        level_filter: Turns a generic ``level=`` into this suite's own filters.
    """

    name: str
    summary: str
    factory: Callable[..., TaskSource]
    filters: tuple[str, ...]
    id_pattern: re.Pattern[str]
    route: Callable[[re.Match[str]], dict[str, Any]]
    level_filter: Callable[[LevelArg], dict[str, Any]]

    def owns(self, task_id: str) -> re.Match[str] | None:
        """The match when ``task_id`` has this suite's id form, else None."""
        return self.id_pattern.match(task_id)


def _kernelbench(**filters: Any) -> TaskSource:
    from cudagym.sources.kernelbench import kernelbench_source

    return kernelbench_source(**filters)


def _ops6k(**filters: Any) -> TaskSource:
    from cudagym.sources.ops6k import Ops6KSource

    return Ops6KSource(**filters)


def _bundled(**filters: Any) -> TaskSource:
    from cudagym.sources.bundled import BundledSource

    return BundledSource(**filters)


def _ops_level(level: LevelArg) -> dict[str, Any]:
    if isinstance(level, bool) or not isinstance(level, int):
        raise ConfigError(f"expected one int level (number of composed ops) for ops6k, got {level!r}")
    return {"min_ops": level, "max_ops": level}


SUITES: dict[str, Suite] = {}


def register_suite(suite: Suite, *, replace: bool = False) -> None:
    """Add a suite to the registry.

    Raises:
        ConfigError: The name is taken and ``replace`` is False.
    """
    if suite.name in SUITES and not replace:
        raise ConfigError(f"suite {suite.name!r} is already registered; pass replace=True to override it")
    SUITES[suite.name] = suite


register_suite(Suite(
    name="kernelbench",
    summary="KernelBench levels 1-4 (a checkout via $CUDAGYM_KERNELBENCH_DIR, parquet, or the HF hub)",
    factory=_kernelbench,
    filters=("level", "root", "parquet", "revision", "strict"),
    id_pattern=re.compile(r"^L([1-4])/.+$"),  # a file name may hold a space
    route=lambda m: {"level": int(m.group(1))},
    level_filter=lambda level: {"level": level},
))
register_suite(Suite(
    name="ops6k",
    summary="CUDA-Agent-Ops-6K, 6,000 composed-operator tasks (parquet via $CUDAGYM_OPS6K_PARQUET or the HF hub)",
    factory=_ops6k,
    filters=("path", "min_ops", "max_ops", "ops", "limit", "rows", "strict", "revision", "refresh"),
    id_pattern=re.compile(r"^ops6k/(\d+)(?:_\S*)?$"),
    route=lambda m: {"rows": [int(m.group(1))]},
    level_filter=_ops_level,
))
register_suite(Suite(
    name="bundled",
    summary="tasks shipped with cudagym, each with a reference solution",
    factory=_bundled,
    filters=("levels", "root"),
    id_pattern=re.compile(r"^bundled/L(\d+)/.+$"),
    route=lambda m: {"levels": int(m.group(1))},
    level_filter=lambda level: {"levels": level},
))


def suite_names() -> list[str]:
    """Registered suite names."""
    return list(SUITES)


def get_suite(name: str) -> Suite:
    """The suite called ``name``.

    Raises:
        UnknownTaskError: No such suite; the message lists the registered ones.
    """
    try:
        return SUITES[name]
    except KeyError:
        raise UnknownTaskError(f"unknown suite {name!r}; expected one of: {', '.join(SUITES)}") from None


def load_source(suite: str, **filters: Any) -> TaskSource:
    """The task source of ``suite`` with these filters (nothing is read until its tasks are asked for).

    Raises:
        UnknownTaskError: Unknown suite.
        ConfigError: A filter the suite does not accept.
    """
    spec = get_suite(suite)
    return spec.factory(**_resolve_filters(spec, filters))


def _resolve_filters(spec: Suite, filters: Mapping[str, Any]) -> dict[str, Any]:
    resolved = {k: v for k, v in filters.items() if v is not None}
    accepted = list(dict.fromkeys(("level", *spec.filters)))
    unknown = sorted(set(resolved) - set(accepted))
    if unknown:
        import difflib

        close = {name: difflib.get_close_matches(name, accepted, n=1) for name in unknown}
        hints = "".join(f"; did you mean {hit[0]!r} for {name!r}?" for name, hit in close.items() if hit)
        raise ConfigError(
            f"suite {spec.name!r} accepts the options (suite_options keys) {', '.join(accepted)}; "
            f"got {', '.join(unknown)}{hints}"
        )
    for name, value in resolved.items():
        if name in _FILTER_VALUES and not _FILTER_VALUES[name][1](value):
            raise ConfigError(f"suite {spec.name!r}: expected suite_options[{name!r}] to be {_FILTER_VALUES[name][0]}, "
                              f"got {type(value).__name__} {value!r}")
    if "level" in resolved and "level" not in spec.filters:
        resolved.update(spec.level_filter(resolved.pop("level")))
    return resolved


def _is_path(value: Any) -> bool:
    return isinstance(value, (str, os.PathLike))


def _are(kind: type, value: Any) -> bool:
    """A list, tuple or set of ``kind`` (no bools among ints)."""
    return isinstance(value, (list, tuple, set, frozenset)) and all(
        isinstance(v, kind) and not isinstance(v, bool) for v in value)


# What the filters that several suites share must hold, checked once here for every suite (the levels and counts
# are the sources' own: their ranges differ). Anything else reached deep inside a loader as a TypeError.
_FILTER_VALUES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "root": ("a folder path (str or os.PathLike)", _is_path),
    "parquet": ("a file or folder path (str or os.PathLike)", _is_path),
    "path": ("a file or folder path (str or os.PathLike)", _is_path),
    "revision": ("a hub revision (str)", lambda v: isinstance(v, str)),
    "strict": ("True or False", lambda v: isinstance(v, bool)),
    "refresh": ("True or False", lambda v: isinstance(v, bool)),
    "ops": ("an op name (str) or a list of them", lambda v: isinstance(v, str) or _are(str, v)),
    "rows": ("a list of row numbers (ints)", lambda v: _are(int, v)),
}


def load_tasks(suite: str, *, ids: Iterable[str] | None = None, **filters: Any) -> tuple[Task, ...]:
    """The tasks of ``suite`` that pass ``filters``; with ``ids``, exactly those tasks in that order.

    Raises:
        UnknownTaskError: Unknown suite, or an id in ``ids`` that the filtered suite lacks.
        ConfigError: A filter the suite does not accept.
        DataUnavailableError: The suite's data is missing; the message says how to provide it.
    """
    source = load_source(suite, **filters)
    if ids is None:
        return source.tasks()
    return tuple(source.get(task_id) for task_id in ids)


def suite_of(task_id: str) -> Suite:
    """The suite whose id form ``task_id`` has.

    Raises:
        UnknownTaskError: No suite owns ids of this form.
    """
    for spec in SUITES.values():
        if spec.owns(task_id):
            return spec
    raise UnknownTaskError(
        f"cannot tell the suite of task id {task_id!r}; expected L<1-4>/<id>_<Name> (kernelbench), "
        f"ops6k/<row>_<Ops> or bundled/L<n>/<NN>_<Name>"
    )


def source_for_id(task_id: str, **options: Any) -> TaskSource:
    """A source, as small as its suite allows, that holds ``task_id`` (``options`` as in :func:`load_source`)."""
    spec = suite_of(task_id)
    match = spec.owns(task_id)
    assert match is not None  # suite_of matched it
    return load_source(spec.name, **{**options, **spec.route(match)})


# Optional packages that some tasks' reference code imports, and the extra that installs each.
OPTIONAL_TASK_MODULES: dict[str, str] = {"transformers": "kernelbench-l4"}


def missing_task_modules(tasks: Iterable[Task]) -> dict[str, list[str]]:
    """Optional packages the tasks import that this interpreter lacks: module -> ids of the tasks needing it.

    Listing and building never need them; the GPU worker does, to run the reference. Read off the source
    text, never by importing the task.
    """
    missing: dict[str, list[str]] = {}
    for module in OPTIONAL_TASK_MODULES:
        pattern = re.compile(rf"^\s*(?:from|import)\s+{module}\b", re.M)
        users = [t.id for t in tasks if module in t.source and pattern.search(t.source)]
        if users and not _importable(module):
            missing[module] = users
    return missing


def _importable(module: str) -> bool:
    import importlib.util
    import sys

    if module in sys.modules:
        return sys.modules[module] is not None
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def get_task(task_id: str, **options: Any) -> Task:
    """The task with this id, from the suite its prefix names.

    Args:
        task_id: E.g. ``L1/19_ReLU``, ``bundled/L1/01_Swish``, ``ops6k/000123_Conv2d_ReLU``.
        **options: Data location options of that suite (``root=``, ``parquet=``, ``path=``...).

    Raises:
        UnknownTaskError: The id has no known form, or its suite has no such task.
        DataUnavailableError: The suite's data is missing; the message says how to provide it.
    """
    return source_for_id(task_id, **options).get(task_id)
