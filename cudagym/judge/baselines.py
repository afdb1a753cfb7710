"""Baseline cache: eager and torch.compile times per (task, GPU, torch version, protocol), on disk, locked.

Beside them, where the protocol takes one, the reference's time in a runner (the speedups' yardstick) from the
same clean job, so a job that looks its baselines up need not time the reference in its own runner either.

Timing the baselines costs more than timing a candidate (torch.compile compiles first), and they do not
change between episodes, so a reset must never re-time a known task. Each key is one JSON file::

    <cache>/baselines/<protocol timing key>/<gpu>/torch-<version>/<task content hash>.json

where the timing key is the protocol id plus a digest of its timing fields (``Protocol.timing_key``), so two
protocols that share an id but time differently never share baselines.

under the user cache folder (``$CUDAGYM_CACHE_DIR``, else ``$XDG_CACHE_HOME/cudagym``, else
``~/.cache/cudagym``), written atomically under a file lock, so concurrent judges (vector envs, several
processes) never see a torn file. The judging pipeline (:mod:`cudagym.judge.pipeline`) passes known baselines to the
harness in ``Job.baselines`` and stores the ones a reference job measured.

The command ``cudagym baselines precompute --env CudaKernel-Bundled-v0`` (:mod:`cudagym.commands.baselines`)
fills the cache for every task of an environment id (or ``--suite``/``--tasks``), with a progress bar;
``cudagym baselines show`` lists what is cached; ``cudagym baselines check`` runs each task's reference as its
candidate with the guards off and writes a per-task table (:mod:`cudagym.judge.task_check`).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from filelock import FileLock

from cudagym.judge.job import KnownBaselines
from cudagym.judge.protocol import Protocol
from cudagym.judge.records import Hardware, TimingStats, Yardstick, from_dict, to_dict
from cudagym.solution import Solution
from cudagym.task import Task

log = logging.getLogger(__name__)

_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")


def default_cache_root() -> Path:
    """``<user cache folder>/baselines``."""
    from cudagym.paths import user_cache_dir

    return user_cache_dir() / "baselines"


@dataclass(frozen=True)
class BaselineKey:
    """What a baseline time depends on."""

    task_hash: str
    gpu: str
    torch: str
    protocol_key: str  # Protocol.timing_key

    @classmethod
    def of(cls, task: Task, hardware: Hardware, protocol: Protocol) -> BaselineKey:
        """The key of ``task`` timed on ``hardware`` under ``protocol``."""
        return cls(task.content_hash, hardware.gpu, hardware.torch, protocol.timing_key)

    def relpath(self) -> Path:
        """Where this key's file lies under the cache root (every part made a plain name, the task hash too)."""
        parts = (self.protocol_key, self.gpu, f"torch-{self.torch}", self.task_hash)
        *folders, name = (_UNSAFE.sub("_", p).strip("._") or "unknown" for p in parts)
        return Path(*folders) / f"{name}.json"


class BaselineCache:
    """Baseline times on disk, one locked JSON file per :class:`BaselineKey`.

    Args:
        root: The cache folder (default :func:`default_cache_root`).
    """

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root) if root is not None else default_cache_root()

    def path(self, key: BaselineKey) -> Path:
        """The file of ``key``."""
        return self.root / key.relpath()

    def get(self, key: BaselineKey) -> KnownBaselines:
        """The cached baselines of ``key`` (unmeasured where unknown); never raises for a bad file."""
        path = self.path(key)
        if not path.exists():
            return KnownBaselines()
        with FileLock(f"{path}.lock"):
            return self._read(path, key)

    def put(
        self, key: BaselineKey, eager: TimingStats, compiled: TimingStats, *, task_id: str = "",
        replace: bool = False, yardstick: Yardstick | None = None,
    ) -> KnownBaselines:
        """Store measured baselines (unmeasured ones are ignored).

        Args:
            key: The key.
            eager: Eager PyTorch time.
            compiled: torch.compile time.
            task_id: For humans reading the file.
            replace: Overwrite times already cached; otherwise the first measurement is kept.
            yardstick: The reference's time in the runner of the same clean job, where it took one.

        Returns:
            What the cache holds for ``key`` afterwards.
        """
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(f"{path}.lock"):
            old = self._read(path, key)
            merged = KnownBaselines(
                eager=_pick(old.eager, eager, replace), compiled=_pick(old.compiled, compiled, replace),
                yardstick=_pick(old.yardstick, yardstick or Yardstick(), replace),
            )
            if merged != old:
                self._write(path, key, merged, task_id or self._task_id(path))
            return merged

    def entries(self) -> list[tuple[BaselineKey, str, KnownBaselines]]:
        """Every cached key with its task id and times."""
        found = []
        for path in sorted(self.root.rglob("*.json")):
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                key = BaselineKey(**data["key"])
                times = self._decode(data)
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                continue
            found.append((key, str(data.get("task_id", "")), times))
        return found

    def _read(self, path: Path, key: BaselineKey) -> KnownBaselines:
        """The times in ``path`` if it holds ``key``'s (two keys whose names sanitize alike share a file)."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("key") != to_dict(key):
                log.warning("baseline cache: %s holds another key's times; ignoring them", path)
                return KnownBaselines()
            return self._decode(data)
        except FileNotFoundError:
            return KnownBaselines()
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("baseline cache: ignoring unreadable %s (%s)", path, exc)
            return KnownBaselines()

    @staticmethod
    def _task_id(path: Path) -> str:
        try:
            return str(json.loads(path.read_text(encoding="utf-8")).get("task_id", ""))
        except (OSError, ValueError, AttributeError):
            return ""

    @staticmethod
    def _decode(data: dict[str, Any]) -> KnownBaselines:
        """The times of a cache file's object.

        Raises:
            ValueError: A time is not a finite number >= 0, ``runs`` not a count, or a timed baseline has no median
                (a file edited by hand, damaged, or written by a cudagym that stored other fields).
        """
        return KnownBaselines(eager=_timing(data.get("eager", {}), "eager"),
                              compiled=_timing(data.get("compiled", {}), "compiled"),
                              yardstick=_yardstick(data.get("runner_reference", {})))

    @staticmethod
    def _write(path: Path, key: BaselineKey, value: KnownBaselines, task_id: str) -> None:
        data = {"key": to_dict(key), "task_id": task_id, "eager": to_dict(value.eager),
                "compiled": to_dict(value.compiled), "updated": time.time()}
        if value.yardstick.measured:
            data["runner_reference"] = to_dict(value.yardstick)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(data, fh, indent=1)
            os.replace(tmp, path)  # readers see the old file or the new one, never half of one
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def _timing(data: Any, name: str) -> TimingStats:
    """``data`` as TimingStats, every field checked (a bad one raises ValueError naming it)."""
    if not isinstance(data, dict):
        raise ValueError(f"{name} is {type(data).__name__}, not an object")
    stats = from_dict(TimingStats, data)
    for field_name, value in to_dict(stats).items():
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or value < 0 or (field_name == "runs" and not isinstance(value, int)):
            raise ValueError(f"{name}.{field_name} is {value!r}")
    if stats.measured and stats.median_us <= 0:
        raise ValueError(f"{name} was timed {stats.runs} times but has median_us {stats.median_us!r}")
    return stats


def _yardstick(data: Any) -> Yardstick:
    """``data`` as a Yardstick (a file without one: unmeasured), every field checked (a bad one raises ValueError)."""
    if not isinstance(data, dict):
        raise ValueError(f"runner_reference is {type(data).__name__}, not an object")
    if not data:
        return Yardstick()
    late, calls, disputed = data.get("late_calls", 0), data.get("calls", 0), data.get("disputed", "")
    for name, value in (("late_calls", late), ("calls", calls)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"runner_reference.{name} is {value!r}")
    if late > calls or not isinstance(disputed, str):
        raise ValueError(f"runner_reference has {late!r} late calls of {calls!r}, disputed {disputed!r}")
    return Yardstick(_timing(data.get("time", {}), "runner_reference.time"), late, calls, disputed,
                     _timing(data.get("eager_beside", {}), "runner_reference.eager_beside"))


_Measured = TypeVar("_Measured", TimingStats, Yardstick)


def _pick(old: _Measured, new: _Measured, replace: bool) -> _Measured:
    """The time to keep: ``new`` where it was measured and replaces ``old`` (asked to, or ``old`` was not)."""
    if not new.measured:
        return old
    return new if replace or not old.measured else old


# ----------------------------------------------------------------------------------------------------
# Timing baselines through the judge
# ----------------------------------------------------------------------------------------------------

_NOOP_KERNEL = """\
// cudagym baseline timing: the candidate is the reference itself; this kernel only makes the layout valid.
extern "C" __global__ void cudagym_noop() {}
"""


def reference_solution(task: Task) -> Solution:
    """A ``raw`` solution that *is* the reference (``ModelNew = Model``, plus a no-op kernel the format needs).

    Judged in PROFILE mode with guards off, the harness times it against eager and torch.compile, which is
    how the baselines get measured with exactly the protocol's timing method. The raw format builds in
    about a second (one small cubin, the same for every task).
    """
    return Solution("raw", {"model_new.py": f"{task.source.rstrip()}\n\n\nModelNew = Model\n",
                            "kernels/cudagym_noop.cu": _NOOP_KERNEL})


def is_reference_job(task: Task, solution: Solution) -> bool:
    """Whether ``solution`` is the task's own :func:`reference_solution` (a job that runs no candidate code).

    Only such jobs' baseline times enter the cache. The format and the files must both be the reference's: the
    same files in another format are built and loaded another way.
    """
    reference = reference_solution(task)
    return solution.format == reference.format and dict(solution.files) == dict(reference.files)
