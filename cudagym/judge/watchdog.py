"""The watchdog: one thread that enforces process count, host memory and disk use of sandboxed process groups.

``RLIMIT_NPROC`` binds neither root nor a single group, and there is no address-space limit (CUDA reserves
huge virtual ranges), so :class:`ProcessWatchdog` scans ``/proc`` for every watched group at once
(descendants of the group's root plus everything left in its process group), sums their resident memory
and, less often, the disk use under their private folders, and kills a group past any limit of its
:class:`~cudagym.judge.sandbox.SandboxPolicy`, recording why in its :class:`Watch`. GPU workers and build
subprocesses share one :func:`shared_watchdog`. :func:`kill_process_group` is the group kill the judge uses
for timeouts and broken limits.
"""

from __future__ import annotations

import logging
import os
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


def _anon_rss_bytes(pid: int) -> int:
    """Resident memory that is not a shared file mapping (``resident - shared`` of statm).

    That is the part that can exhaust the host; shared libraries (libtorch, libcuda) are left out.
    """
    try:
        with open(f"/proc/{pid}/statm", "rb") as fh:
            fields = fh.read().split()
        return max(int(fields[1]) - int(fields[2]), 0) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


def _pss_bytes(pid: int) -> int:
    """Proportional anonymous memory: pages a forked child still shares with its parent count once, split."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
            line = next((ln for ln in fh if ln.startswith(b"Pss_Anon:")), b"")
        return int(line.split()[1]) * 1024 if line else _anon_rss_bytes(pid)
    except (OSError, ValueError, IndexError):
        return _anon_rss_bytes(pid)


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
        memory = self._memory_bytes(handle, members)
        handle.peak_rss_bytes = max(handle.peak_rss_bytes, memory)
        reason = ""
        if memory > policy.host_rss_bytes:
            across = f" across {len(members)} processes" if len(members) > 1 else ""
            reason = (f"used {memory / GiB:.1f} GiB of host memory{across}, over the limit of "
                      f"{policy.host_rss_bytes / GiB:.1f} GiB; the judge killed the process group")
        elif handle.dirs and time.monotonic() >= handle._next_disk_check:
            handle._next_disk_check = time.monotonic() + self.disk_interval_s
            used = disk_usage_bytes(handle.dirs, limit=policy.disk_bytes)
            if used > policy.disk_bytes:
                reason = (f"wrote more than {policy.disk_bytes / MiB:.0f} MiB to disk in its private folders; "
                          "the judge killed the process group")
        if reason:
            self._kill(handle, reason)

    @staticmethod
    def _kill(handle: Watch, reason: str) -> None:
        handle.violation = reason
        kill_process_group(handle.root_pid)

    def _memory_bytes(self, handle: Watch, members: Sequence[_Proc]) -> int:
        cheap = sum(_anon_rss_bytes(p.pid) for p in members)
        if cheap <= handle.policy.host_rss_bytes or len(members) == 1:
            return cheap
        # Forked children share their parent's pages, which the cheap sum counts once per process. The
        # proportional figure walks page tables (milliseconds per process): only for a few processes, and
        # at most once a second; a big group past the cheap sum is judged on it.
        if len(members) > 8:
            return cheap
        if time.monotonic() >= handle._next_pss_check:
            handle._next_pss_check = time.monotonic() + 1.0
            handle._last_pss_bytes = sum(_pss_bytes(p.pid) for p in members)
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
