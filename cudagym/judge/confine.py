"""Confinement with bubblewrap of every process the agent's files or options can influence.

That is the compilers, the linker, the NVRTC server, the inline recorder and the GPU workers: each gets a
private file-system view, new namespaces, and dies with its parent.

Why bubblewrap: it is a small, maintained, setuid-free tool (Debian's ``bubblewrap``; Flatpak's sandbox) that
builds a private mount namespace from an explicit list of binds, so the view is an allow-list rather than a
list of holes to plug, and it also gives new user, PID, IPC, UTS, cgroup and network namespaces and a child
that dies with its parent. nsjail needs a build from source here, and Landlock cannot hide paths that
exist or take the network away on older kernels.

What a confined process sees (:func:`view_for`):

- read-only: the system (``/usr``, the ``/lib*``, ``/bin``, ``/sbin`` links, ``/etc/alternatives`` and the
  loader cache), the interpreter and its packages (torch, cudagym itself: from a checkout only the
  ``cudagym`` package folder, so neither ``envs/`` nor ``tests/`` exist; the bundled reference solutions
  are masked wherever they are installed), the CUDA toolkit and the host compiler, the GPU driver folder;
  plus any inputs the judge names (the job's sources, cached objects it links);
- writable: only the job's own folders; ``/tmp`` and ``/dev/shm`` are private and empty;
- not at all: the user's home, ``/root``, ``/etc/passwd``, other jobs, the caches, the host's network
  (a new network namespace has only loopback), the host's processes (a new PID namespace);
- for GPU workers, the GPU's device nodes.

A host where bubblewrap is missing or cannot create namespaces fails closed:
:class:`~cudagym.errors.SandboxUnavailableError` says how to install it, or how to opt out explicitly
with ``CUDAGYM_SANDBOX=off`` (then every result and the prompt say so).
"""

from __future__ import annotations

import functools
import glob
import importlib.util
import os
import queue
import shutil
import subprocess
import sys
import threading
import typing
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudagym.errors import SandboxUnavailableError
from cudagym.judge.records import Isolation

MODE_ENV = "CUDAGYM_SANDBOX"
BWRAP_ENV = "CUDAGYM_BWRAP"
MODES = ("bwrap", "off")
_TMP_BYTES = 1 << 30  # the private /tmp is memory: bounded (TMPDIR points into the job's folder anyway)
_SHM_BYTES = 256 << 20  # a View's own writable /dev/shm (View.shm), memory too
SANDBOX_UID = 1000  # the uid (and gid) inside the user namespace: no capability over anything outside it
_SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
                 "/etc/localtime")
_GPU_NODES = ("/dev/nvidia*", "/dev/nvidia-caps", "/dev/dri")
_INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; or set CUDAGYM_BWRAP to its "
                 "path), or opt out explicitly with CUDAGYM_SANDBOX=off (every result and the prompt then say "
                 "that candidate code runs unconfined)")


@dataclass(frozen=True)
class View:
    """What one confined process may see and do.

    Attributes:
        read_only: Host paths bound read-only at the same path.
        writable: Host paths bound read-write at the same path (the job's own folders).
        masked: Paths hidden under an empty read-only folder (inside a bound tree).
        gpu: Bind the GPU device nodes.
        network: Keep the host's network (never for candidate code).
        chdir: Working directory inside the view.
        shm: A writable ``/dev/shm`` of its own (new and empty, gone with the sandbox) instead of the read-only
            one: compute-sanitizer's front end and the process it checks may share memory through it.
    """

    read_only: tuple[str, ...] = ()
    writable: tuple[str, ...] = ()
    masked: tuple[str, ...] = ()
    gpu: bool = False
    network: bool = False
    chdir: str = ""
    shm: bool = False


def mode() -> str:
    """The sandbox mode of this host: ``bwrap`` (default) or ``off`` (``CUDAGYM_SANDBOX``).

    Raises:
        SandboxUnavailableError: The variable holds something else.
    """
    value = os.environ.get(MODE_ENV, "bwrap").strip().lower() or "bwrap"
    if value not in MODES:
        raise SandboxUnavailableError(f"expected {MODE_ENV} to be one of {', '.join(MODES)}, got {value!r}")
    return value


def find_bwrap() -> str:
    """Path of the bubblewrap executable (``CUDAGYM_BWRAP``, else ``bwrap`` on ``PATH``).

    Raises:
        SandboxUnavailableError: None is found.
    """
    explicit = os.environ.get(BWRAP_ENV, "")
    if explicit:
        if os.path.isfile(explicit) and os.access(explicit, os.X_OK):
            return explicit
        raise SandboxUnavailableError(f"expected {BWRAP_ENV} to name the bwrap executable, got {explicit!r}; "
                                      f"fix or unset it, or {_INSTALL_HINT}")
    found = shutil.which("bwrap")
    if not found:
        raise SandboxUnavailableError(f"the judge confines candidate code with bubblewrap and found no bwrap; "
                                      f"{_INSTALL_HINT}")
    return found


@functools.lru_cache(maxsize=4)
def _probe(bwrap: str) -> str:
    """Bwrap's version after one confined ``true`` ran (so namespaces work here); raises otherwise."""
    argv = [bwrap, *_namespace_args(View(), bwrap), *_system_args(), "--", "true"]
    try:
        run = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        version = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=30,
                                 check=False).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailableError(f"bubblewrap ({bwrap}) could not run: {exc}; {_INSTALL_HINT}") from None
    if run.returncode != 0:
        detail = (run.stderr or run.stdout).strip().splitlines()[-1:] or ["no message"]
        raise SandboxUnavailableError(
            f"bubblewrap could not start a sandbox on this host ({detail[0]}); it needs user namespaces "
            f"(sysctl kernel.unprivileged_userns_clone=1) or root; or {_INSTALL_HINT}")
    return version or "bubblewrap"


def isolation(*, limits: Iterable[str] = ()) -> Isolation:
    """The isolation facts of this host's sandbox, checked by running it once (cached).

    Args:
        limits: The resource limits applied, in words (``"address space 6 GiB"``), recorded with the facts.

    Raises:
        SandboxUnavailableError: The mode is ``bwrap`` and bubblewrap is missing or cannot run here.
    """
    if mode() == "off":
        return Isolation(sandbox="off", network_isolated=False, filesystem_isolated=False,
                         pid_namespace=False, limits=tuple(limits),
                         notes=("CUDAGYM_SANDBOX=off: candidate code and compilers run unconfined",))
    version = _probe(find_bwrap())
    return Isolation(sandbox=version, network_isolated=True, filesystem_isolated=True, pid_namespace=True,
                     limits=tuple(limits))


def wrap(argv: Sequence[str], view: View) -> list[str]:
    """``argv`` run inside ``view`` (unchanged when the mode is ``off``).

    Raises:
        SandboxUnavailableError: The mode is ``bwrap`` and bubblewrap is missing or cannot run here.
    """
    if mode() == "off":
        return list(argv)
    bwrap = find_bwrap()
    _probe(bwrap)
    args = [bwrap, *_namespace_args(view, bwrap), *_system_args()]
    bound: list[str] = ["/usr", *(p for p in _SYSTEM_FILES if os.path.isdir(p))]
    for path in _existing(view.read_only):
        if not any(path == b or path.startswith(b.rstrip("/") + "/") for b in bound):
            args += ["--ro-bind", path, path]
            bound.append(path)
    for path in _existing(view.writable):
        args += ["--bind", path, path]
    for path in view.masked:
        if os.path.isdir(path):
            args += ["--tmpfs", path, "--remount-ro", path]
    if view.gpu:
        for pattern in _GPU_NODES:
            for node in sorted(glob.glob(pattern)):
                args += ["--dev-bind", node, node]
    if view.chdir:
        args += ["--chdir", view.chdir]
    if view.shm:  # mounted over the read-only one: private to this sandbox's mount namespace
        args += ["--size", str(_SHM_BYTES), "--tmpfs", "/dev/shm"]
    # bubblewrap's own root and /dev are tmpfs of no size limit, writable by the sandbox: files there were host
    # memory that no limit counted. Last, once every mount point in them exists; the mounts on them stay as they are.
    args += ["--remount-ro", "/dev", "--remount-ro", "/"]
    return [*args, "--", *argv]


def _namespace_args(view: View, bwrap: str) -> list[str]:
    args = ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--unshare-pid",
            "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox",
            "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if _disables_userns(bwrap):
        # a user namespace of its own lets the sandbox mount a tmpfs of no size limit (and reach whatever else
        # the kernel allows a namespace's root): host memory that no limit counts
        args.append("--disable-userns")
    if not view.network:
        args.append("--unshare-net")
    return args


@functools.lru_cache(maxsize=4)
def _disables_userns(bwrap: str) -> bool:
    """Whether this bubblewrap has ``--disable-userns`` (0.8.0 and on)."""
    try:
        run = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--disable-userns" in run.stdout + run.stderr


def _system_args() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for link in _SYSTEM_LINKS:
        if os.path.islink(link):
            args += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            args += ["--ro-bind", link, link]
    for path in _SYSTEM_FILES:
        if os.path.exists(path):
            args += ["--ro-bind", path, path]
    # a private /dev (null, zero, random, tty...), a new /proc for the PID namespace, empty /tmp;
    # /dev/shm read-only, so nothing is left in shared memory for anyone
    return [*args, "--dev", "/dev", "--size", str(1 << 20), "--tmpfs", "/dev/shm",
                  "--remount-ro", "/dev/shm", "--proc", "/proc", "--size", str(_TMP_BYTES), "--tmpfs", "/tmp"]


def _existing(paths: Iterable[str]) -> list[str]:
    out = []
    for path in paths:
        if path and os.path.exists(path):
            out.append(os.path.abspath(path))
    # a parent bound after its child would hide the child's own mount: bind parents first
    return sorted(dict.fromkeys(out), key=lambda p: (p.count("/"), p))


# ----------------------------------------------------------------------------------------------------
# The views
# ----------------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def python_paths() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Read-only folders the interpreter and its packages need, and the bundled-solution folders to mask.

    A checkout's root (the folder holding ``cudagym/`` beside ``envs/`` and ``tests/``) is never bound
    whole: only its ``cudagym`` package folder.
    """
    package = Path(__file__).resolve().parents[1]  # .../cudagym
    checkout = package.parent
    roots: list[str] = [sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))]
    for entry in sys.path:
        if not entry or not os.path.isdir(entry):
            continue
        real = os.path.realpath(entry)
        if real == str(checkout) or (Path(real) / "cudagym").resolve() == package:
            roots.append(str(package) if real == str(checkout) else real)
        elif not _is_project_tree(real):
            roots.append(real)
    roots.append(str(package))
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if entry and os.path.isdir(entry) and os.path.realpath(entry) != str(checkout):
            roots.append(os.path.realpath(entry))
    return tuple(dict.fromkeys(roots)), tuple(_solution_folders())


def _is_project_tree(path: str) -> bool:
    # the test runner's root or a tests folder on sys.path: the planted candidates and the bundled
    # solutions live there
    p = Path(path)
    return (p / "envs" / "bundled").is_dir() or (p / "tests" / "hacks").is_dir() or p.name == "tests"


def _solution_folders() -> list[str]:
    spec = importlib.util.find_spec("cudagym.envs")
    found = []
    for loc in (spec.submodule_search_locations or []) if spec else []:
        folder = Path(loc) / "bundled" / "solutions"
        if folder.is_dir():
            found.append(str(folder.resolve()))
    return found


def tool_prefixes(*executables: str) -> tuple[str, ...]:
    """The install folders of executables (``/opt/gcc`` for ``/opt/gcc/bin/g++``), links resolved."""
    out = []
    for exe in executables:
        if not exe:
            continue
        for path in {os.path.abspath(exe), os.path.realpath(exe)}:
            parent = Path(path).parent
            out.append(str(parent.parent if parent.name == "bin" else parent))
    return tuple(dict.fromkeys(out))


def view_for(*, reads: Iterable[str] = (), writes: Iterable[str] = (), gpu: bool = False,
             chdir: str | os.PathLike[str] = "", tools: Sequence[str] = (), shm: bool = False) -> View:
    """The view of a confined process.

    The system, Python and its packages, ``tools``' and the host C/C++ compilers' install folders (torch.compile
    compiles with them), the CUDA toolkit and driver, plus the job's own ``reads`` (read-only) and ``writes``
    (read-write); ``shm`` gives it a writable ``/dev/shm`` of its own.
    """
    python, masked = python_paths()
    compilers = [os.environ.get(v, "") for v in ("CC", "CXX", "CUDAHOSTCXX")]
    compilers += [shutil.which(name) or "" for name in ("cc", "c++", "gcc", "g++")]  # torch.compile's inductor
    cuda = [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda", os.path.realpath("/usr/local/cuda"),
            "/usr/local/nvidia"]
    libs = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    return View(read_only=(*python, *cuda, *libs, *tool_prefixes(*tools, *compilers), *map(str, reads)),
                writable=tuple(map(str, writes)), masked=masked, gpu=gpu, chdir=str(chdir), shm=shm)


def exit_status(returncode: int) -> int:
    """A confined command's exit status as :class:`subprocess.Popen` reports an unconfined one.

    bubblewrap exits with 128 + N when its command died of signal N; that is returned as ``-N``.
    """
    if mode() != "off" and 128 < returncode < 128 + 65:
        return -(returncode - 128)
    return returncode


# ----------------------------------------------------------------------------------------------------
# Starting confined processes
# ----------------------------------------------------------------------------------------------------

# bwrap's --die-with-parent kills the sandbox when the *thread* that started it exits (PR_SET_PDEATHSIG
# follows the creating thread), so every confined process is started from one long-lived daemon thread. Not a
# ThreadPoolExecutor's: those are joined at interpreter exit before other work ends, and the torch PCH that a
# short-lived process builds in the background for the next one would die with it.
class _Spawner:
    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def run(self, fn: Callable[[], Any]) -> Any:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="cudagym-spawner", daemon=True)
                self._thread.start()
        done: Future[Any] = Future()
        self._queue.put((fn, done))
        return done.result()

    def _loop(self) -> None:
        while True:
            fn, done = self._queue.get()
            try:
                done.set_result(fn())
            except BaseException as exc:  # noqa: B902 - handed to the caller, who re-raises it
                done.set_exception(exc)


_spawner = _Spawner()


def popen(argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """:class:`subprocess.Popen` of ``argv``, started from the long-lived spawner thread (see above)."""
    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(list(argv), **kwargs)

    return typing.cast("subprocess.Popen[bytes]", _spawner.run(start))
