"""A benchmark run folder: ``manifest.json`` (what was asked) and ``episodes.jsonl`` (what finished).

Each finished episode is one JSON line, appended, flushed and fsynced the moment it ends, so a run killed
at any point (``kill -9`` included) loses at most the episodes still playing. A line cut short by the
kill is dropped (and cut off the file) when the run is resumed or read. Lines::

    {"key": "bundled/L1/01_Swish#0", "task_id": ..., "sample": 0, "level": 1, "seed": 0,
     "summary": {... EpisodeSummary ...}, "record": {... EpisodeRecord ...}}

The manifest holds the run's plan (the ``plan`` arguments, which must match on ``--resume``), the
cudagym version, the git commit when run from a checkout, and when it was started.

One process at a time plays a run: :func:`lock_run` holds the folder while a run or a resume goes on, so a second
``cudagym bench`` on the same ``--out`` is refused rather than mixing its episodes (and its plan) into the first's.
An append that fails (a full disk) leaves no part of its line, so later appends stay readable.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudagym import __version__
from cudagym.bench.metrics import EpisodeSummary
from cudagym.errors import ConfigError
from cudagym.rollout import EpisodeRecord

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
EPISODES = "episodes.jsonl"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class Entry:
    """One journaled episode.

    Attributes:
        key: ``<task id>#<sample>``, unique in a run.
        summary: What the metrics read.
        record: The whole episode (every action and observation).
        seed: The episode's reset seed.
    """

    key: str
    summary: EpisodeSummary
    record: EpisodeRecord
    seed: int = 0

    def to_line(self) -> str:
        """The entry as one line of JSON (no newline)."""
        s = self.summary
        data = {"key": self.key, "task_id": s.task_id, "sample": s.sample, "level": s.level, "seed": self.seed,
                "summary": s.to_dict(), "record": self.record.to_dict()}
        return json.dumps(data, default=str)

    @classmethod
    def from_line(cls, line: str) -> Entry:
        """Parse one journal line.

        Raises:
            ConfigError: The line is not a journal entry.
        """
        try:
            data = json.loads(line)
        except ValueError as exc:
            raise ConfigError(f"expected a journal line (JSON), got text that is not JSON: {exc}") from exc
        if not isinstance(data, dict) or not {"key", "summary", "record"} <= set(data):
            raise ConfigError("expected a journal entry with 'key', 'summary' and 'record'")
        key, seed = data["key"], data.get("seed", 0)
        if not isinstance(key, str) or not key:
            raise ConfigError(f"expected the entry's 'key' to be '<task id>#<sample>', got {key!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ConfigError(f"expected the entry's 'seed' to be an int, got {type(seed).__name__} {seed!r}")
        return cls(key=key, summary=EpisodeSummary.from_dict(data["summary"]),
                   record=EpisodeRecord.from_dict(data["record"]), seed=seed)


def episode_key(task_id: str, sample: int) -> str:
    """The journal key of sample ``sample`` of ``task_id``."""
    return f"{task_id}#{sample}"


class RunJournal:
    """Appends finished episodes to a run folder's journal; thread-safe."""

    def __init__(self, run_dir: str | Path) -> None:
        """Open (and create) the run folder ``run_dir``."""
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / EPISODES
        self._lock = threading.Lock()

    def append(self, entry: Entry) -> None:
        """Write ``entry`` as one line, then fsync it (it survives a kill of this process).

        Raises:
            OSError: The line could not be written (a full disk, a read-only file), naming the journal; the file
                is cut back to where it was, so no part of the line stays to spoil the lines appended after it.
        """
        data = (entry.to_line() + "\n").encode("utf-8")
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                start = os.fstat(fd).st_size
                try:
                    _write_all(fd, data)
                    os.fsync(fd)
                except OSError as exc:
                    _cut_back(fd, start, self.path)
                    raise OSError(exc.errno, f"{exc.strerror or exc} (episode {entry.key} not journaled)",
                                  str(self.path)) from exc
            finally:
                os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    """``write`` until every byte of ``data`` is in (a short write is followed by the error that stopped it)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[written:]


def _cut_back(fd: int, size: int, path: Path) -> None:
    """Truncate the journal back to ``size`` bytes after a failed append (logged when even that fails)."""
    try:
        os.ftruncate(fd, size)
    except OSError as exc:
        log.error("%s: a failed append could not be cut off (%s); the part written stays as a damaged line", path, exc)


@contextlib.contextmanager
def lock_run(run_dir: str | Path) -> Iterator[None]:
    """Hold the run folder (an exclusive ``flock`` on the folder itself) while a run or a resume plays it.

    Nothing is left on disk. Where the folder's filesystem cannot ``flock`` (some network filesystems), the run goes
    on unlocked, with a warning.

    Raises:
        ConfigError: Another process holds the folder (a ``cudagym bench`` on the same ``--out`` is running).
    """
    fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                log.warning("%s: cannot lock the run folder (%s); make sure no other run uses it", run_dir, exc)
            else:
                raise ConfigError(f"{run_dir} is in use by another `cudagym bench` (a run or a resume of it is "
                                  "playing now); wait for it to end, or give another --out") from None
        yield
    finally:
        os.close(fd)  # drops the lock


def write_manifest(run_dir: str | Path, plan: Mapping[str, Any], extra: Mapping[str, Any]) -> Path:
    """Write ``manifest.json``: the plan, the cudagym version and commit, the start time, and ``extra``."""
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    path = Path(run_dir) / MANIFEST
    data = {"format": FORMAT_VERSION, "cudagym": __version__, "commit": git_commit(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "plan": dict(plan), **extra}
    tmp = path.with_suffix(".tmp")
    try:
        tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
        os.replace(tmp, path)  # atomic: a kill never leaves half a manifest
    finally:
        tmp.unlink(missing_ok=True)  # a full disk leaves no half-written manifest.tmp behind
    return path


def read_manifest(run_dir: str | Path) -> dict[str, Any]:
    """The run's manifest.

    Raises:
        ConfigError: ``run_dir`` holds no (readable) manifest.
    """
    path = Path(run_dir) / MANIFEST
    if not path.is_file():
        raise ConfigError(f"expected a benchmark run folder with {MANIFEST} at {run_dir} "
                          "(written by `cudagym bench --out RUN_DIR`), found none")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ConfigError(f"{path} is not JSON: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("plan"), dict):
        raise ConfigError(f"expected {path} to hold an object with a 'plan'")
    check_plan(data["plan"], path)
    return data


# The plan's fields by type; a manifest edited by hand (or damaged) is refused with the field named.
PLAN_TYPES: dict[str, tuple[type, ...]] = {
    **dict.fromkeys(("agent", "env", "judge", "protocol", "format", "tokenizer", "base_url", "model", "tool_mode"),
                    (str,)),
    **dict.fromkeys(("limit", "k", "seed", "max_turns", "token_budget", "max_tokens"), (int,)),
    "temperature": (int, float),
    "env_kwargs": (dict,),
    "tasks": (list,),
}


def check_plan(plan: Mapping[str, Any], where: str | Path) -> None:
    """Check the types of a manifest's plan fields (None is allowed for each).

    Raises:
        ConfigError: A field has another type, or ``tasks`` holds something other than task ids.
    """
    for name, types in PLAN_TYPES.items():
        value = plan.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, types):
            expected = " or ".join(t.__name__ for t in types)
            raise ConfigError(f"{where}: expected the plan's {name!r} to be {expected} (or null), got "
                              f"{type(value).__name__} {value!r}; the manifest was edited or damaged")
    if any(not isinstance(t, str) for t in plan.get("tasks") or ()):
        raise ConfigError(f"{where}: expected the plan's 'tasks' to be a list of task ids (strings), got "
                          f"{plan['tasks']!r}")


def read_entries(run_dir: str | Path, *, repair: bool = False) -> list[Entry]:
    """The journaled episodes of a run, first of each key only.

    A last line without its newline (the run was killed while writing it) is left out; with ``repair``
    it is also cut off the file, so appending goes on from a clean line.

    Raises:
        ConfigError: A complete line is not a journal entry (the file is not a run journal).
    """
    path = Path(run_dir) / EPISODES
    if path.exists() and not path.is_file():
        raise ConfigError(f"expected {path} to be the run's journal file, found a folder")
    if not path.is_file():
        return []
    data = path.read_bytes()
    complete = data.rfind(b"\n") + 1
    if complete < len(data):
        log.warning("%s: the last line was cut short (the run was killed while writing it); left out", path)
        if repair:
            with open(path, "r+b") as fh:
                fh.truncate(complete)
                fh.flush()
                os.fsync(fh.fileno())
    entries: dict[str, Entry] = {}
    for number, raw in enumerate(data[:complete].split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            entry = Entry.from_line(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path}:{number}: expected a journal line (UTF-8 JSON), got bytes that are not UTF-8 "
                              f"(at column {exc.start + 1}); the file is damaged or not a run journal") from exc
        except ConfigError as exc:
            raise ConfigError(f"{path}:{number}: {exc}") from exc
        if entry.key in entries:
            log.warning("%s:%d: a second entry for %s; the first is kept", path, number, entry.key)
            continue
        entries[entry.key] = entry
    return list(entries.values())


def git_commit() -> str:
    """The commit of the checkout cudagym runs from (``-dirty`` when it has changes), else empty.

    ``CUDAGYM_COMMIT`` overrides it: a copy of a checkout on another host (a GPU machine) may carry a stale
    ``.git`` or none.
    """
    given = os.environ.get("CUDAGYM_COMMIT", "").strip()
    if given:
        return given[:80]
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return ""
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    return sha + ("-dirty" if dirty else "")
