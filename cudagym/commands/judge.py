"""``cudagym judge serve``: one judge for every process of this host.

Starts a local judge (one worker per GPU, a build pool sized to the cores) and serves it on a Unix socket
(:mod:`cudagym.judge.remote`). It prints the two variables that point a process at it; a process started
with them (an async vector env's sub-processes, a trainer's rollout workers) makes its ``judge="local"``
envs use this judge and starts no GPU workers of its own. Runs until Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING

from cudagym.paths import writable_file

if TYPE_CHECKING:
    from cudagym.judge.local import LocalJudge
    from cudagym.judge.remote import JudgeServer

# How often the serving loop looks at the Ctrl-C flag; a Ctrl-C is answered within this time.
POLL_S = 0.2


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``cudagym judge``."""
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    serve = sub.add_parser("serve", help="serve this host's judge to its other processes on a local socket")
    serve.add_argument("--devices", default="auto", help="GPUs: auto, none, or comma-separated CUDA device ids")
    serve.add_argument("--build-workers", type=int, default=None, help="builds at once (default: one per core)")
    serve.add_argument("--cache-dir", help="cache folder (default: $CUDAGYM_CACHE_DIR or ~/.cache/cudagym)")
    serve.add_argument("--max-queued-per-env", type=int, default=8, help="unfinished jobs per client (default 8)")
    serve.add_argument("--journal", help="a JSONL journal of every job and result")


def run(args: argparse.Namespace, stop: threading.Event | None = None) -> int:
    """Serve until Ctrl-C (or until ``stop`` is set); the exit code is 0 either way.

    A Ctrl-C from the moment it says it is starting is a request to stop, never an error: one during start-up lets
    the judge finish starting (so it is shut down whole, its workers with it) and then stops it without serving. A
    second Ctrl-C interrupts the shutdown.
    """
    stop = stop or threading.Event()
    with _ctrl_c_requests_stop() as ctrl_c:
        if args.journal:
            writable_file(args.journal, "--journal")  # a usage error comes alone, before the judge starts
        print("cudagym judge: starting (Ctrl-C stops it)", file=sys.stderr, flush=True)
        from cudagym.judge.local import LocalJudge
        from cudagym.judge.remote import JudgeServer

        devices = args.devices if args.devices in ("auto", "none") else args.devices.split(",")
        with LocalJudge(devices=devices, build_workers=args.build_workers, cache_dir=args.cache_dir,
                        max_queued_per_env=args.max_queued_per_env, journal=args.journal) as judge, \
                JudgeServer(judge) as server:
            if not ctrl_c.is_set():
                _announce(judge, server)
            while not ctrl_c.is_set() and not stop.wait(POLL_S):
                pass
            if ctrl_c.is_set():
                print("cudagym judge: stopped (Ctrl-C)", file=sys.stderr)
    return 0


def _announce(judge: LocalJudge, server: JudgeServer) -> None:
    """Say what is served (stderr), and print the variables that point a process at it (stdout, for a shell)."""
    hardware = judge.hardware()
    print(f"cudagym judge: serving {len(judge.workers())} GPU worker(s) ({hardware.gpu}); point processes at "
          "it with:", file=sys.stderr)
    for name, value in server.environment.items():
        print(f"export {name}={shlex.quote(value)}")
    sys.stdout.flush()


class _Flag:
    """A bool a signal handler may set: no lock is taken, so it cannot deadlock the thread it interrupts."""

    def __init__(self) -> None:
        self.value = False

    def is_set(self) -> bool:
        """Whether it was set."""
        return self.value


@contextlib.contextmanager
def _ctrl_c_requests_stop() -> Iterator[_Flag]:
    """While inside, the first Ctrl-C (SIGINT) sets the yielded flag instead of raising KeyboardInterrupt.

    Only the main thread can take signals; called from another one (a test serving in a thread), the flag is never
    set and ``stop`` is the only way out. The handler only sets a bool: an ``Event.set`` there could wait forever
    on the lock of an ``Event.wait`` that the main thread was interrupted inside.
    """
    flag = _Flag()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def on_ctrl_c(signum: int, frame: FrameType | None) -> None:
        flag.value = True
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a second Ctrl-C interrupts the shutdown

    previous = signal.signal(signal.SIGINT, on_ctrl_c)
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)
