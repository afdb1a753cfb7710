"""CUDA-Agent-Ops-6K: 6,000 synthesized operator tasks in KernelBench format.

Hub data set ``BytedTsinghua-SIA/CUDA-Agent-Ops-6K``, one split ``train`` in ``data.parquet``, columns
``ops`` (list of operator class names), ``data_source`` (``torch#k``: k torch operators composed) and
``code`` (a KernelBench-format file).

Ids are ``ops6k/<6-digit row>_<Op1>_<Op2>...`` where the row is the 0-based position in the data set, so
ids stay the same whatever filters are applied. The level is k from ``torch#k``; rows that are not torch
compositions (the data set's ``transformers`` modules, about 1%) get level 0.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudagym.errors import ConfigError, TaskFormatError
from cudagym.sources.base import TaskSource
from cudagym.sources.hub import HubDataset, fetch_snapshot, parquet_files, read_rows, source_cell
from cudagym.task import Task, make_task

logger = logging.getLogger(__name__)

SUITE = "ops6k"
PARQUET_ENV = "CUDAGYM_OPS6K_PARQUET"
HF_DATASET = HubDataset(
    repo_id="BytedTsinghua-SIA/CUDA-Agent-Ops-6K",
    allow_patterns=("*.parquet",),
    path_env=PARQUET_ENV,
    path_arg="path",
    suite=SUITE,
    env_id="CudaKernel-Ops6K-v0",
)
COLUMNS = ("ops", "data_source", "code")
NON_TORCH_LEVEL = 0
"""Level of rows whose ``data_source`` is not ``torch#k`` (standalone transformers modules)."""

_TORCH_SOURCE = re.compile(r"^\s*torch\s*#\s*(\d+)\s*$")
# Parsed rows, shared by every source in the process: parsing all 6,000 rows takes seconds, and each env
# of a vector env builds its own source. Keyed by (file path, mtime, size, row), so a rewritten file is
# parsed again; a value is the Task, or the TaskFormatError message of a malformed row.
_PARSED: dict[tuple[str, int, int, int], Task | str] = {}
_PARSED_MAX = 100_000
_ID_UNSAFE = re.compile(r"[^A-Za-z0-9]+")


@dataclass(frozen=True)
class SkippedRow:
    """A data set row that could not be made into a task.

    Attributes:
        row: 0-based row index in the data set.
        reason: What was wrong, naming the row.
    """

    row: int
    reason: str


def level_of(data_source: object) -> int:
    """Number of composed torch operators from a ``data_source`` tag (``torch#2`` -> 2; others -> 0)."""
    match = _TORCH_SOURCE.match(data_source) if isinstance(data_source, str) else None
    return int(match.group(1)) if match else NON_TORCH_LEVEL


def op_key(op: str) -> str:
    """Comparable form of an operator name: last dotted part, lower case (``nn.Conv2d`` -> ``conv2d``)."""
    return op.strip().rsplit(".", 1)[-1].lower()


def task_name(row: int, ops: Sequence[str]) -> str:
    """``<6-digit row>_<Op1>_<Op2>...``, with each op reduced to letters and digits."""
    parts = [_ID_UNSAFE.sub("", op.rsplit(".", 1)[-1]) for op in ops]
    return "_".join([f"{row:06d}", *(p for p in parts if p)])


class Ops6KSource(TaskSource):
    """Tasks from CUDA-Agent-Ops-6K, filtered.

    Reads a local parquet file when given (argument or ``$CUDAGYM_OPS6K_PARQUET``), else the hub snapshot
    in cudagym's cache, downloading it on a cache miss. Filters run on the ``ops`` and ``data_source``
    columns before any code is parsed.

    Args:
        path: A parquet file or a folder of them.
        min_ops: Keep rows with level (number of composed torch ops) >= this. Non-torch rows have level 0,
            so ``min_ops=1`` drops them.
        max_ops: Keep rows with level <= this.
        ops: Keep rows whose ``ops`` include every one of these names (case-insensitive; ``nn.`` prefixes
            ignored).
        limit: Keep at most this many tasks (the first ones, in row order).
        rows: Keep only these row indices.
        strict: Raise on a row whose code is not KernelBench format; by default such rows are skipped,
            logged and counted in :attr:`skipped`.
        revision: Hub branch, tag or commit.
        refresh: Ask the hub even when a cached snapshot exists.
    """

    suite = SUITE

    def __init__(
        self,
        path: str | Path | None = None,
        min_ops: int | None = None,
        max_ops: int | None = None,
        ops: str | Iterable[str] | None = None,
        limit: int | None = None,
        *,
        rows: Iterable[int] | None = None,
        strict: bool = False,
        revision: str | None = None,
        refresh: bool = False,
    ) -> None:
        super().__init__()
        for label, value in (("min_ops", min_ops), ("max_ops", max_ops), ("limit", limit)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ConfigError(f"expected {label} to be a non-negative int or None, got {value!r}")
        self._path = path if path is not None else os.environ.get(PARQUET_ENV) or None
        self.min_ops = min_ops
        self.max_ops = max_ops
        wanted = [ops] if isinstance(ops, str) else _listed(ops)
        if wanted is None or not all(isinstance(o, str) for o in wanted):
            raise ConfigError(f"expected ops to be an op name (str), a list of them, or None, got {ops!r:.200}")
        self.required_ops = frozenset(op_key(o) for o in wanted)
        self.limit = limit
        picked = _listed(rows)
        if picked is None or not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in picked):
            raise ConfigError(f"expected rows to be row numbers (ints >= 0) or None, got {rows!r:.200}")
        self.rows = None if rows is None else frozenset(picked)
        self.strict = strict
        self._revision = revision
        self._refresh = refresh
        self._skipped: list[SkippedRow] = []

    @property
    def skipped(self) -> int:
        """How many rows that passed the filters were skipped as malformed (0 before loading)."""
        return len(self._skipped)

    @property
    def skipped_rows(self) -> tuple[SkippedRow, ...]:
        """The skipped rows with their reasons."""
        return tuple(self._skipped)

    def describe(self) -> str:
        """Where the tasks come from."""
        return f"CUDA-Agent-Ops-6K {self._path or 'hub ' + HF_DATASET.repo_id}"

    def _load(self) -> Sequence[Task]:
        how_to = HF_DATASET.how_to_provide()
        root = self._path or fetch_snapshot(HF_DATASET, revision=self._revision, refresh=self._refresh)
        files = parquet_files(root, how_to=how_to)
        preferred = [f for f in files if f.name == "data.parquet"]
        picked = preferred or files
        records = read_rows(picked, COLUMNS, how_to=how_to)
        file_key = _file_key(picked)
        self._skipped = []
        tasks: list[Task] = []
        for index, record in enumerate(records):
            if self.limit is not None and len(tasks) >= self.limit:
                break
            if not self._keep(index, record):
                continue
            task = self._parsed(file_key, index, record, origin=f"{root}:row {index}")
            if task is not None:
                tasks.append(task)
        if self._skipped:
            logger.info("skipped %d malformed row(s) of %s", len(self._skipped), root)
        return tasks

    def _keep(self, index: int, record: dict[str, Any]) -> bool:
        if self.rows is not None and index not in self.rows:
            return False
        level = level_of(record["data_source"])
        if self.min_ops is not None and level < self.min_ops:
            return False
        if self.max_ops is not None and level > self.max_ops:
            return False
        if self.required_ops:
            have = {op_key(o) for o in row_ops(record["ops"])}
            return self.required_ops <= have
        return True

    def _parsed(
        self, file_key: tuple[str, int, int], index: int, record: dict[str, Any], *, origin: str
    ) -> Task | None:
        key = (*file_key, index)
        parsed = _PARSED.get(key)
        if parsed is None:
            parsed = _make_task(index, record, origin=origin)
            if len(_PARSED) >= _PARSED_MAX:
                _PARSED.clear()
            _PARSED[key] = parsed
        if isinstance(parsed, Task):
            return parsed
        if self.strict:
            raise TaskFormatError(parsed)
        logger.warning("skipping Ops-6K row %d: %s", index, parsed)
        self._skipped.append(SkippedRow(row=index, reason=parsed))
        return None


def _listed(value: object) -> list[Any] | None:
    """``value``'s items when it is None (none) or an iterable other than a str, bytes or mapping; else None."""
    if value is None:
        return []
    if isinstance(value, (str, bytes, dict)) or not isinstance(value, Iterable):
        return None
    return list(value)


def row_ops(value: object) -> list[str]:
    """The op names of an ``ops`` cell: a list of names, or one name (a str column), never its letters."""
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, (list, tuple)):
        return [o for o in value if isinstance(o, str)]
    return []


def _make_task(index: int, record: dict[str, Any], *, origin: str) -> Task | str:
    """The row's task, or what is wrong with it."""
    ops = row_ops(record["ops"])
    name = task_name(index, ops)
    try:
        code = source_cell(record["code"], column="code", origin=origin)
        return make_task(
            code, id=f"{SUITE}/{name}", suite=SUITE, level=level_of(record["data_source"]),
            name=name, origin=origin,
            metadata={"ops": ops, "data_source": record["data_source"], "row": index},
        )
    except TaskFormatError as exc:
        return str(exc)


def _file_key(files: Sequence[Path]) -> tuple[str, int, int]:
    stats = [(str(f.resolve()), f.stat()) for f in files]
    return ("|".join(name for name, _ in stats), max(st.st_mtime_ns for _, st in stats),
            sum(st.st_size for _, st in stats))
