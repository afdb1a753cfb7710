"""Running one compiler command under the build's limits: confined, a deadline, an output cap, a clean kill.

A compiler is candidate-controlled work: a template explosion can run for hours and eat the host's memory,
an ``#error`` in a loop can print gigabytes, and ``#include "/etc/passwd"`` would quote a host file back.
Each tool runs in the sandbox (:mod:`cudagym.judge.confine`: no network, a private file-system view, a
scrubbed environment, an address-space limit), in its own process group (``start_new_session``), so a
timeout kills nvcc *and* the cicc/ptxas/cc1plus children it spawned, never just the driver.

Running candidate *Python* at build time (the inline recorder imports model_new.py) goes through
:func:`run_sandboxed_tool`: the judge's sandbox (:mod:`cudagym.judge.sandbox`) with a scrubbed environment,
private ``HOME``/``TMPDIR``, rlimits, the watchdog and, where the host allows, no network.
"""

from __future__ import annotations

import contextvars
import dataclasses
import enum
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudagym.errors import SandboxUnavailableError
from cudagym.judge import confine, limits_exec
from cudagym.judge.sandbox import SandboxPolicy, run_sandboxed, scrub_env
from cudagym.judge.watchdog import GiB

# Compilers print in the user's locale (gcc's curly quotes); the parsers expect plain ASCII.
TOOL_ENV = {"LC_ALL": "C", "LANG": "C"}
_READ_CHUNK_BYTES = 64 * 1024
# Address space of one compiler process: cc1plus parsing torch's headers (and writing their PCH) peaks near
# 2 GiB; cicc and ptxas on a large kernel stay under 1 GiB. A template bomb stops at this, not at the host's.
COMPILER_MEMORY_BYTES = 6 * GiB
# The judge a build runs for (set around each build; compile_units carries it into its threads): closing a
# judge kills its running compilers instead of waiting for them.
BUILD_OWNER: contextvars.ContextVar[object] = contextvars.ContextVar("cudagym_build_owner", default=None)


@dataclass(frozen=True)
class BuildLimits:
    """Caps on one build.

    Attributes:
        timeout_s: Wall-clock budget of the whole build (every tool call shares it).
        max_output_bytes: Most compiler output one tool call may print before it is killed.
        max_artifact_bytes: Largest object, cubin or shared library a build may produce.
        max_log_chars: Most characters of compiler output kept in ``BuildResult.log``.
        compiler_memory_bytes: Address space of each compiler process of the candidate's units (the judge's
            own, the torch PCH, get :data:`COMPILER_MEMORY_BYTES`).
    """

    timeout_s: float = 180.0
    max_output_bytes: int = 2 * 1024 * 1024
    max_artifact_bytes: int = 256 * 1024 * 1024
    max_log_chars: int = 64 * 1024
    compiler_memory_bytes: int = COMPILER_MEMORY_BYTES

    @classmethod
    def from_protocol(cls, protocol: Any) -> BuildLimits:
        """Limits of a :class:`~cudagym.judge.protocol.Protocol` (timeout, and caps from ``extra``)."""
        extra: Mapping[str, Any] = getattr(protocol, "extra", {}) or {}
        base = cls(timeout_s=float(protocol.build_timeout_s))
        changes = {f.name: type(getattr(base, f.name))(extra[f"build_{f.name}"])
                   for f in dataclasses.fields(cls) if f"build_{f.name}" in extra}
        return dataclasses.replace(base, **changes)


class RunOutcome(str, enum.Enum):
    """How a tool call ended."""

    EXITED = "exited"  # ran to completion (any exit status)
    TIMEOUT = "timeout"  # killed at the deadline
    OUTPUT_LIMIT = "output_limit"  # killed for printing too much
    NOT_FOUND = "not_found"  # the executable could not be started


@dataclass(frozen=True)
class ToolRun:
    """One finished tool call.

    Attributes:
        argv: The command.
        outcome: How it ended.
        returncode: Exit status (-1 when killed or not started).
        output: stdout and stderr interleaved, decoded, at most the cap.
        wall_time_s: Seconds it ran.
    """

    argv: tuple[str, ...]
    outcome: RunOutcome
    returncode: int
    output: str
    wall_time_s: float

    @property
    def ok(self) -> bool:
        """True when the tool exited with status 0."""
        return self.outcome is RunOutcome.EXITED and self.returncode == 0


class Deadline:
    """A point in time shared by every tool call of one build."""

    def __init__(self, budget_s: float) -> None:
        self.budget_s = budget_s
        self._end = time.monotonic() + budget_s

    def extend(self, seconds: float) -> None:
        """Push the end back (time spent waiting on the judge's own work is not the candidate's)."""
        self._end += max(0.0, seconds)

    def remaining_s(self) -> float:
        """Seconds left, never negative."""
        return max(0.0, self._end - time.monotonic())

    @property
    def expired(self) -> bool:
        """True once the budget is spent."""
        return self.remaining_s() <= 0.0


def run_tool(
    argv: Sequence[str],
    *,
    cwd: str | Path,
    deadline: Deadline,
    max_output_bytes: int,
    env: Mapping[str, str] | None = None,
    reads: Sequence[str | Path] = (),
    writes: Sequence[str | Path] = (),
    tools: Sequence[str] = (),
    memory_bytes: int = 0,
    file_size_bytes: int = 0,
) -> ToolRun:
    """Run one compiler command confined, to completion, the deadline, or the output cap, whichever is first.

    The command runs in the sandbox (:mod:`cudagym.judge.confine`): a scrubbed environment with a private
    ``HOME`` and ``TMPDIR``, no network, and a file-system view of the system, the toolchain, ``cwd``
    (read-only), ``reads`` (read-only) and ``writes`` (read-write: where the output goes); an address-space
    and file-size limit; at most :func:`compile_slots` compiler processes of this interpreter at once. The
    view is what the judge names here and nothing else: no path inside ``argv`` widens it (an agent's
    ``-DDIR=/etc`` names a folder the compiler cannot see). Output names the tool's private folder as ``<tmp>``.

    Args:
        argv: Command and arguments (built by the judge; the agent's flags are allow-listed before).
        cwd: Working directory (the build's private stage).
        deadline: Shared build deadline; the call is killed when it passes.
        max_output_bytes: Kill the call once it has printed more than this.
        env: Extra environment variables (secret-looking names are dropped).
        reads: Host folders the judge chose as inputs besides ``cwd`` (cached objects, the PCH's folder, the
            toolchain's include and library folders).
        writes: Folders the command may write (its output's folder).
        tools: Executables it runs besides ``argv[0]`` (nvcc's host compiler): their install folders are seen.
        memory_bytes: Address-space limit of each process (0: :data:`COMPILER_MEMORY_BYTES`).
        file_size_bytes: Largest file it may write (0: 1 GiB).

    Returns:
        The finished call; never raises for a failing or missing tool.
    """
    start = time.monotonic()
    if not _SLOTS.acquire(timeout=max(deadline.remaining_s(), 0.001)):
        return ToolRun(tuple(argv), RunOutcome.TIMEOUT, -1, "waited for a free compiler slot past the deadline",
                       time.monotonic() - start)
    try:
        with tempfile.TemporaryDirectory(prefix="cudagym-tool-") as private:
            limits = {"as": memory_bytes or COMPILER_MEMORY_BYTES, "fsize": file_size_bytes or GiB, "core": 0,
                      "nofile": 1024,
                      "cpu": int(deadline.remaining_s()) + 5}
            command = confine.wrap(limited_command(argv, limits), confine.view_for(
                reads=(str(cwd), *map(str, reads)), writes=(private, *map(str, writes)), chdir=cwd,
                tools=tool_executables(argv[:1], tools)))
            full_env = scrub_env(os.environ, home=f"{private}/home", tmpdir=f"{private}/tmp",
                                 extra={**TOOL_ENV, **(env or {})})
            run = _run(argv, command, cwd, full_env, deadline, max_output_bytes, start)
            return dataclasses.replace(run, output=_private_as_tmp(run.output, private))
    except SandboxUnavailableError as exc:
        return ToolRun(tuple(argv), RunOutcome.NOT_FOUND, -1, str(exc), time.monotonic() - start)
    finally:
        _SLOTS.release()


def _run(argv: Sequence[str], command: Sequence[str], cwd: str | Path, env: Mapping[str, str], deadline: Deadline,
         max_output_bytes: int, start: float) -> ToolRun:
    try:
        proc = confine.popen(command, cwd=str(cwd), env=dict(env), stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as exc:
        return ToolRun(tuple(argv), RunOutcome.NOT_FOUND, -1, f"cannot run {argv[0]}: {exc}", 0.0)
    with _LIVE_LOCK:
        _LIVE[proc] = BUILD_OWNER.get()
    try:
        return _wait(argv, proc, deadline, max_output_bytes, start)
    finally:
        with _LIVE_LOCK:
            _LIVE.pop(proc, None)


def kill_running_tools(owner: object) -> int:
    """Kill the compilers running for ``owner`` (a judge that closed: see :data:`BUILD_OWNER`); how many."""
    with _LIVE_LOCK:
        running = [p for p, o in _LIVE.items() if o is owner and p.poll() is None]
    for proc in running:
        _kill_group(proc)
    return len(running)


def _wait(argv: Sequence[str], proc: subprocess.Popen[bytes], deadline: Deadline, max_output_bytes: int,
          start: float) -> ToolRun:
    chunks: list[bytes] = []
    overflow = threading.Event()
    reader = threading.Thread(target=_drain, args=(proc, chunks, max_output_bytes, overflow), daemon=True)
    reader.start()
    outcome = RunOutcome.EXITED
    while True:
        try:
            proc.wait(timeout=min(0.05, max(deadline.remaining_s(), 0.001)))
            break
        except subprocess.TimeoutExpired:
            if overflow.is_set():
                outcome = RunOutcome.OUTPUT_LIMIT
            elif deadline.expired:
                outcome = RunOutcome.TIMEOUT
            else:
                continue
            _kill_group(proc)
            break
    reader.join(timeout=5.0)
    if outcome is RunOutcome.EXITED and overflow.is_set():
        outcome = RunOutcome.OUTPUT_LIMIT
    text = b"".join(chunks)[:max_output_bytes].decode("utf-8", errors="replace")
    code = confine.exit_status(proc.returncode) if outcome is RunOutcome.EXITED else -1
    if outcome is RunOutcome.EXITED and code == 127 and "cudagym sandbox: cannot run" in text:
        outcome = RunOutcome.NOT_FOUND
    return ToolRun(tuple(argv), outcome, code, text, time.monotonic() - start)


def limited_command(argv: Sequence[str], limits: Mapping[str, int]) -> list[str]:
    """``argv`` behind the limits shim (:mod:`cudagym.judge.limits_exec`), which sets rlimits and execs it."""
    return [sys.executable, "-I", "-S", limits_exec.__file__, json.dumps(dict(limits)), "--", *argv]


def _private_as_tmp(text: str, private: str) -> str:
    """Tool output with the tool's private folder (its ``TMPDIR`` and ``HOME``) named ``<tmp>``."""
    return text.replace(f"{private}/tmp/", "<tmp>/").replace(f"{private}/", "<tmp>/")


def tool_executables(argv0: Sequence[str], tools: Sequence[str] = ()) -> list[str]:
    """The programs a command runs, as the judge names them: its ``argv[0]`` and ``tools``, found on ``PATH``."""
    return [shutil.which(t) or t for t in (*argv0, *tools) if t]


def compile_slots() -> int:
    """Compiler processes one interpreter runs at once.

    The cores, and no more than three quarters of the host's memory allows at :data:`COMPILER_MEMORY_BYTES`
    each (a 24 GiB, 2-core host: 2; a 128 GiB, 16-core host: 16).
    """
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        memory = 16 * GiB
    return max(1, min(os.cpu_count() or 1, int(memory * 0.75 // COMPILER_MEMORY_BYTES)))


def _drain(proc: subprocess.Popen[bytes], chunks: list[bytes], cap: int, overflow: threading.Event) -> None:
    assert proc.stdout is not None
    total = 0
    while True:
        chunk = proc.stdout.read1(_READ_CHUNK_BYTES)  # type: ignore[attr-defined]
        if not chunk:
            break
        total += len(chunk)
        if total <= cap + _READ_CHUNK_BYTES:
            chunks.append(chunk)
        if total > cap:
            overflow.set()
            _kill_group(proc)
            # keep reading so the pipe never blocks a dying child; the bytes are dropped
    proc.stdout.close()


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    # the tool leads its own session (start_new_session), so its pid is the process-group id
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5.0)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL does not fail
        pass


def run_sandboxed_tool(
    argv: Sequence[str],
    *,
    cwd: str | Path,
    deadline: Deadline,
    max_output_bytes: int,
    policy: SandboxPolicy,
    env: Mapping[str, str] | None = None,
) -> ToolRun:
    """Run one command that executes candidate code in the sandbox, to completion, the deadline or a limit.

    Unlike :func:`run_tool`, the command does not inherit this process's environment: it gets
    :func:`~cudagym.judge.sandbox.scrub_env`'s (no secrets, private ``HOME`` and ``TMPDIR``), the policy's
    rlimits and isolation, and the watchdog's process, memory and disk limits. Its process group is
    killed at the deadline, past ``max_output_bytes`` of output, or when it breaks a limit. It may write
    only ``cwd`` and its private folders, all of them under the watchdog's disk limit: whatever it leaves
    there is the caller's to check, never a cache entry as it stands.

    Args:
        argv: Command and arguments.
        cwd: Working directory (a private copy of what the command needs).
        deadline: Shared build deadline; the call is killed when it passes.
        max_output_bytes: Kill the call once it has printed more than this.
        policy: Sandbox limits and isolation (its output caps are replaced by ``max_output_bytes``).
        env: Extra environment variables (secret-looking names are still dropped).

    Returns:
        The finished call; a broken limit other than output ends as ``EXITED`` with the killing signal's
        status and the reason appended to the output. Never raises for failing candidate code.
    """
    policy = dataclasses.replace(policy, output_bytes=max_output_bytes, log_bytes=max_output_bytes)
    try:
        run = run_sandboxed(argv, cwd=cwd, policy=policy, timeout_s=max(deadline.remaining_s(), 0.001),
                            env={**TOOL_ENV, **(env or {})})
    except SandboxUnavailableError as exc:
        return ToolRun(tuple(argv), RunOutcome.NOT_FOUND, -1, str(exc), 0.0)
    if run.timed_out:
        return ToolRun(tuple(argv), RunOutcome.TIMEOUT, -1, run.output, run.wall_time_s)
    if run.violation and run.output_bytes > max_output_bytes:
        return ToolRun(tuple(argv), RunOutcome.OUTPUT_LIMIT, -1, run.output, run.wall_time_s)
    if run.violation:  # killed by the watchdog: never a success, even if it had just exited 0
        output = f"{run.output}\n[cudagym judge: {run.violation}]\n"
        return ToolRun(tuple(argv), RunOutcome.EXITED, run.returncode or -1, output, run.wall_time_s)
    return ToolRun(tuple(argv), RunOutcome.EXITED, run.returncode, run.output, run.wall_time_s)


_SLOTS = threading.BoundedSemaphore(compile_slots())
_LIVE: dict[subprocess.Popen[bytes], object] = {}  # compilers running now, by the judge they build for
_LIVE_LOCK = threading.Lock()
