"""Process isolation for every process that runs candidate code: GPU workers and build subprocesses.

What a sandboxed process gets, and what each measure does where the host does not allow it:

- **its own session and process group**, so the judge kills the whole group (candidate subprocesses and
  fork bombs included) on a timeout or a broken limit;
- **a scrubbed environment**: only ``PATH``, locale, compiler, CUDA, torch/Triton/CuPy and cudagym
  variables pass, never one whose name says token, secret, password, key or proxy; ``HOME`` and
  ``TMPDIR`` point at private temporary folders. It is set before ``exec``, so ``/proc/self/environ``
  holds no credentials either;
- **rlimits**: CPU seconds per job (``SIGXCPU``), file size (``EFBIG``: Python ignores ``SIGXFSZ``), open
  files, no core dumps, and processes (``RLIMIT_NPROC`` counts per *user* and the kernel never enforces
  it for root, so the watchdog, :mod:`cudagym.judge.watchdog`, also counts the group and kills it past the
  limit). There is no address-space limit: CUDA reserves huge virtual ranges, so host memory is bounded by
  the watchdog summing the group's resident set instead;
- **no network**: a new network namespace (``unshare(CLONE_NEWNET)``) with only a loopback device. It
  needs ``CAP_SYS_ADMIN`` (root in most containers); where it fails the process keeps the host's network,
  :class:`SandboxInfo` says ``network_isolated=False`` and a warning is logged;
- **read-only judge code**: in a private mount namespace the cudagym and torch package folders are
  remounted read-only, then ``CAP_SYS_ADMIN`` and a few other capabilities are dropped so the candidate
  cannot undo that or leave the network namespace. Where namespaces are not allowed the folders stay
  writable by file permissions alone, and protected workspace files are still hash-checked before each
  evaluation (:func:`check_workdir`).

This is process-level hardening, not a security boundary against arbitrary native code running as root:
run the judge as an unprivileged user, or in a container without network, where that matters.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import hashlib
import importlib.util
import json
import logging
import os
import re
import resource
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cudagym.judge import confine
from cudagym.judge.watchdog import GiB, MiB, Watch, kill_process_group, shared_watchdog
from cudagym.solution import Solution, get_format

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SandboxPolicy:
    """Limits and isolation of one sandboxed process group.

    Attributes:
        cpu_time_s: CPU seconds (all threads) one job may use; past it the kernel sends ``SIGXCPU``.
        file_size_bytes: Largest file the group may write (``RLIMIT_FSIZE``; writes past it fail).
        open_files: Open file descriptors per process.
        max_processes: Processes in the group at once (the watchdog kills the group past it).
        host_rss_bytes: Resident host memory of the whole group (the watchdog kills the group past it).
        disk_bytes: Bytes on disk under the job's private folders (the watchdog kills past it).
        output_bytes: stdout+stderr a job may write before it is killed.
        log_bytes: How much of that output the result keeps (first and last halves).
        isolate_network: Enter a new network namespace.
        readonly_judge: Remount the cudagym and torch package folders read-only (mount namespace) and drop
            the capabilities that could undo it.
    """

    cpu_time_s: float = 1800.0
    file_size_bytes: int = 1 * GiB
    open_files: int = 4096
    max_processes: int = 64
    host_rss_bytes: int = 32 * GiB
    disk_bytes: int = 4 * GiB
    output_bytes: int = 16 * MiB
    log_bytes: int = 64 * 1024
    isolate_network: bool = True
    readonly_judge: bool = True

    def to_json(self) -> str:
        """JSON form (the launcher and workers receive the policy on their command line)."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SandboxPolicy:
        """Inverse of :meth:`to_json`."""
        return cls(**json.loads(text))


@dataclass(frozen=True)
class SandboxInfo:
    """What isolation a sandboxed process actually got (hosts differ; nothing is assumed)."""

    pid: int
    uid: int
    network_isolated: bool
    judge_readonly: bool
    capabilities_dropped: bool
    nproc_enforced: bool  # RLIMIT_NPROC only binds non-root users; the watchdog counts processes anyway
    notes: tuple[str, ...] = ()


# ----------------------------------------------------------------------------------------------------
# Environment
# ----------------------------------------------------------------------------------------------------

_KEEP_NAMES = frozenset({
    "PATH", "LANG", "LANGUAGE", "TZ", "TERM", "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONHASHSEED",
    "PYTHONNOUSERSITE", "VIRTUAL_ENV", "CONDA_PREFIX", "CC", "CXX", "CUDAHOSTCXX", "MAX_JOBS",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
})
_KEEP_PREFIXES = (
    "LC_", "CUDA_", "NVIDIA_", "NVCC_", "CUBLAS_", "CUDNN_", "TORCH_", "TORCHINDUCTOR_", "PYTORCH_",
    "TRITON_", "CUPY_", "CUDAGYM_",
)
# Never passed, whatever the allowlist says (CUDAGYM_HF_TOKEN, TORCH_HUB_TOKEN, ...).
_SECRET = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|API_?KEY|ACCESS_?KEY|PRIVATE|AUTH|COOKIE|PROXY", re.I)


def scrub_env(
    environ: Mapping[str, str], *, home: str, tmpdir: str, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of a sandboxed process.

    Args:
        environ: The parent's environment.
        home: Private ``HOME``.
        tmpdir: Private ``TMPDIR`` (also ``TMP`` and ``TEMP``).
        extra: Variables set on top (e.g. ``CUDA_VISIBLE_DEVICES``); secret-looking names still dropped.

    Returns:
        Allow-listed variables of ``environ`` plus ``extra``, without any secret-looking name.
    """
    env = {k: v for k, v in environ.items() if k in _KEEP_NAMES or k.startswith(_KEEP_PREFIXES)}
    env.update(extra or {})
    # USER/LOGNAME: getpass.getuser() (torch's inductor cache, Triton) reads them first; a confined process has
    # no passwd entry to fall back on
    env.update(HOME=home, TMPDIR=tmpdir, TMP=tmpdir, TEMP=tmpdir, PYTHONUNBUFFERED="1", PYTHONNOUSERSITE="1",
               USER="cudagym", LOGNAME="cudagym")
    return {k: v for k, v in env.items() if not _SECRET.search(k)}


# ----------------------------------------------------------------------------------------------------
# Entering the sandbox (runs in the sandboxed process itself, while it is still single-threaded:
# namespaces and capabilities are per thread, and threads created later inherit them)
# ----------------------------------------------------------------------------------------------------

_CLONE_NEWNS = 0x00020000
_CLONE_NEWNET = 0x40000000
_MS_RDONLY, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18
# Capabilities dropped after setting up namespaces: undoing mounts, leaving the namespace (setns),
# raw network, loading modules, tracing other processes, raising rlimits past the hard limit.
_DROPPED_CAPS = {"SYS_ADMIN": 21, "NET_ADMIN": 12, "NET_RAW": 13, "SYS_MODULE": 16, "SYS_PTRACE": 19,
                 "SYS_RESOURCE": 24, "SYS_BOOT": 22, "SYS_TIME": 25, "MKNOD": 27}
_PR_CAPBSET_DROP = 24
_CAP_VERSION_3 = 0x20080522


def enter_sandbox(policy: SandboxPolicy) -> SandboxInfo:
    """Apply the policy to the calling process (call it first thing, before any thread starts).

    Returns:
        What isolation the host allowed; unavailable measures are noted and logged, never raised.
    """
    notes: list[str] = []
    nproc = apply_rlimits(policy)
    network = False
    if policy.isolate_network:
        network, note = _isolate_network()
        if not network:
            notes.append(f"network not isolated: {note}")
    readonly = caps = False
    if policy.readonly_judge:
        readonly, note = _remount_readonly(judge_paths())
        if not readonly:
            notes.append(f"judge code not read-only: {note}")
        caps, note = _drop_capabilities()
        if not caps:
            notes.append(f"capabilities not dropped: {note}")
    for note in notes:
        log.warning("sandbox (pid %d): %s", os.getpid(), note)
    return SandboxInfo(
        pid=os.getpid(), uid=os.getuid(), network_isolated=network, judge_readonly=readonly,
        capabilities_dropped=caps, nproc_enforced=nproc, notes=tuple(notes),
    )


def apply_rlimits(policy: SandboxPolicy) -> bool:
    """Set file size, open files, core size, CPU and (for non-root users) process limits.

    Returns:
        True when ``RLIMIT_NPROC`` was set (it only binds users other than root).
    """
    _set_limit(resource.RLIMIT_CORE, 0)  # a segfaulting candidate must not write core files
    _set_limit(resource.RLIMIT_FSIZE, policy.file_size_bytes)
    _set_limit(resource.RLIMIT_NOFILE, policy.open_files)
    set_cpu_budget(policy.cpu_time_s)
    if os.getuid() == 0:
        return False
    # RLIMIT_NPROC counts every thread of the user: allow what the user already runs, plus the group's
    # processes with room for their threads (torch, CUDA and compile pools start many). It is a backstop;
    # the watchdog enforces max_processes exactly.
    _set_limit(resource.RLIMIT_NPROC, _count_user_threads(os.getuid()) + policy.max_processes * _THREADS_PER_PROCESS)
    return True


def set_cpu_budget(seconds: float) -> None:
    """Allow the calling process ``seconds`` more CPU time from now (``SIGXCPU`` past it)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = int(usage.ru_utime + usage.ru_stime + seconds) + 1
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _set_limit(which: int, value: int) -> None:
    soft, hard = resource.getrlimit(which)
    value = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(which, (value, hard))


_THREADS_PER_PROCESS = 64


def _count_user_threads(uid: int) -> int:
    count = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                text = fh.read()
            count += int(text[text.rfind(b")") + 2:].split()[17])  # field 20: num_threads
        except (OSError, ValueError, IndexError):
            continue
    return count


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _unshare(flags: int) -> None:
    if hasattr(os, "unshare"):  # Python 3.12+
        os.unshare(flags)
        return
    if _libc().unshare(flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _isolate_network() -> tuple[bool, str]:
    try:
        _unshare(_CLONE_NEWNET)
    except OSError as exc:
        return False, f"unshare(CLONE_NEWNET) failed ({exc.strerror}); needs CAP_SYS_ADMIN"
    try:  # a new namespace has only `lo`, and it is down: bring it up so localhost works
        siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
        import fcntl

        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            req = struct.pack("16sH14s", b"lo", 0, b"")
            flags = struct.unpack("16sH", fcntl.ioctl(sock, siocgifflags, req)[:18])[1]
            fcntl.ioctl(sock, siocsifflags, struct.pack("16sH14s", b"lo", flags | iff_up, b""))
    except OSError as exc:
        return True, f"loopback left down ({exc})"
    return True, ""


def judge_paths() -> tuple[str, ...]:
    """Folders a candidate must not change: the cudagym package and torch (found without importing it)."""
    paths = [str(Path(__file__).resolve().parents[1])]
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.submodule_search_locations:
        paths.extend(str(Path(p).resolve()) for p in spec.submodule_search_locations)
    return tuple(dict.fromkeys(paths))


def _remount_readonly(paths: Sequence[str]) -> tuple[bool, str]:
    libc = _libc()
    try:
        _unshare(_CLONE_NEWNS)
    except OSError as exc:
        return False, f"unshare(CLONE_NEWNS) failed ({exc.strerror}); needs CAP_SYS_ADMIN"
    # keep our mounts out of the host's namespace, then bind each folder onto itself and make it read-only
    if libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        return False, f"making / private failed ({os.strerror(ctypes.get_errno())})"
    for path in paths:
        p = path.encode()
        if (libc.mount(p, p, None, _MS_BIND | _MS_REC, None) != 0
                or libc.mount(None, p, None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY, None) != 0):
            return False, f"read-only bind of {path} failed ({os.strerror(ctypes.get_errno())})"
    return True, ""


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def _drop_capabilities() -> tuple[bool, str]:
    libc = _libc()
    for cap in _DROPPED_CAPS.values():  # from the bounding set first: exec must not give them back
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:  # EINVAL: unknown
            return False, f"PR_CAPBSET_DROP failed ({os.strerror(ctypes.get_errno())})"
    header = _CapHeader(_CAP_VERSION_3, 0)
    data = (_CapData * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        return False, f"capget failed ({os.strerror(ctypes.get_errno())})"
    for cap in _DROPPED_CAPS.values():
        word, bit = divmod(cap, 32)
        mask = ~(1 << bit) & 0xFFFFFFFF
        data[word].effective &= mask
        data[word].permitted &= mask
        data[word].inheritable &= mask
    if libc.capset(ctypes.byref(header), data) != 0:
        return False, f"capset failed ({os.strerror(ctypes.get_errno())})"
    return True, ""


# System V IPC: its objects live in the sandbox's IPC namespace, held by no process, so a segment that no process
# maps is host memory the watchdog cannot see (``shmget`` has no rlimit, and a new namespace allows any size). A
# sandbox that runs candidate code gets no System V IPC at all: the calls that create or open an object fail with
# EPERM. Numbers per architecture (the ``AUDIT_ARCH_*`` of seccomp's ``arch``): x86-64 (and its x32 ABI), i386 (its
# ``ipc`` multiplexer too: a 64-bit process can make 32-bit calls), aarch64 and 32-bit ARM.
_SYSV_GET_CALLS = {
    0xC000003E: (29, 64, 68, 0x40000000 | 29, 0x40000000 | 64, 0x40000000 | 68),  # shmget, semget, msgget
    0x40000003: (117, 393, 395, 399),  # ipc, semget, shmget, msgget
    0xC00000B7: (186, 190, 194),  # msgget, semget, shmget
    0x40000028: (299, 303, 307),  # semget, msgget, shmget
}
_SECCOMP_SET_MODE_FILTER = {"x86_64": 317, "aarch64": 277}  # seccomp(2), for SECCOMP_FILTER_FLAG_TSYNC
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, _SECCOMP_FILTER_FLAG_TSYNC = 38, 22, 2, 1
_RET_ALLOW, _RET_EPERM = 0x7FFF0000, 0x00050000 | 1


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


def _sysv_filter() -> list[tuple[int, int, int, int]]:
    """The classic BPF program: EPERM for the System V ``*get`` calls of every architecture listed, else allow."""
    ld_w_abs, jeq_k, ret_k = 0x20, 0x15, 0x06
    program: list[tuple[int, int, int, int]] = []
    for arch, calls in _SYSV_GET_CALLS.items():
        # ld arch; jeq arch ? next : (skip this block); ld nr; jeq each ? EPERM; ret allow; ret EPERM
        block = [(ld_w_abs, 0, 0, 0)]
        block += [(jeq_k, len(calls) - i, 0, nr) for i, nr in enumerate(calls)]
        block += [(ret_k, 0, 0, _RET_ALLOW), (ret_k, 0, 0, _RET_EPERM)]
        program += [(ld_w_abs, 0, 0, 4), (jeq_k, 0, len(block), arch), *block]
    return [*program, (ret_k, 0, 0, _RET_ALLOW)]


def forbid_sysv_ipc() -> tuple[bool, str]:
    """Make every System V IPC object creation or lookup of this process and its later children fail (EPERM).

    A seccomp filter (irrevocable, inherited across fork and exec); all threads of the process get it where the
    kernel can synchronize them. Returns whether it is in place, and why not.
    """
    libc = _libc()
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:  # bubblewrap set it already; unconfined, it is needed
        return False, f"PR_SET_NO_NEW_PRIVS failed ({os.strerror(ctypes.get_errno())})"
    program = _sysv_filter()
    filters = (_SockFilter * len(program))(*(_SockFilter(*ins) for ins in program))
    fprog = _SockFprog(len(program), filters)
    nr = _SECCOMP_SET_MODE_FILTER.get(os.uname().machine)
    if nr is not None and libc.syscall(nr, _SECCOMP_MODE_FILTER, _SECCOMP_FILTER_FLAG_TSYNC, ctypes.byref(fprog)) == 0:
        return True, ""
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        return False, f"seccomp filter refused ({os.strerror(ctypes.get_errno())})"
    return True, ""


# ----------------------------------------------------------------------------------------------------
# How a process ended
# ----------------------------------------------------------------------------------------------------

def describe_exit(returncode: int) -> str:
    """Words for how a process ended: ``was killed by signal SIGSEGV (...)`` or ``exited with status 3``."""
    if returncode >= 0:
        return f"exited with status {returncode}"
    try:
        sig = signal.Signals(-returncode)
    except ValueError:
        return f"was killed by signal {-returncode}"
    what = (signal.strsignal(sig) or "").lower()
    hint = {
        signal.SIGKILL: "; the kernel's OOM killer or the judge",
        signal.SIGXCPU: "; the CPU time limit",
        signal.SIGXFSZ: "; the file size limit",
        signal.SIGSEGV: "; an invalid memory access on the host",
        signal.SIGABRT: "; an abort(), often a failed assertion or a C++ exception",
    }.get(sig, "")
    return f"was killed by signal {sig.name} ({what}{hint})"


# ----------------------------------------------------------------------------------------------------
# Captured output, capped
# ----------------------------------------------------------------------------------------------------

class CappedLog:
    """Keeps the first and last ``cap_bytes / 2`` of a stream and counts the rest; memory stays bounded."""

    def __init__(self, cap_bytes: int) -> None:
        self.half = max(cap_bytes // 2, 1)
        self.head = bytearray()
        self.tail = bytearray()
        self.total_bytes = 0

    def feed(self, data: bytes) -> None:
        """Append a chunk."""
        self.total_bytes += len(data)
        room = self.half - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            del self.tail[: max(len(self.tail) - self.half, 0)]

    def text(self) -> str:
        """The kept output as text, with a line saying how much was left out."""
        dropped = self.total_bytes - len(self.head) - len(self.tail)
        middle = f"\n[... {dropped} bytes of output omitted ...]\n" if dropped > 0 else ""
        return (bytes(self.head).decode("utf-8", "replace") + middle
                + bytes(self.tail).decode("utf-8", "replace"))

    def last_lines(self, n: int = 20) -> str:
        """The last ``n`` lines kept."""
        return "\n".join(self.text().rstrip().splitlines()[-n:])


# ----------------------------------------------------------------------------------------------------
# Private working folders with protected files
# ----------------------------------------------------------------------------------------------------

def prepare_workdir(root: str | os.PathLike[str], solution: Solution) -> Path:
    """Write a private copy of a solution plus its format's protected files (read-only) under ``root``.

    Returns:
        The folder, to be the candidate's working directory.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    protected = get_format(solution.format).template_files()
    for rel, text in [*solution.files.items(), *protected.items()]:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    for rel in protected:
        (root / rel).chmod(0o444)
    return root


def remove_tree(path: str | os.PathLike[str]) -> None:
    """Remove a folder a confined process wrote in, whatever modes it left (call it once that process is dead).

    Candidate code may leave a folder without write or search permission (``chmod 0o500``) with files inside: a
    judge that does not run as root could not delete them, and every job would leave its leftovers on the host's
    disk. Folders get their owner's rwx back before removal (never through a link: a link inside may name
    anything); what still cannot go is logged.
    """
    root = os.fspath(path)
    try:
        shutil.rmtree(root)
        return
    except FileNotFoundError:
        return
    except OSError:
        pass
    _owner_rwx(root)
    for folder, subfolders, _files in os.walk(root):  # top-down: a folder's mode is mended before it is listed
        for name in subfolders:
            _owner_rwx(os.path.join(folder, name))
    shutil.rmtree(root, ignore_errors=True)
    if os.path.lexists(root):
        log.warning("could not remove %s (left by a confined process)", root)


def _owner_rwx(path: str) -> None:
    """Give a real folder (not a link) its owner's read, write and search bits back, where this process may."""
    try:
        mode = os.lstat(path).st_mode
        if stat.S_ISDIR(mode):
            os.chmod(path, stat.S_IMODE(mode) | stat.S_IRWXU)
    except OSError:
        pass


def check_workdir(workdir: str | os.PathLike[str], solution: Solution) -> list[str]:
    """Compare a working folder with the solution snapshot and the package's protected files.

    Returns:
        One line per protected or solution file that is missing or differs (empty when all match).
    """
    root = Path(workdir)
    expected = {**solution.files, **get_format(solution.format).template_files()}
    problems = []
    for rel, text in sorted(expected.items()):
        path = root / rel
        try:
            actual = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            problems.append(f"{rel}: missing from the working folder")
            continue
        if actual != hashlib.sha256(text.encode("utf-8")).hexdigest():
            origin = "snapshot" if rel in solution.files else "protected template"
            problems.append(f"{rel}: differs from the {origin}")
    return problems


# ----------------------------------------------------------------------------------------------------
# Running one sandboxed command (the build stage runs candidate code this way)
# ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SandboxRun:
    """How one sandboxed command ended."""

    returncode: int
    output: str  # stdout+stderr, capped to the policy's log_bytes
    output_bytes: int
    timed_out: bool
    violation: str  # a broken limit (processes, memory, disk, output), empty when none
    wall_time_s: float

    @property
    def ok(self) -> bool:
        """True when the command exited 0 within its limits."""
        return self.returncode == 0 and not self.timed_out and not self.violation

    def describe(self) -> str:
        """One line saying how it ended."""
        if self.timed_out:
            return f"timed out after {self.wall_time_s:.0f} s; the judge killed its process group"
        return self.violation or describe_exit(self.returncode)


def child_pythonpath(first: Sequence[str] = ()) -> str:
    """``PYTHONPATH`` for a child that must import this very cudagym (a checkout, not another install)."""
    import site

    parent = str(Path(__file__).resolve().parents[2])
    paths = [p for p in (*first, parent) if p and p not in site.getsitepackages()]
    if os.environ.get("PYTHONPATH"):
        paths.append(os.environ["PYTHONPATH"])
    return os.pathsep.join(dict.fromkeys(paths))


def sandbox_command(argv: Sequence[str], policy: SandboxPolicy) -> list[str]:
    """``argv`` prefixed so that it runs under ``policy`` (limits and namespaces applied, then exec)."""
    return [sys.executable, "-m", "cudagym.judge.sandbox", "--policy", policy.to_json(), "--", *argv]


def run_sandboxed(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str],
    policy: SandboxPolicy = SandboxPolicy(),
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    writes: Sequence[str | os.PathLike[str]] = (),
) -> SandboxRun:
    """Run a command in the sandbox, in its own session, with a private HOME and TMPDIR.

    The command is confined by :mod:`cudagym.judge.confine` (bubblewrap: no network, a view where only
    ``cwd`` and the private folders are writable and no host file outside the toolchain exists), then the
    launcher applies the policy's rlimits and execs it; the watchdog bounds its processes, memory and disk.

    Args:
        argv: The command.
        cwd: Its working folder (a private copy of what it needs).
        policy: Limits and isolation.
        timeout_s: Wall-clock limit; the process group is killed past it.
        env: Extra environment variables (secret-looking names are dropped).
        writes: More folders it may write (where its output goes); their disk use counts toward the policy's
            ``disk_bytes`` like ``cwd``'s.

    Raises:
        SandboxUnavailableError: The host cannot confine (bubblewrap missing) and ``CUDAGYM_SANDBOX`` is not off.
    """
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cudagym-sbx-") as private:
        home, tmp = Path(private, "home"), Path(private, "tmp")
        home.mkdir()
        tmp.mkdir()
        command = confine.wrap(sandbox_command(argv, inner_policy(policy)),
                               confine.view_for(writes=(str(cwd), private, *map(str, writes)), chdir=cwd))
        proc = confine.popen(
            command, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True,
            env=scrub_env(os.environ, home=str(home), tmpdir=str(tmp),
                          extra={"PYTHONPATH": child_pythonpath(), **(env or {})}),
        )
        assert proc.stdout is not None
        # every folder it may write counts toward its disk limit: none is outside the watchdog's view
        handle = shared_watchdog().watch(proc.pid, policy, dirs=(str(cwd), private, *map(str, writes)))
        captured = CappedLog(policy.log_bytes)
        reader = threading.Thread(target=_drain, args=(proc.stdout, captured, policy, handle), daemon=True)
        reader.start()
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            kill_process_group(proc.pid)
            proc.wait()
            shared_watchdog().unwatch(handle)
            reader.join(timeout=5)
    return SandboxRun(
        returncode=confine.exit_status(proc.returncode), output=captured.text(), output_bytes=captured.total_bytes,
        timed_out=timed_out, violation=handle.violation, wall_time_s=time.monotonic() - start,
    )


def policy_limits(policy: SandboxPolicy) -> tuple[str, ...]:
    """The policy's resource limits in words, for the isolation record of a result."""
    return (f"CPU {policy.cpu_time_s:g} s per job", f"host memory {policy.host_rss_bytes / GiB:g} GiB (resident)",
            f"{policy.max_processes} processes", f"{policy.open_files} open files",
            f"files up to {policy.file_size_bytes / GiB:g} GiB", f"disk {policy.disk_bytes / GiB:g} GiB")


def inner_policy(policy: SandboxPolicy) -> SandboxPolicy:
    """The policy the launcher applies inside bubblewrap: its rlimits only.

    bubblewrap already made the network, mount and user namespaces and dropped every capability, so the
    in-process steps would fail.
    """
    if confine.mode() == "off":
        return policy
    return dataclasses.replace(policy, isolate_network=False, readonly_judge=False)


def _drain(stream: object, captured: CappedLog, policy: SandboxPolicy, handle: Watch) -> None:
    read = stream.read1 if hasattr(stream, "read1") else stream.read  # type: ignore[attr-defined]
    while chunk := read(65536):
        captured.feed(chunk)
        if captured.total_bytes > policy.output_bytes and not handle.violation:
            handle.violation = (f"wrote more than {policy.output_bytes / MiB:.0f} MiB to stdout/stderr; "
                                "the judge killed the process group")
            kill_process_group(handle.root_pid)


def main(argv: Sequence[str] | None = None) -> int:
    """Launcher: ``python -m cudagym.judge.sandbox --policy JSON -- command...`` enters the sandbox, then execs."""
    parser = argparse.ArgumentParser(prog="python -m cudagym.judge.sandbox", description=main.__doc__)
    parser.add_argument("--policy", default=SandboxPolicy().to_json(), help="SandboxPolicy as JSON")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("expected a command after --")
    enter_sandbox(SandboxPolicy.from_json(args.policy))
    confined, note = forbid_sysv_ipc()  # the command is candidate code (the inline recorder)
    if not confined:
        log.warning("sandbox (pid %d): System V IPC left open: %s", os.getpid(), note)
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"cudagym sandbox: cannot run {command[0]!r}: {exc.strerror}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())
