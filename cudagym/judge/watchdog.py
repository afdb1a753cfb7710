"""The watchdog: one thread that enforces process count, host memory and disk use of sandboxed process groups.

``RLIMIT_NPROC`` binds neither root nor a single group, and there is no address-space limit (CUDA reserves
huge virtual ranges), so :class:`ProcessWatchdog` scans ``/proc`` for every watched group at once
(descendants of the group's root plus everything left in its process group), sums their resident memory
(anonymous and shared: a shared mapping is the host's memory as much as a private one) and, less often, what the
group holds beyond that (:func:`held_bytes`: open or mapped unlinked files, its private tmpfs mounts) and the disk
use under their private folders, and kills a group past any limit of its
:class:`~cudagym.judge.sandbox.SandboxPolicy`, recording why in its :class:`Watch`. GPU workers and build
subprocesses share one :func:`shared_watchdog`. :func:`kill_process_group` is the group kill the judge uses
for timeouts and broken limits.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cudagym.judge.sandbox import SandboxPolicy

log = logging.getLogger(__name__)

MiB = 1 << 20
GiB = 1 << 30


@dataclass(frozen=True)
class _Proc:
    pid: int
    ppid: int
    pgid: int


_PAGE = os.sysconf("SC_PAGE_SIZE")


def _scan_processes() -> dict[int, _Proc]:
    procs: dict[int, _Proc] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                text = fh.read()
        except OSError:
            continue
        rest = text[text.rfind(b")") + 2:].split()  # the command name may hold spaces and parentheses
        if rest[0] in (b"Z", b"X"):  # zombies hold no resources; their parent reaps them
            continue
        pid = int(entry.name)
        procs[pid] = _Proc(pid, int(rest[1]), int(rest[2]))
    return procs


def _rss_bytes(pid: int) -> tuple[int, int]:
    """Resident anonymous memory and resident shared memory (shmem) of a process.

    Those are the parts that can exhaust the host; mappings of files (libtorch, libcuda) are left out. Shared
    memory (``MAP_SHARED | MAP_ANONYMOUS``, a mapped ``memfd``, a System V segment, a mapped tmpfs file) is what
    statm's ``shared`` counts beside the file pages, so ``resident - shared`` left it out: a candidate's gigabytes
    mapped shared were no one's.
    """
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            fields = {ln.split(b":")[0]: ln for ln in fh if ln.startswith((b"RssAnon:", b"RssShmem:"))}
        return int(fields[b"RssAnon"].split()[1]) * 1024, int(fields[b"RssShmem"].split()[1]) * 1024
    except (OSError, ValueError, IndexError, KeyError):
        pass
    try:  # a kernel without the split: statm's resident less shared (shared memory then uncounted here)
        with open(f"/proc/{pid}/statm", "rb") as fh:
            statm = fh.read().split()
        return max(int(statm[1]) - int(statm[2]), 0) * _PAGE, 0
    except (OSError, ValueError, IndexError):
        return 0, 0


def _pss_bytes(pid: int) -> tuple[int, int]:
    """Proportional anonymous and shared memory: pages a forked child still shares with its parent count once, split."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
            fields = {ln.split(b":")[0]: ln for ln in fh if ln.startswith((b"Pss_Anon:", b"Pss_Shmem:"))}
        if b"Pss_Anon" in fields:
            shmem = fields.get(b"Pss_Shmem")
            return (int(fields[b"Pss_Anon"].split()[1]) * 1024,
                    int(shmem.split()[1]) * 1024 if shmem else _rss_bytes(pid)[1])
    except (OSError, ValueError, IndexError):
        pass
    return _rss_bytes(pid)


def _device_key(st_dev: int, ino: int) -> tuple[int, int, int]:
    return os.major(st_dev), os.minor(st_dev), ino


def _own_devices() -> set[str]:
    """The ``major:minor`` of every file system mounted in this process's own mount namespace."""
    try:
        with open("/proc/self/mountinfo", "rb") as fh:
            return {ln.split()[2].decode() for ln in fh if len(ln.split()) > 2}
    except OSError:
        return set()


def _unescape(path: bytes) -> str:
    """A mount point as mountinfo writes it (space, tab, newline and backslash as octal escapes)."""
    return re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), path).decode("utf-8", "replace")


def held_bytes(members: Sequence[int], dirs: Sequence[str]) -> tuple[int, int]:
    """Memory and disk a process group holds where neither its resident set nor its folders show it.

    - files it unlinked but keeps open or mapped (a ``memfd``, a shared anonymous mapping, an attached System V
      segment, a deleted file): each counted once by its allocated size, on the disk of ``dirs`` as disk, else as
      memory (shared memory files);
    - the tmpfs mounts of its own mount namespaces (bubblewrap's private ``/tmp``, ``/dev/shm``, any other): their
      use is memory. A file system that is mounted in this process's namespace too (a host tmpfs bound into the
      sandbox) is the host's, counted where its folders are.

    Returns:
        ``(memory_bytes, disk_bytes)``.
    """
    disk_devices = set()
    for folder in dirs:
        try:
            disk_devices.add(os.stat(folder).st_dev)
        except OSError:
            continue
    try:
        own_ns = os.readlink("/proc/self/ns/mnt")
    except OSError:
        own_ns = ""
    own_devices: set[str] | None = None
    namespaces: set[str] = set()
    mounts: set[str] = set()
    seen: set[tuple[int, int, int]] = set()
    memory = disk = 0

    def count(st: os.stat_result) -> None:
        nonlocal memory, disk
        key = _device_key(st.st_dev, st.st_ino)
        if key in seen:
            return
        seen.add(key)
        if st.st_dev in disk_devices:
            disk += st.st_blocks * 512
        else:
            memory += st.st_blocks * 512

    for pid in members:
        base = f"/proc/{pid}"
        try:
            for name in os.listdir(f"{base}/fd"):
                try:
                    st = os.stat(f"{base}/fd/{name}")
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode) and st.st_nlink == 0:
                    count(st)
        except OSError:
            pass
        try:
            with open(f"{base}/maps", "rb") as fh:
                lines = [ln.split(maxsplit=5) for ln in fh if ln.rstrip().endswith(b"(deleted)")]
        except OSError:
            lines = []
        for fields in lines:
            if len(fields) < 6 or fields[4] == b"0":
                continue
            major, _, minor = fields[3].partition(b":")
            try:
                if (int(major, 16), int(minor, 16), int(fields[4])) in seen:
                    continue
                st = os.stat(f"{base}/map_files/{fields[0].decode()}")  # root only: else its resident pages count
            except (OSError, ValueError):
                continue
            if stat.S_ISREG(st.st_mode):
                count(st)
        try:
            ns = os.readlink(f"{base}/ns/mnt")
        except OSError:
            continue
        if ns == own_ns or ns in namespaces:
            continue
        namespaces.add(ns)
        own_devices = _own_devices() if own_devices is None else own_devices
        try:
            with open(f"{base}/mountinfo", "rb") as fh:
                infos = [ln.split() for ln in fh]
        except OSError:
            continue
        for info in infos:
            sep = info.index(b"-") if b"-" in info else -1
            if sep < 0 or len(info) <= sep + 1 or info[sep + 1] not in (b"tmpfs", b"ramfs"):
                continue
            device = info[2].decode()
            if device in own_devices or device in mounts:
                continue
            mounts.add(device)
            try:
                vfs = os.statvfs(f"{base}/root{_unescape(info[4])}")
            except OSError:
                continue
            memory += max(vfs.f_blocks - vfs.f_bfree, 0) * vfs.f_frsize
    return memory, disk


def _members(procs: Mapping[int, _Proc], root_pid: int) -> list[_Proc]:
    """The root's descendants plus everything still in its process group (orphans included)."""
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    found = {p.pid for p in procs.values() if p.pgid == root_pid}
    stack = [root_pid]
    while stack:
        pid = stack.pop()
        if pid in procs:
            found.add(pid)
        stack.extend(c for c in children.get(pid, ()) if c not in found)
    return [procs[pid] for pid in found if pid in procs]


def kill_process_group(root_pid: int, *, wait_s: float = 30.0) -> None:
    """SIGKILL a sandboxed process, its group and its descendants, until none is left.

    Fork bombs race the kill, and a process with a large address space takes a while to die.
    """
    deadline = time.monotonic() + wait_s
    while True:
        try:
            os.killpg(root_pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        left = _members(_scan_processes(), root_pid)
        for proc in left:
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if not left:
            return
        if time.monotonic() > deadline:
            log.error("%d processes of group %d survived SIGKILL for %.0f s", len(left), root_pid, wait_s)
            return
        time.sleep(0.02)


def kill_and_reap(proc: subprocess.Popen[bytes], *, wait_s: float = 30.0) -> int | None:
    """:func:`kill_process_group` on ``proc``, then wait for it: its exit status, or ``None`` if it lives on."""
    kill_process_group(proc.pid)
    try:
        return proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        return None


@dataclass(eq=False)
class Watch:
    """One watched process group; ``violation`` is set (and the group killed) when it breaks a limit."""

    root_pid: int
    policy: SandboxPolicy
    dirs: tuple[str, ...] = ()
    violation: str = ""
    peak_rss_bytes: int = 0
    peak_processes: int = 0
    _next_disk_check: float = field(default=0.0, repr=False)
    _next_pss_check: float = field(default=0.0, repr=False)
    _last_pss_bytes: int = field(default=0, repr=False)
    _held_memory_bytes: int = field(default=0, repr=False)  # held_bytes' memory, at the disk check's pace


class ProcessWatchdog:
    """Enforces process count, host memory and disk use of watched groups, killing a group that breaks one.

    One thread scans ``/proc`` every ``interval_s`` for all groups at once; disk use is summed every
    ``disk_interval_s``.
    """

    def __init__(self, interval_s: float = 0.05, disk_interval_s: float = 1.0) -> None:
        self.interval_s = interval_s
        self.disk_interval_s = disk_interval_s
        self._watches: set[Watch] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def watch(self, root_pid: int, policy: SandboxPolicy, dirs: Iterable[str] = ()) -> Watch:
        """Start watching the group led by ``root_pid``."""
        handle = Watch(root_pid, policy, tuple(dirs))
        with self._lock:
            self._watches.add(handle)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="cudagym-watchdog", daemon=True)
                self._thread.start()
        return handle

    def unwatch(self, handle: Watch) -> None:
        """Stop watching (the thread ends when nothing is watched)."""
        with self._lock:
            self._watches.discard(handle)

    def _run(self) -> None:
        while True:
            with self._lock:
                watches = [w for w in self._watches if not w.violation]
                if not self._watches:
                    self._thread = None
                    return
            if watches:
                procs = _scan_processes()
                for handle in watches:
                    self._check(handle, procs)
            time.sleep(self.interval_s)

    def _check(self, handle: Watch, procs: Mapping[int, _Proc]) -> None:
        members = _members(procs, handle.root_pid)
        handle.peak_processes = max(handle.peak_processes, len(members))
        policy = handle.policy
        if len(members) > policy.max_processes:  # first, and before any costly reading: forks are fast
            self._kill(handle, f"started more than {policy.max_processes} processes ({len(members)} seen; "
                               "a fork bomb?); the judge killed the process group")
            return
        used = -1
        if time.monotonic() >= handle._next_disk_check:
            # what the group holds outside its resident set and its folders' tree: open unlinked files (a memfd,
            # a deleted file), mappings of unlinked shared memory, its private tmpfs mounts
            handle._next_disk_check = time.monotonic() + self.disk_interval_s
            handle._held_memory_bytes, held_disk = held_bytes([p.pid for p in members], handle.dirs)
            used = disk_usage_bytes(handle.dirs, limit=policy.disk_bytes) + held_disk
        memory = self._memory_bytes(handle, members)
        handle.peak_rss_bytes = max(handle.peak_rss_bytes, memory)
        reason = ""
        if memory > policy.host_rss_bytes:
            across = f" across {len(members)} processes" if len(members) > 1 else ""
            reason = (f"used {memory / GiB:.1f} GiB of host memory{across}, over the limit of "
                      f"{policy.host_rss_bytes / GiB:.1f} GiB; the judge killed the process group")
        elif used > policy.disk_bytes:
            reason = (f"wrote more than {policy.disk_bytes / MiB:.0f} MiB to disk in its private folders; "
                      "the judge killed the process group")
        if reason:
            self._kill(handle, reason)

    @staticmethod
    def _kill(handle: Watch, reason: str) -> None:
        handle.violation = reason
        kill_process_group(handle.root_pid)

    def _memory_bytes(self, handle: Watch, members: Sequence[_Proc]) -> int:
        # Shared memory counts once: the larger of what the processes map of it (at once) and what the group holds
        # of it by file (held_bytes, once a second, each file once whoever maps it).
        resident = [_rss_bytes(p.pid) for p in members]
        cheap = sum(a for a, _ in resident) + max(sum(s for _, s in resident), handle._held_memory_bytes)
        if cheap <= handle.policy.host_rss_bytes or len(members) == 1:
            return cheap
        # Forked children share their parent's pages, which the cheap sum counts once per process. The
        # proportional figure walks page tables (milliseconds per process): only for a few processes, and
        # at most once a second; a big group past the cheap sum is judged on it.
        if len(members) > 8:
            return cheap
        if time.monotonic() >= handle._next_pss_check:
            handle._next_pss_check = time.monotonic() + 1.0
            proportional = [_pss_bytes(p.pid) for p in members]
            handle._last_pss_bytes = (sum(a for a, _ in proportional)
                                      + max(sum(s for _, s in proportional), handle._held_memory_bytes))
        return handle._last_pss_bytes


def disk_usage_bytes(paths: Iterable[str], *, limit: int = 0, max_entries: int = 200_000) -> int:
    """Bytes allocated on disk under ``paths`` (stops early past ``limit``, or past ``max_entries`` files)."""
    total = entries = 0
    stack = [p for p in paths if os.path.isdir(p)]
    while stack:
        try:
            it = os.scandir(stack.pop())
        except OSError:
            continue
        with it:
            for entry in it:
                entries += 1
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    stack.append(entry.path)
                else:
                    total += st.st_blocks * 512
        if entries > max_entries or (limit and total > limit):
            return max(total, limit + 1)  # too many files counts as too much disk
    return total


_shared: ProcessWatchdog | None = None
_shared_lock = threading.Lock()


def shared_watchdog() -> ProcessWatchdog:
    """The process-wide watchdog (one /proc scan per tick for all pools and build subprocesses)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = ProcessWatchdog()
        return _shared
