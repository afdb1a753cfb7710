"""``cudagym judge serve``: one judge for every process of this host.

Starts a local judge (one worker per GPU, a build pool sized to the cores) and serves it on a Unix socket
(:mod:`cudagym.judge.remote`). It prints the two variables that point a process at it; a process started
with them (an async vector env's sub-processes, a trainer's rollout workers) makes its ``judge="local"``
envs use this judge and starts no GPU workers of its own. Runs until Ctrl-C.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import threading

from cudagym.paths import writable_file


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
    """Serve until Ctrl-C (or until ``stop`` is set); the exit code is 0 either way."""
    from cudagym.judge.local import LocalJudge
    from cudagym.judge.remote import JudgeServer

    if args.journal:
        writable_file(args.journal, "--journal")
    devices = args.devices if args.devices in ("auto", "none") else args.devices.split(",")
    with LocalJudge(devices=devices, build_workers=args.build_workers, cache_dir=args.cache_dir,
                    max_queued_per_env=args.max_queued_per_env, journal=args.journal) as judge, \
            JudgeServer(judge) as server:
        hardware = judge.hardware()
        print(f"cudagym judge: serving {len(judge.workers())} GPU worker(s) ({hardware.gpu}); point processes at "
              "it with:", file=sys.stderr)
        for name, value in server.environment.items():
            print(f"export {name}={shlex.quote(value)}")
        sys.stdout.flush()
        try:
            (stop or threading.Event()).wait()
        except KeyboardInterrupt:  # Ctrl-C is how the server is stopped, not an error
            print("cudagym judge: stopped (Ctrl-C)", file=sys.stderr)
    return 0
