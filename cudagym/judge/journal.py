"""An append-only JSONL journal of judge jobs and their results: exactly one result per job id, resumable.

Each line is one JSON object, written with a single ``write`` under a file lock, so several processes can
share a journal and a crash leaves at most one torn last line (skipped, with a warning, on reading):

- ``{"kind": "job", "job_id", "task_id", "solution_hash", "mode", "protocol_id", "time"}`` when a job is
  handed to the judge;
- ``{"kind": "result", "job_id", "task_id", "solution_hash", "status", "result", "time"}`` when it has its
  verdict (``result`` is :func:`~cudagym.judge.records.to_dict` of the
  :class:`~cudagym.judge.records.EvalResult`).

A resumed run asks :meth:`Journal.result` for each job id before running it and skips the ones already
there; :meth:`Journal.pending` lists jobs that were started but never got a result (the run died).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

from cudagym.judge.records import EvalResult, from_dict, to_dict

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JournalEntry:
    """One journaled job and, once it has one, its result."""

    job_id: str
    task_id: str
    solution_hash: str
    mode: str = ""
    protocol_id: str = ""
    result: EvalResult | None = None


class Journal:
    """Append-only record of jobs and results in one JSONL file, shared safely between threads and processes.

    Reading (:meth:`result`, :meth:`entry`, :meth:`conflict`, :meth:`entries`, :meth:`done_ids`,
    :meth:`pending`, iterating) creates nothing on disk, so a journal in a read-only folder can be read; the file,
    its folder and its ``.lock`` file are made by the first write.

    Args:
        path: The ``.jsonl`` file (created with its folder at the first write if missing).
        fsync: Flush each line to disk before returning (survives a machine crash, costs a few ms).
    """

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = False) -> None:
        self.path = Path(path)
        self.fsync = fsync
        self._lock = threading.Lock()
        self._file_lock = FileLock(str(self.path) + ".lock")
        self._entries: dict[str, JournalEntry] = {}
        self._offset = 0  # bytes of the file already read into _entries

    def record_job(
        self, job_id: str, *, task_id: str, solution_hash: str, mode: str = "", protocol_id: str = ""
    ) -> None:
        """Note that a job was handed to the judge (so a crash before its result shows it as pending)."""
        self._append({"kind": "job", "job_id": job_id, "task_id": task_id, "solution_hash": solution_hash,
                      "mode": mode, "protocol_id": protocol_id})

    def record_result(self, job_id: str, result: EvalResult, *, task_id: str, solution_hash: str) -> bool:
        """Journal a job's verdict.

        Returns:
            True when written; False when this job id already had a result (the first one is kept).
        """
        with self._exclusive():
            self._refresh()
            entry = self._entries.get(job_id)
            if entry is not None and entry.result is not None:
                log.warning("journal %s: job %s already has a result (%s); keeping the first",
                            self.path, job_id, entry.result.status.value)
                return False
            self._write({"kind": "result", "job_id": job_id, "task_id": task_id, "solution_hash": solution_hash,
                         "status": result.status.value, "result": to_dict(result)})
            return True

    def result(self, job_id: str) -> EvalResult | None:
        """The journaled result of ``job_id``, or None when it has none yet."""
        entry = self.entry(job_id)
        return entry.result if entry else None

    def conflict(self, job_id: str, *, task_id: str, solution_hash: str, mode: str, protocol_id: str) -> str:
        """Why ``job_id`` must not be answered from this journal for the job described, or ``""``.

        A resumed run is answered by id alone (:meth:`result`), so an id journaled for another task, solution,
        mode or protocol would replay that job's verdict; a caller that does not choose its ids itself asks here
        first.
        """
        entry = self.entry(job_id)
        if entry is None:
            return ""
        held = {"task": entry.task_id, "solution": entry.solution_hash, "mode": entry.mode,
                "protocol": entry.protocol_id}
        asked = {"task": task_id, "solution": solution_hash, "mode": mode, "protocol": protocol_id}
        differ = [name for name in held if held[name] and held[name] != asked[name]]  # older lines lack some
        return f"is journaled for another job (its {', '.join(differ)} differ)" if differ else ""

    def entry(self, job_id: str) -> JournalEntry | None:
        """What the journal knows about ``job_id``."""
        with self._shared():
            self._refresh()
            return self._entries.get(job_id)

    def done_ids(self) -> set[str]:
        """Ids of jobs that have a result."""
        return {e.job_id for e in self.entries() if e.result is not None}

    def pending(self) -> list[JournalEntry]:
        """Jobs that were started but have no result (their run was interrupted)."""
        return [e for e in self.entries() if e.result is None]

    def entries(self) -> list[JournalEntry]:
        """Every job, in the order first seen."""
        with self._shared():
            self._refresh()
            return list(self._entries.values())

    def __iter__(self) -> Iterator[JournalEntry]:
        return iter(self.entries())

    def __len__(self) -> int:
        return len(self.entries())

    def _append(self, record: dict[str, Any]) -> None:
        with self._exclusive():
            self._refresh()
            self._write(record)

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        """Hold the journal for a write: this object's threads, then every process (its lock file, made here)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock, self._file_lock:
            yield

    @contextlib.contextmanager
    def _shared(self) -> Iterator[None]:
        """Hold the journal for a read, creating nothing on disk.

        Writers append under the lock file held exclusively (:class:`~filelock.FileLock` is ``flock(LOCK_EX)``
        on it). A reader takes ``flock(LOCK_SH)`` on that same file, opened read-only, so it waits out a writer's
        append and readers do not wait for each other; but only if the file exists, since creating it is what
        left a ``.lock`` behind every reader and failed in a read-only folder. Where it is absent (no writer has
        ever locked here, or one is creating it this instant) or cannot be locked (a link, a foreign file we may
        not open, a filesystem without ``flock``), the read goes unlocked, which is safe on its own: each record
        is one newline-ended line appended with a single ``write``, and :meth:`_refresh` takes whole lines only,
        so an append caught midway is a line without its newline yet, read on the next refresh.
        """
        with self._lock:
            fd = _lock_shared(Path(str(self.path) + ".lock"))
            try:
                yield
            finally:
                if fd is not None:
                    os.close(fd)  # closing the descriptor drops its flock

    def _write(self, record: dict[str, Any]) -> None:
        record["time"] = time.time()
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size and not self._ends_with_newline(fd):
                line = b"\n" + line  # a torn line from a crashed writer stays alone on its line
            os.write(fd, line)
            if self.fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        self._refresh()

    @staticmethod
    def _ends_with_newline(fd: int) -> bool:
        size = os.fstat(fd).st_size
        return os.pread(fd, 1, size - 1) == b"\n"

    def _refresh(self) -> None:
        """Read lines appended since the last read (by this or another process)."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n") + 1  # a line still being written is read next time
        start = self._offset
        for line in data[:end].split(b"\n"):
            if line.strip():
                self._apply(line, start)
            start += len(line) + 1
        self._offset += end

    def _apply(self, line: bytes, at: int) -> None:
        """Take one line, which starts at byte ``at`` of the file, into the entries.

        A line that is not a journal record (damaged, hand-edited, a field of another type) is skipped with a warning,
        so one bad line never makes the whole journal unreadable.
        """
        try:
            record = json.loads(line)
            job_id = record["job_id"]
            kind = record["kind"]
        except (ValueError, KeyError, TypeError):
            record, job_id, kind = None, None, None
        texts = ("task_id", "solution_hash", "mode", "protocol_id")
        if (not isinstance(job_id, str) or not job_id or kind not in ("job", "result")
                or any(not isinstance(record.get(name, ""), str) for name in texts)):
            log.warning("journal %s: skipping an unreadable line at byte %d", self.path, at)
            return
        entry = self._entries.get(job_id) or JournalEntry(job_id, *(record.get(name, "") for name in texts))
        if kind == "result" and entry.result is None:
            try:
                if not isinstance(record.get("result"), dict):
                    raise TypeError("the result is not an object")
                result = from_dict(EvalResult, record["result"])
            except (ValueError, KeyError, TypeError, AttributeError):
                log.warning("journal %s: skipping an unreadable result of job %s (the line at byte %d)", self.path,
                            job_id, at)
                return
            entry = JournalEntry(entry.job_id, entry.task_id, entry.solution_hash, entry.mode,
                                 entry.protocol_id, result)
        self._entries[job_id] = entry


def _lock_shared(lock_file: Path) -> int | None:
    """A descriptor holding ``flock(LOCK_SH)`` on ``lock_file`` if it exists and can be locked, else ``None``.

    Opened read-only (``flock`` needs no write access), never created, a link not followed, a fifo not waited on.
    """
    try:
        fd = os.open(lock_file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            log.debug("journal lock %s not usable for reading (%s); reading unlocked", lock_file, exc)
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
    except OSError as exc:
        os.close(fd)
        log.debug("journal lock %s cannot be shared (%s); reading unlocked", lock_file, exc)
        return None
    return fd
