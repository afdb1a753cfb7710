"""escape: files outside the workspace and the network: stopped by the sandbox, named by these guards.

The sandbox (:mod:`cudagym.judge.confine`) enforces both: a confined worker has no host file outside the
toolchain, no cache, no home, no other job, and no network but a private loopback. These guards make the
verdict say so. The worker installs one Python audit hook (PEP 578; it cannot be removed) at start and
records, while a job runs, every ``open`` of a path outside what the job may read
(its workspace and private folders, the worker's folder, the Python, torch and CUDA installs, ``/usr``,
``/dev``, ``/proc``) and every socket ``connect``, ``sendto`` or name lookup. After the job
(:func:`finish_job`) each recorded attempt becomes a :class:`~cudagym.judge.records.Violation` of
``file_access`` or ``network`` when the protocol runs that guard, so the observation names the rule that
stopped it (the attempt itself already failed: the file does not exist there, the address is unreachable).
Native code can skip the hook; it cannot skip the sandbox.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import threading
from collections.abc import Iterable
from pathlib import Path

from cudagym.judge.guards.base import Guard, register
from cudagym.judge.hostpaths import scrub

WORKER_ROOT_ENV = "CUDAGYM_WORKER_ROOT"
_MAX_EVENTS = 64
# only opens: listing a folder that does not exist finds nothing, and torch probes sys.path that way itself
_FILE_EVENTS = ("open",)
_NET_EVENTS = ("socket.connect", "socket.sendto", "socket.getaddrinfo", "socket.gethostbyname",
               "socket.gethostbyname_ex", "socket.gethostbyaddr", "socket.getnameinfo")


@register
class FileAccess(Guard):
    """Reading or writing files outside the workspace (the sandbox has none; the worker names the attempt)."""

    name = "file_access"
    summary = "touch no file outside the workspace"


@register
class Network(Guard):
    """Network access (the sandbox has no network; the worker names the attempt)."""

    name = "network"
    summary = "no network access"


class _Recorder:
    def __init__(self) -> None:
        self.active = False
        self.allowed: tuple[str, ...] = ()
        self.files: list[str] = []
        self.network: list[str] = []
        self.lock = threading.Lock()

    def hook(self, event: str, args: tuple[object, ...]) -> None:
        if not self.active:
            return
        if event in _FILE_EVENTS:
            self._file(args[0] if args else None, str(args[1]) if event == "open" and len(args) > 1 else "r")
        elif event in _NET_EVENTS:
            self._net(event, args)

    def _file(self, path: object, mode: str) -> None:
        if path is None or isinstance(path, int):
            return
        try:
            text = os.path.abspath(os.fsdecode(path))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return
        if any(text == root or text.startswith(root + "/") for root in self.allowed):
            return
        writing = any(c in mode for c in "wax+")
        with self.lock:
            if len(self.files) < _MAX_EVENTS:
                self.files.append(f"{'write' if writing else 'read'} {scrub(text)}")

    def _net(self, event: str, args: tuple[object, ...]) -> None:
        what = event.removeprefix("socket.")
        if event in ("socket.connect", "socket.sendto") and len(args) > 1:
            target = args[1]
        else:
            target = args[0] if args else ""
        with self.lock:
            if len(self.network) < _MAX_EVENTS:
                self.network.append(f"{what} {target!r}")


_recorder = _Recorder()
_installed = False


def install() -> None:
    """Install the audit hook in this process (once; a worker calls it at start)."""
    global _installed
    if not _installed:
        sys.addaudithook(_recorder.hook)
        _installed = True


def start_job(workspace: str | os.PathLike[str], extra: Iterable[str] = ()) -> None:
    """Start recording for one job whose files are in ``workspace`` (and ``extra`` folders it may read)."""
    roots = [str(workspace), os.environ.get("HOME", ""), os.environ.get("TMPDIR", ""), "/tmp",
             os.environ.get(WORKER_ROOT_ENV, ""), sys.prefix, sys.base_prefix, sysconfig.get_paths()["purelib"],
             sysconfig.get_paths()["stdlib"], str(Path(__file__).resolve().parents[2]), "/usr", "/dev", "/proc",
             "/sys", "/etc/ld.so.cache", "/etc/localtime", os.environ.get("CUDA_HOME", ""), "/usr/local/cuda",
             "/usr/local/nvidia", *_import_roots(), *extra]
    with _recorder.lock:
        _recorder.allowed = tuple(sorted({os.path.abspath(r).rstrip("/") for r in roots if r and r != "/"}))
        _recorder.files, _recorder.network = [], []
        _recorder.active = True


def _import_roots() -> list[str]:
    # the interpreter's import path, except a checkout's root or a tests folder (the bundled solutions and
    # the planted candidates live there; the sandbox shows none of it)
    out = []
    for entry in sys.path:
        p = Path(entry or ".")
        if not ((p / "envs" / "bundled").is_dir() or (p / "tests").is_dir() or p.name == "tests"):
            out.append(str(p))
    return out


def finish_job() -> tuple[list[str], list[str]]:
    """Stop recording; the attempts seen: (files outside what the job may read, network operations)."""
    with _recorder.lock:
        _recorder.active = False
        return list(_recorder.files), list(_recorder.network)


def violation_messages(files: list[str], network: list[str]) -> dict[str, str]:
    """One message per guard for recorded attempts (empty for none)."""
    out = {}
    if files:
        more = f" (+{len(files) - 8} more)" if len(files) > 8 else ""
        out["file_access"] = ("candidate code tried to use files outside its workspace, which do not exist in the "
                              f"judge's sandbox: {'; '.join(files[:8])}{more}")
    if network:
        more = f" (+{len(network) - 8} more)" if len(network) > 8 else ""
        out["network"] = ("candidate code tried to use the network, which the judge's sandbox does not have: "
                          f"{'; '.join(network[:8])}{more}")
    return out
