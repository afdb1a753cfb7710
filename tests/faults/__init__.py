"""Fault candidates (one file per fault, each opening with a comment naming it) and helpers to judge them."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from cudagym.judge.interface import EvalMode
from cudagym.judge.job import Job
from cudagym.judge.protocol import CUDAGYM_V0, Protocol
from cudagym.judge.records import BuildResult, BuildStatus
from cudagym.solution import Solution
from cudagym.task import Task, make_task

FAULTS_DIR = Path(__file__).resolve().parent

RELU_SOURCE = '''\
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(256, 256)]


def get_init_inputs():
    return []
'''


def relu_task() -> Task:
    return make_task(RELU_SOURCE, id="test/relu", suite="test", level=1, name="relu", origin="tests/faults")


def fast_protocol(timeout_s: float = 30.0) -> Protocol:
    return CUDAGYM_V0.with_changes(id="test-fast", eval_timeout_s=timeout_s)


def candidate(name: str) -> Solution:
    """The inline-format solution whose model_new.py is tests/faults/<name>.py."""
    return Solution("inline", {"model_new.py": (FAULTS_DIR / f"{name}.py").read_text()})


def script(source: str) -> Solution:
    """An inline-format solution from source text (run by the `jobs:run_script` stand-in)."""
    return Solution("inline", {"model_new.py": source})


def make_job(solution: Solution, *, timeout_s: float = 30.0, task: Task | None = None, job_id: str = "") -> Job:
    return Job(
        job_id=job_id or uuid.uuid4().hex[:12],
        task=task or relu_task(),
        solution=solution,
        build=BuildResult(BuildStatus.OK, solution.format),
        mode=EvalMode.VERIFY,
        protocol=fast_protocol(timeout_s),
    )


def processes_running(token: str) -> list[int]:
    """Host pids of live processes whose command line holds ``token`` (a confined process's own pid is its
    PID namespace's, so tests find them by a unique argument)."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and entry.name != str(os.getpid()):
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as fh:
                    if token.encode() in fh.read() and process_alive(int(entry.name)):
                        found.append(int(entry.name))
            except OSError:
                continue
    return found


def process_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (not gone, not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


class LoopbackListener:
    """A TCP listener on 127.0.0.1 (the host's loopback) that counts connections; bounded, stops by itself.

    A confined process has its own network namespace, so its 127.0.0.1 is not this one: a connection
    that reaches this listener is a sandbox escape.
    """

    def __init__(self, lifetime_s: float = 300.0) -> None:
        import socket
        import threading

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = threading.Event()
        self._deadline = __import__("time").monotonic() + lifetime_s
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        import time

        while not self._stop.is_set() and time.monotonic() < self._deadline:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()
