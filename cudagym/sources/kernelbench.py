"""KernelBench levels 1-4, from a git checkout or from the Hugging Face data set; both give the same ids.

- Checkout (github.com/ScalingIntelligence/KernelBench): ``KernelBench/level{N}/<id>_<Name>.py``.
- Hub (``ScalingIntelligence/KernelBench``): splits ``level_1`` .. ``level_4`` stored as
  ``data/level_{N}-00000-of-00001.parquet`` with columns ``code``, ``level``, ``name`` (no ``.py``) and
  ``problem_id``.

Task ids are ``L{level}/<id>_<Name>`` (``L1/19_ReLU``), in numeric problem order. Files are parsed, never
executed. A problem that is not KernelBench format (a local edit gone wrong) is skipped with a warning and
counted in ``skipped`` (``skipped_problems`` says why; ``strict=True`` raises instead), as Ops-6K does: one
bad file never makes a whole level unloadable.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudagym.errors import ConfigError, DataUnavailableError, TaskFormatError
from cudagym.sources.base import TaskSource
from cudagym.sources.hub import (
    HubDataset,
    fetch_snapshot,
    files_for_split,
    parquet_files,
    provide_option,
    read_rows,
    source_cell,
)
from cudagym.task import Task, make_task, read_task_file

logger = logging.getLogger(__name__)

SUITE = "kernelbench"
LEVELS = (1, 2, 3, 4)
ROOT_ENV = "CUDAGYM_KERNELBENCH_DIR"
PARQUET_ENV = "CUDAGYM_KERNELBENCH_PARQUET"
REPO_URL = "https://github.com/ScalingIntelligence/KernelBench"
ENV_ID = "CudaKernel-L1-v0"
CHECKOUT_WAY = (
    f"a KernelBench checkout (`git clone {REPO_URL}`; the repository root or its KernelBench/ folder): "
    + provide_option(ENV_ID, SUITE, "root", ROOT_ENV)
)
HF_DATASET = HubDataset(
    repo_id="ScalingIntelligence/KernelBench",
    allow_patterns=("*.parquet",),
    path_env=PARQUET_ENV,
    path_arg="parquet",
    suite=SUITE,
    env_id=ENV_ID,
    other_ways=(CHECKOUT_WAY,),
)
HF_COLUMNS = ("code", "level", "name", "problem_id")

_PROBLEM_FILE = re.compile(r"^(\d+)_(.+)\.py$")


@dataclass(frozen=True)
class SkippedProblem:
    """A KernelBench problem that could not be made into a task.

    Attributes:
        id: The task id it would have had.
        reason: What is wrong, naming the file or row.
    """

    id: str
    reason: str


class _Skipping:
    """Turns malformed problems into :class:`SkippedProblem` records (or raises them, when strict)."""

    def __init__(self, strict: bool) -> None:
        self.strict = strict
        self.skipped: list[SkippedProblem] = []

    def task(self, source: object | Callable[[], str], *, id: str, level: int, name: str, origin: str,
             metadata: dict[str, Any]) -> Task | None:
        """The task, or None (logged and recorded) when the source is not KernelBench format.

        ``source`` is the code cell, or a function that reads the file (its TaskFormatError is recorded too).
        """
        try:
            text = source() if callable(source) else source_cell(source, column="code", origin=origin)
            return make_task(text, id=id, suite=SUITE, level=level, name=name, origin=origin, metadata=metadata)
        except TaskFormatError as exc:
            self.skip(id, exc)
            return None

    def skip(self, id: str, exc: TaskFormatError) -> None:
        """Record the problem ``id`` as skipped for ``exc`` (raise it when strict)."""
        if self.strict:
            raise exc
        logger.warning("skipping KernelBench problem %s: %s", id, exc)
        self.skipped.append(SkippedProblem(id, str(exc)))


def normalize_levels(level: int | Iterable[int] | None) -> tuple[int, ...]:
    """The KernelBench levels asked for, sorted; None means all four.

    Raises:
        ConfigError: A level outside 1-4.
    """
    if level is None:
        return LEVELS
    wanted = (level,) if isinstance(level, int) else tuple(level)
    bad = [lv for lv in wanted if isinstance(lv, bool) or not isinstance(lv, int) or lv not in LEVELS]
    if bad or not wanted:
        raise ConfigError(f"expected KernelBench levels among {LEVELS}, got {level!r}")
    return tuple(sorted(set(wanted)))


def task_id(level: int, name: str) -> str:
    """The id of a KernelBench problem: ``L{level}/{name}`` with ``name`` like ``19_ReLU``."""
    return f"L{level}/{name}"


def _checkout_hint() -> str:
    return HF_DATASET.how_to_provide()


def find_checkout(root: str | Path | None = None) -> Path:
    """The ``KernelBench/`` folder that holds ``level1/`` .. ``level4/``.

    Args:
        root: The repository root or its ``KernelBench/`` folder; ``$CUDAGYM_KERNELBENCH_DIR`` when None.

    Raises:
        DataUnavailableError: No root given, or it holds no ``level{N}/`` folders.
    """
    given = root if root is not None else os.environ.get(ROOT_ENV)
    if not given:
        raise DataUnavailableError(f"no KernelBench checkout given; {_checkout_hint()}")
    base = Path(given).expanduser()
    for candidate in (base, base / "KernelBench"):
        if any((candidate / f"level{lv}").is_dir() for lv in LEVELS):
            return candidate
    raise DataUnavailableError(
        f"expected a KernelBench checkout at {base} (with KernelBench/level1/ .. level4/ or level1/ .. "
        f"level4/ directly), found none; {_checkout_hint()}"
    )


class KernelBenchSource(TaskSource):
    """KernelBench problems read from a git checkout.

    Args:
        level: One level (1-4), several, or None for all.
        root: The checkout (repository root or its ``KernelBench/`` folder); ``$CUDAGYM_KERNELBENCH_DIR``
            when None. Resolved when the tasks are first loaded.
        strict: Raise on a file that is not KernelBench format; by default it is skipped, logged and
            counted in :attr:`skipped`.

    Example:
        >>> src = KernelBenchSource(1, root="~/KernelBench")  # doctest: +SKIP
        >>> src.get("L1/19_ReLU").level  # doctest: +SKIP
        1
    """

    suite = SUITE

    def __init__(self, level: int | Iterable[int] | None = None, root: str | Path | None = None, *,
                 strict: bool = False) -> None:
        super().__init__()
        self.levels = normalize_levels(level)
        self._root = root
        self._skipping = _Skipping(strict)

    @property
    def skipped(self) -> int:
        """How many problems were skipped as malformed (0 before loading)."""
        return len(self._skipping.skipped)

    @property
    def skipped_problems(self) -> tuple[SkippedProblem, ...]:
        """The skipped problems with their reasons."""
        return tuple(self._skipping.skipped)

    def describe(self) -> str:
        """Where the tasks come from."""
        where = self._root if self._root is not None else f"${ROOT_ENV}"
        return f"KernelBench checkout {where} (levels {', '.join(map(str, self.levels))})"

    def _load(self) -> Sequence[Task]:
        base = find_checkout(self._root)
        self._skipping.skipped.clear()
        tasks: list[Task] = []
        for level in self.levels:
            tasks.extend(_load_level_dir(base, level, self._skipping))
        return tasks


def _load_level_dir(base: Path, level: int, skipping: _Skipping) -> list[Task]:
    folder = base / f"level{level}"
    if not folder.is_dir():
        raise DataUnavailableError(f"expected KernelBench level {level} at {folder}, not found; {_checkout_hint()}")
    numbered: list[tuple[int, Path]] = []
    for path in folder.iterdir():
        match = _PROBLEM_FILE.match(path.name)
        if match and path.is_file():
            numbered.append((int(match.group(1)), path))
        elif path.suffix == ".py" and not path.name.startswith("__"):
            logger.warning("skipping %s: expected a file named <id>_<Name>.py", path)
    if not numbered:
        raise DataUnavailableError(
            f"expected KernelBench problem files <id>_<Name>.py in {folder}, found none; {_checkout_hint()}"
        )
    tasks = []
    for problem_id, path in sorted(numbered, key=lambda item: (item[0], item[1].name)):
        name = path.stem
        task = skipping.task(functools.partial(_read_problem, path), id=task_id(level, name),
                             level=level, name=name, origin=str(path),
                             metadata={"problem_id": problem_id, "source": "checkout"})
        if task is not None:
            tasks.append(task)
    return tasks


def _read_problem(path: Path) -> str:
    """A problem file's text, decoded as Python decodes it; TaskFormatError when it cannot be read."""
    try:
        return read_task_file(path)
    except OSError as exc:
        raise TaskFormatError(f"{path}: cannot be read ({exc.strerror or exc})") from None


class KernelBenchHubSource(TaskSource):
    """KernelBench problems from the Hugging Face data set ``ScalingIntelligence/KernelBench``.

    Reads local parquet files when given (argument or ``$CUDAGYM_KERNELBENCH_PARQUET``); otherwise the
    hub snapshot in cudagym's cache, downloading it on a cache miss (see :mod:`cudagym.sources.hub`).

    Args:
        level: One level (1-4), several, or None for all.
        parquet: A parquet file or a folder of them (e.g. a downloaded snapshot); rows are picked by their
            ``level`` column, files by split name where they carry one.
        revision: Hub branch, tag or commit (default: the main branch).
        refresh: Ask the hub even when a cached snapshot exists.
        strict: Raise on a row that is not KernelBench format; by default it is skipped, logged and
            counted in :attr:`skipped`.
    """

    suite = SUITE

    def __init__(
        self,
        level: int | Iterable[int] | None = None,
        parquet: str | Path | None = None,
        *,
        revision: str | None = None,
        refresh: bool = False,
        strict: bool = False,
    ) -> None:
        super().__init__()
        self._skipping = _Skipping(strict)
        self.levels = normalize_levels(level)
        self._parquet = parquet if parquet is not None else os.environ.get(PARQUET_ENV) or None
        self._revision = revision
        self._refresh = refresh

    def describe(self) -> str:
        """Where the tasks come from."""
        where = self._parquet or f"hub {HF_DATASET.repo_id}"
        return f"KernelBench parquet {where} (levels {', '.join(map(str, self.levels))})"

    @property
    def skipped(self) -> int:
        """How many rows were skipped as malformed (0 before loading)."""
        return len(self._skipping.skipped)

    @property
    def skipped_problems(self) -> tuple[SkippedProblem, ...]:
        """The skipped rows with their reasons."""
        return tuple(self._skipping.skipped)

    def _load(self) -> Sequence[Task]:
        how_to = HF_DATASET.how_to_provide()
        self._skipping.skipped.clear()
        root = self._parquet or fetch_snapshot(HF_DATASET, revision=self._revision, refresh=self._refresh)
        files = parquet_files(root, how_to=how_to)
        tasks: list[Task] = []
        for level in self.levels:
            split_files = files_for_split(files, f"level_{level}")
            rows = [r for r in read_rows(split_files, HF_COLUMNS, how_to=how_to) if _row_level(r) == level]
            if not rows:
                raise DataUnavailableError(
                    f"expected KernelBench level {level} rows (split level_{level}) in {root}, found none; {how_to}"
                )
            tasks.extend(_tasks_from_rows(rows, level, origin=f"{root}:level_{level}", skipping=self._skipping))
        return tasks


def _row_level(row: dict[str, Any]) -> int | None:
    # the hub's column is int64; accept "1" or "level_1" too rather than silently dropping every row
    match = re.search(r"\d+", str(row["level"]))
    return int(match.group()) if match else None


def _problem_id(row: dict[str, Any]) -> int | None:
    """The row's problem number: its ``problem_id`` cell, else the number its name starts with (``19_ReLU``)."""
    value = row["problem_id"]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = re.match(r"^(\d+)_", row["name"]) if isinstance(row["name"], str) else None
    return int(match.group(1)) if match else None


def _tasks_from_rows(rows: list[dict[str, Any]], level: int, *, origin: str, skipping: _Skipping) -> list[Task]:
    by_id: dict[str, Task] = {}
    numbered: list[tuple[int, str, dict[str, Any]]] = []
    for index, row in enumerate(rows):
        name = row["name"].strip().removesuffix(".py") if isinstance(row["name"], str) else ""
        problem_id = _problem_id(row)
        if not name or problem_id is None:
            expected = ("a name like 19_ReLU in the name column" if not name else
                        "an int problem_id, or a name that starts with the problem's number")
            got = f"name {row['name']!r:.80}" if not name else f"problem_id {row['problem_id']!r:.80}"
            skipping.skip(f"{origin}:row {index}", TaskFormatError(f"{origin}:row {index}: expected {expected}, "
                                                                   f"got {got}"))
            continue
        numbered.append((problem_id, name, row))
    for problem_id, name, row in sorted(numbered, key=lambda item: (item[0], item[1])):
        tid = task_id(level, name)
        task = skipping.task(row["code"], id=tid, level=level, name=name, origin=f"{origin}:{name}",
                             metadata={"problem_id": problem_id, "source": "hub"})
        if task is None:
            continue
        held = by_id.get(tid)
        if held is None:
            by_id[tid] = task
        elif held.content_hash == task.content_hash:  # the same split present twice (data/ and a converted copy)
            logger.debug("skipping duplicate KernelBench row %s in %s", tid, origin)
        else:  # two different problems under one id: keep the first, never mix them up silently
            skipping.skip(tid, TaskFormatError(
                f"{origin}:{name}: a second row with id {tid} and a different source (hash {task.short_hash}, "
                f"kept: {held.short_hash}); give each problem its own name"))
    return list(by_id.values())


def kernelbench_source(
    level: int | Iterable[int] | None = None,
    *,
    root: str | Path | None = None,
    parquet: str | Path | None = None,
    revision: str | None = None,
    strict: bool = False,
) -> TaskSource:
    """The KernelBench source the user has set up: a checkout when one is named, else the hub copy.

    Order: ``root`` argument, ``$CUDAGYM_KERNELBENCH_DIR``, ``parquet`` argument,
    ``$CUDAGYM_KERNELBENCH_PARQUET``, then the hub (cache first).
    """
    if root is not None or (parquet is None and os.environ.get(ROOT_ENV)):
        return KernelBenchSource(level, root=root, strict=strict)
    return KernelBenchHubSource(level, parquet=parquet, revision=revision, strict=strict)
