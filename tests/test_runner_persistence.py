"""Persistence and interference from the runner: what candidate code can hold or leave beyond its own limits and job.

Each candidate is a ``model_new.py`` judged by the real trusted worker and a real runner under bubblewrap (the CPU
path), never a guard called in-process. The attacks hold host memory or disk where the watchdog's figures did not
look, so one job could take the host's memory or disk from the judge and from the jobs of every other lane (the
kernel's OOM killer then picks the biggest process: a worker judging someone else's job, or the trainer):

- a shared anonymous mapping (``mmap(MAP_SHARED)``) or an open ``memfd``: shared memory, which ``resident - shared``
  of statm left out;
- System V shared memory: a segment no process maps lives on in the sandbox's IPC namespace, seen by no one;
- files unlinked but kept open: disk that no folder's tree shows;
- the sandbox's private ``/tmp`` (a tmpfs: memory), bubblewrap's own root and ``/dev`` (tmpfs of no size limit,
  writable), and a tmpfs mounted in a user namespace of the candidate's own.

What does not persist, checked by hand and so not kept as tests: a double-forked, ``setsid`` child that ignores
SIGTERM and SIGHUP dies with the runner's PID namespace when the runner is killed; the runner sees no other process
(PID namespace), no abstract socket (network namespace), no System V object of another job (IPC namespace), no
folder of the worker or of another runner, no inherited descriptor but its channel and stdio, and no secret in its
environment.

Every broken limit is the candidate's failure (reward -1: ``crashed``, naming the limit), never ``infra_error``, and
the next job on the lane is judged as usual.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator

import pytest

from cudagym.judge.interface import EvalMode
from cudagym.judge.job import Job, KnownBaselines
from cudagym.judge.protocol import CUDAGYM_V0
from cudagym.judge.records import BuildResult, BuildStatus, EvalResult, EvalStatus
from cudagym.judge.sandbox import MiB, SandboxPolicy
from cudagym.judge.worker import PoolOptions, WorkerPool
from cudagym.solution import Solution
from cudagym.task import make_task

# A runner with torch imported holds about 250 MiB of its own; the limits leave room for that and stop attacks fast.
POLICY = SandboxPolicy(host_rss_bytes=1024 * MiB, disk_bytes=256 * MiB, max_processes=32)

TASK = '''
import torch

class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(8, 32)]

def get_init_inputs():
    return []
'''

HONEST = '''
import torch

class ModelNew(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)
'''

# 1.5 GiB of shared anonymous memory, every page touched, held while the watchdog looks
SHARED_MAPPING = HONEST + '''
import mmap, time
_hoard = mmap.mmap(-1, 1536 << 20, flags=mmap.MAP_SHARED)
for _i in range(0, len(_hoard), 4096):
    _hoard[_i] = 1
time.sleep(5)
'''

# 1.5 GiB written into three memfds (each under the file size limit), mapped by no one, held by their descriptors
MEMFD = HONEST + '''
import os, time
_fds = [os.memfd_create("hoard") for _ in range(3)]
for _fd in _fds:
    for _ in range(512):
        os.write(_fd, b"\\1" * (1 << 20))
time.sleep(5)
'''

# 600 MiB in three files of the runner's own folder, unlinked and kept open: no folder's tree shows them
UNLINKED = HONEST + '''
import os, time
_held = []
for _k in range(3):
    _fh = open(f"hidden{_k}.bin", "wb")
    for _ in range(200):
        _fh.write(b"\\1" * (1 << 20))
    _fh.flush()
    os.unlink(f"hidden{_k}.bin")
    _held.append(_fh)
time.sleep(5)
'''

# 1.5 GiB of System V segments, detached: held by the IPC namespace alone
SYSV = HONEST + '''
import ctypes, os, time
_libc = ctypes.CDLL(None, use_errno=True)
_libc.shmat.restype = ctypes.c_void_p
_got = []
for _ in range(3):
    _id = _libc.shmget(0, 512 << 20, 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
    if _id < 0:
        print("sysv: shmget refused:", os.strerror(ctypes.get_errno()))
        break
    _at = _libc.shmat(_id, None, 0)
    ctypes.memset(_at, 1, 512 << 20)
    _libc.shmdt(ctypes.c_void_p(_at))
    _got.append(_id)
print("sysv: segments held:", len(_got))
time.sleep(3)
'''

# 900 MiB in the private /tmp (a tmpfs of 1 GiB): memory, beside the runner's own
PRIVATE_TMP = HONEST + '''
import time
with open("/tmp/ballast", "wb") as _fh:
    for _ in range(900):
        _fh.write(b"\\1" * (1 << 20))
time.sleep(5)
'''

# writes where bubblewrap's tmpfs have no size limit, and a tmpfs of its own in a user namespace of its own
UNBOUNDED_TMPFS = HONEST + '''
import ctypes, os
for _path in ("/ballast", "/dev/ballast", "/usr/../ballast2"):
    try:
        with open(_path, "wb") as _fh:
            _fh.write(b"\\1" * (1 << 20))
        print("tmpfs:", _path, "written")
    except OSError as _exc:
        print("tmpfs:", _path, "refused:", _exc.strerror)
_libc = ctypes.CDLL(None, use_errno=True)
if _libc.unshare(0x10000000 | 0x00020000) == 0:  # CLONE_NEWUSER | CLONE_NEWNS
    _ok = _libc.mount(b"none", b"/tmp", b"tmpfs", 0, None) == 0
    print("tmpfs: user namespace entered; own tmpfs", "mounted" if _ok else "refused")
else:
    print("tmpfs: user namespace refused:", os.strerror(ctypes.get_errno()))
'''


@pytest.fixture(scope="module")
def pool() -> Iterator[WorkerPool]:
    """One trusted worker on the CPU path under tight limits, and a fresh sandboxed runner per job."""
    options = PoolOptions(job_fn="cudagym.judge.split.trusted:run_job_on_cpu", runner=True, startup_timeout_s=180.0,
                          spare_runners=1, policy=POLICY)
    with WorkerPool(["0"], options=options) as p:
        yield p


def judge(pool: WorkerPool, code: str, job_id: str) -> EvalResult:
    """One VERIFY job of the relu task with ``code`` as the candidate, every guard off."""
    job = Job(
        job_id=job_id,
        task=make_task(textwrap.dedent(TASK), id="test/persistence", suite="test", level=1, name="persistence",
                       origin="test"),
        solution=Solution("inline", {"model_new.py": code}),
        build=BuildResult(BuildStatus.OK, "inline"),
        mode=EvalMode.VERIFY,
        protocol=CUDAGYM_V0.with_changes(id="test-persistence", guards=(), num_inputs=2, warmup_runs=1, warmup_ms=0.0,
                                         min_runs=3, max_runs=3, target_ci_pct=0.0, eval_timeout_s=120.0),
        baselines=KnownBaselines(),
    )
    return pool.submit(job).result(timeout=300)


def assert_killed_for(result: EvalResult, words: str) -> None:
    """The candidate's failure (reward -1), the limit named: never ``ok``, never ``infra_error``."""
    assert result.status is EvalStatus.CRASHED, f"{result.status.value}: {result.message}\n{result.log[-2000:]}"
    assert words in result.message, result.message


def test_shared_anonymous_memory_counts_toward_the_host_memory_limit(pool: WorkerPool) -> None:
    assert_killed_for(judge(pool, SHARED_MAPPING, "shared-mapping"), "of host memory")


def test_a_memfd_held_open_counts_toward_the_host_memory_limit_and_the_next_job_is_judged(pool: WorkerPool) -> None:
    assert_killed_for(judge(pool, MEMFD, "memfd"), "of host memory")
    after = judge(pool, HONEST, "after-memfd")
    assert after.status is EvalStatus.OK, after.message


def test_files_unlinked_but_held_open_count_toward_the_disk_limit(pool: WorkerPool) -> None:
    assert_killed_for(judge(pool, UNLINKED, "unlinked"), "to disk")


def test_system_v_shared_memory_is_refused(pool: WorkerPool) -> None:
    result = judge(pool, SYSV, "sysv")
    assert "sysv: shmget refused: Operation not permitted" in result.log, result.log[-2000:]
    assert "sysv: segments held: 0" in result.log
    assert result.status is EvalStatus.OK, result.message  # otherwise an honest candidate


def test_the_private_tmp_counts_toward_the_host_memory_limit(pool: WorkerPool) -> None:
    assert_killed_for(judge(pool, PRIVATE_TMP, "private-tmp"), "of host memory")


def test_no_unbounded_tmpfs_is_writable(pool: WorkerPool) -> None:
    result = judge(pool, UNBOUNDED_TMPFS, "unbounded-tmpfs")
    assert result.status is EvalStatus.OK, result.message
    lines = [ln for ln in result.log.splitlines() if ln.startswith("tmpfs:")]
    assert len(lines) == 4, result.log[-2000:]
    assert all("refused" in ln for ln in lines), lines
