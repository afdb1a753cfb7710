"""A long-lived NVRTC child process: raw-format compiles without paying process start and library load.

Spawning a process, importing CuPy's NVRTC binding and loading ``libnvrtc`` cost more than compiling a small
kernel, so one child per library stays up and compiles requests one at a time (see
:func:`cudagym.judge.build.nvrtc._serve`). The build's limits still hold: a request past its deadline kills
the child's process group (a new child starts with the next request), and the child caps each log at the
output limit.

The child is confined like every compiler (:mod:`cudagym.judge.confine`): it sees the system, Python, the
CUDA toolkit and one private exchange folder, nothing else. Each request's sources are copied into a fresh
subfolder there and its cubin is moved out, so ``#include`` finds the agent's own files and no host file.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from cudagym.errors import SandboxUnavailableError
from cudagym.judge import confine
from cudagym.judge.build import nvrtc
from cudagym.judge.build.process import (
    COMPILER_MEMORY_BYTES,
    TOOL_ENV,
    BuildLimits,
    Deadline,
    RunOutcome,
    ToolRun,
    limited_command,
)
from cudagym.judge.sandbox import scrub_env


class NvrtcServer:
    """One NVRTC child for one library path; thread-safe (compiles are serialised)."""

    def __init__(self, lib: str) -> None:
        self.lib = lib
        self._proc: subprocess.Popen[bytes] | None = None
        self._buffer = b""
        self._lock = threading.Lock()
        self._exchange = ""
        self._requests = itertools.count()
        self._memory_bytes = COMPILER_MEMORY_BYTES

    def compile(self, *, cwd: Path, source: str, out: Path, options: Sequence[str], deadline: Deadline,
                limits: BuildLimits) -> ToolRun:
        """Compile ``source`` (relative to ``cwd``, whose files are its includes) into the cubin ``out``."""
        argv = ("nvrtc", source, *options)
        with self._lock:
            start = time.monotonic()
            try:
                proc = self._ensure(limits.compiler_memory_bytes)
            except (OSError, SandboxUnavailableError) as exc:
                return ToolRun(argv, RunOutcome.NOT_FOUND, -1, f"the NVRTC child could not be started: {exc}", 0.0)
            request_dir = Path(self._exchange) / f"r{next(self._requests)}"
            shutil.copytree(cwd, request_dir)
            request = {"cwd": str(request_dir), "source": source, "name": source, "out": "out.cubin",
                       "options": list(options), "max_output_bytes": limits.max_output_bytes}
            try:
                assert proc.stdin is not None
                proc.stdin.write((json.dumps(request) + "\n").encode())
                proc.stdin.flush()
                line, timed_out = self._read_line(proc, deadline)
                if line is not None and (request_dir / "out.cubin").is_file():
                    shutil.move(request_dir / "out.cubin", out)
            except OSError:
                line, timed_out = None, False
            finally:
                shutil.rmtree(request_dir, ignore_errors=True)
            wall = time.monotonic() - start
            if line is None:
                self.close()
                if timed_out:
                    return ToolRun(argv, RunOutcome.TIMEOUT, -1, "", wall)
                return ToolRun(argv, RunOutcome.EXITED, 1, f"NVRTC crashed compiling {source}", wall)
        reply = json.loads(line)
        if reply["overflow"]:
            return ToolRun(argv, RunOutcome.OUTPUT_LIMIT, -1, reply["log"], wall)
        return ToolRun(argv, RunOutcome.EXITED, 0 if reply["ok"] else 1, reply["log"], wall)

    def close(self) -> None:
        """Stop the child (its whole process group)."""
        proc, self._proc, self._buffer = self._proc, None, b""
        if self._exchange:
            shutil.rmtree(self._exchange, ignore_errors=True)
            self._exchange = ""
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait(timeout=5.0)
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()

    def _ensure(self, memory_bytes: int) -> subprocess.Popen[bytes]:
        # the child's address-space cap is the build's (a protocol may lower it): another cap, another child
        if self._proc is None or self._proc.poll() is not None or memory_bytes != self._memory_bytes:
            self.close()
            self._memory_bytes = memory_bytes
            self._exchange = tempfile.mkdtemp(prefix="cudagym-nvrtc-")
            # -I: the child imports only the stdlib and CuPy's NVRTC binding, from its own site-packages or this
            # process's import roots (passed last), never through environment hooks or from the script's folder
            roots = json.dumps([p for p in sys.path if p and os.path.isdir(p)])
            child = [sys.executable, "-I", nvrtc.__file__, self.lib, roots]
            command = confine.wrap(limited_command(child, {"as": memory_bytes, "core": 0}),
                                   confine.view_for(reads=(os.path.dirname(self.lib),), writes=(self._exchange,),
                                                    chdir=self._exchange))
            env = scrub_env(os.environ, home=f"{self._exchange}/home", tmpdir=f"{self._exchange}/tmp",
                            extra=TOOL_ENV)
            self._proc = confine.popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL, start_new_session=True, env=env)
        return self._proc

    def _read_line(self, proc: subprocess.Popen[bytes], deadline: Deadline) -> tuple[str | None, bool]:
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline.remaining_s()
            if remaining <= 0:
                return None, True
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                return None, True
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return None, False
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode("utf-8", errors="replace"), False


_servers: dict[str, NvrtcServer] = {}
_servers_lock = threading.Lock()


def server_for(lib: str) -> NvrtcServer:
    """The process-wide NVRTC child for ``lib`` (started on first use, stopped at exit)."""
    with _servers_lock:
        server = _servers.get(lib)
        if server is None:
            server = _servers[lib] = NvrtcServer(lib)
        return server


@atexit.register
def _stop_all() -> None:
    for server in list(_servers.values()):
        server.close()
