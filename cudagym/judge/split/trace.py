"""One JSON line per exchange between the trusted process and its runner, for reading a GPU run after the fact.

Set ``CUDAGYM_TRACE`` to a file path and every trusted process appends to it, as things happen (flushed line by
line, so a run killed by its time limit keeps what it did): the harness's phases as they begin and end, and each
request to the runner with its kind, whether it was a late call, the judge's bracket and host time in its parts,
and the runner's own word on its heap. Unset (the default), nothing is written and each call costs one environment
lookup. Diagnostics only: nothing here decides a verdict, and what the runner says is recorded as its word.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import IO, Any

TRACE_ENV = "CUDAGYM_TRACE"
# What a runner gets instead of the path (it writes nothing; it only adds its heap counters to its replies)
RUNNER_ENV = "CUDAGYM_TRACE_RUNNER"

_lock = threading.Lock()
_open: dict[str, IO[str]] = {}
_failed: set[str] = set()  # paths this process could not write: given up


def tracing() -> bool:
    """Whether this process writes a trace (``CUDAGYM_TRACE`` is set)."""
    return bool(os.environ.get(TRACE_ENV))


def trace(event: str, **fields: Any) -> None:
    """Append one line: the wall clock, this process's id, ``event`` and ``fields`` (nothing when not tracing).

    A trace that cannot be written (a bad path, a full disk) is given up for this process without an error: a
    diagnostic never fails a job.
    """
    path = os.environ.get(TRACE_ENV)
    if not path:
        return
    line = json.dumps({"t": round(time.time(), 6), "pid": os.getpid(), "event": event, **fields},
                      default=str, allow_nan=True)
    with _lock:
        handle = _open.get(path)
        if handle is None:
            if path in _failed:
                return
            try:
                handle = _open[path] = open(path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
            except OSError:
                _failed.add(path)
                return
        try:
            handle.write(line + "\n")
        except (OSError, ValueError):
            _failed.add(path)
            _open.pop(path, None)


def runner_env(env: dict[str, str]) -> dict[str, str]:
    """A runner's environment ``env`` without the trace's path, and with :data:`RUNNER_ENV` set where tracing.

    The runner is confined with no view of the trace (an attempt to open it would be the candidate's
    ``file_access``), and its word is never written anywhere by itself: the trusted side records what it says.
    """
    env = {k: v for k, v in env.items() if k not in (TRACE_ENV, RUNNER_ENV)}
    if tracing():
        env[RUNNER_ENV] = "1"
    return env


def runner_reports() -> bool:
    """In a runner: whether to add its heap counters to its replies (its judge traces)."""
    return os.environ.get(RUNNER_ENV) == "1"


def folders() -> tuple[str, ...]:
    """The trace's folder (made if missing), for the write view of a confined trusted process; none untraced."""
    path = os.environ.get(TRACE_ENV)
    if not path:
        return ()
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return ()
    return (folder,)
