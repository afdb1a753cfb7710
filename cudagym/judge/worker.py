"""GPU worker processes: one sandboxed child per GPU; jobs go in over a pipe, results come back as JSON.

A :class:`WorkerPool` keeps one worker process per GPU, each fed by its own queue by one thread of the
judge process (a *lane*). :meth:`WorkerPool.submit` is thread-safe and returns a future that always gets
exactly one :class:`~cudagym.judge.records.EvalResult`: when the worker crashes, times out, breaks a
sandbox limit or leaves a broken CUDA context, the lane kills the worker's whole process group, turns
what happened into a ``CRASHED`` / ``TIMEOUT`` / ``RUNTIME_ERROR`` result with the signal or exit status
and the last lines of output, and promotes a replacement (spare workers per GPU are kept warm for that).
Workers are also recycled after ``max_jobs_per_worker`` jobs, and after any failed job by default: a
candidate that raised may have patched modules or left threads behind.

How a worker starts: ``python -m cudagym.judge.worker`` through :class:`subprocess.Popen`, a fresh
interpreter as multiprocessing's ``spawn`` gives (never ``fork``: CUDA state does not survive a fork),
but with the environment scrubbed *before* ``exec`` (so ``/proc/self/environ`` holds no credentials), in a
new session (so a timeout kills candidate subprocesses too), and without re-importing the caller's
``__main__`` as multiprocessing would. The worker enters the sandbox (:mod:`cudagym.judge.sandbox`) while
still single-threaded, imports the job function (``module:function``, by default the harness's
``run_job``) and then loops: receive a job, run it in the job's private working folder, check the CUDA
context, send the result.

The judge process never imports candidate code, and never unpickles anything a worker sends: results
come back as JSON and are rebuilt with :func:`~cudagym.judge.records.from_dict`.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import functools
import importlib
import json
import logging
import os
import queue
import re
import secrets
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import typing
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from cudagym.judge import attribution, confine, sanitizer
from cudagym.judge.build.artifact import export_artifact
from cudagym.judge.guards import escape
from cudagym.judge.harness import is_context_poisoned
from cudagym.judge.hostpaths import scrub_result
from cudagym.judge.job import Job
from cudagym.judge.protocol import runner_queues
from cudagym.judge.records import EvalResult, EvalStatus, Isolation, Violation, from_dict, to_dict
from cudagym.judge.sandbox import (
    CappedLog,
    SandboxInfo,
    SandboxPolicy,
    check_workdir,
    child_pythonpath,
    describe_exit,
    enter_sandbox,
    inner_policy,
    policy_limits,
    prepare_workdir,
    remove_tree,
    scrub_env,
    set_cpu_budget,
)
from cudagym.judge.split.trace import folders as trace_folders
from cudagym.judge.split.trace import runner_env as trace_runner_env
from cudagym.judge.watchdog import Watch, kill_and_reap, kill_process_group, shared_watchdog

log = logging.getLogger(__name__)

DEFAULT_JOB_FN = "cudagym.judge.split.trusted:run_job"
MAX_MESSAGE_BYTES = 64 << 20
_EXIT_GRACE_S = 5.0  # how long a process whose pipes or channel closed gets to finish exiting


def _await_exit(proc: subprocess.Popen[Any]) -> int | None:
    """``proc``'s return code once it finished exiting, waited for up to :data:`_EXIT_GRACE_S` (None: still running)."""
    try:
        return proc.wait(timeout=_EXIT_GRACE_S)
    except subprocess.TimeoutExpired:
        return None


# After these, the worker's process state is suspect (patched modules, stray threads): replace it.
_SUSPECT = frozenset({EvalStatus.RUNTIME_ERROR, EvalStatus.CRASHED, EvalStatus.TIMEOUT, EvalStatus.TASK_TOO_LARGE,
                      EvalStatus.RULE_VIOLATION, EvalStatus.INFRA_ERROR})


@dataclass(frozen=True)
class WorkerInfo:
    """One device's current worker, for logs and the env's ``info``."""

    device: str
    pid: int  # 0 when no worker is running
    generation: int  # how many workers this device has started (replacements included)
    jobs_done: int  # by the current worker
    sandbox: SandboxInfo | None = None
    isolation: Isolation | None = None  # what confines it (bubblewrap's namespaces and view)
    busy_s: float = 0.0  # seconds this device's lane has spent on jobs since the pool started (all workers)
    lane_jobs: int = 0  # jobs this device's lane has finished since the pool started
    callbacks_s: float = 0.0  # the part of busy_s spent handing results on (the result future's callbacks)
    teardown_s: float = 0.0  # the part of busy_s after the worker's verdict: the runner killed, reaped and removed

    @property
    def network_isolated(self) -> bool:
        """Whether the current worker runs without network."""
        if self.isolation is not None and self.isolation.sandbox != "off":
            return self.isolation.network_isolated
        return self.sandbox is not None and self.sandbox.network_isolated


@dataclass(frozen=True)
class PoolOptions:
    """How a :class:`WorkerPool` runs its workers.

    Attributes:
        job_fn: ``module:function`` taking a :class:`Job` and returning an :class:`EvalResult`.
        policy: Sandbox limits and isolation of every worker.
        max_jobs_per_worker: Recycle a worker after this many jobs (1 = a fresh process per job).
        retire_on_failure: Also replace the worker after any job that ended in an error status.
        job_timeout_s: Wall-clock limit of one job; 0 means the job protocol's ``eval_timeout_s``.
        startup_timeout_s: How long a new worker may take to import the job function.
        spare_workers: Workers per GPU kept started and idle, so a replacement is ready at once after a
            crash; more than one absorbs bursts of crashes (an early RL policy) that would otherwise wait
            for a start-up each. Each costs the host memory of an interpreter with torch imported (no GPU
            memory); 0 starts a replacement only when one is needed.
        pythonpath: Folders put first on the workers' ``PYTHONPATH``.
        env: Extra environment variables for the workers (secret-looking names are dropped).
        runner: Run each job's candidate in a fresh runner process of its own (:mod:`cudagym.judge.split`):
            the worker then never loads candidate code and is kept between jobs. ``None``: on for the
            default job function, off for any other (which then gets no runner).
        spare_runners: Runners per GPU kept started (torch imported, CUDA up) ahead of the jobs. A runner
            takes seconds to start and serves one job, so back-to-back jobs wait for one unless several
            start at once; each idle one holds a CUDA context (about half a GiB of device memory) and an
            interpreter with torch imported (host memory). ``None``: :func:`default_spare_runners`.
        model_cache: A Hugging Face hub cache that workers and runners read, offline (tasks that load
            pretrained models: KernelBench level 4). ``None``: :func:`cudagym.paths.model_cache_dir` where
            it exists; ``""``: none. The network stays cut off either way.
    """

    job_fn: str = DEFAULT_JOB_FN
    policy: SandboxPolicy = SandboxPolicy()
    max_jobs_per_worker: int = 50
    retire_on_failure: bool = True
    job_timeout_s: float = 0.0
    startup_timeout_s: float = 300.0
    spare_workers: int = 1
    pythonpath: tuple[str, ...] = ()
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    runner: bool | None = None
    spare_runners: int | None = None
    model_cache: str | None = None

    @property
    def uses_runner(self) -> bool:
        """Whether jobs get a runner process (see ``runner``)."""
        return self.job_fn == DEFAULT_JOB_FN if self.runner is None else self.runner

    def model_cache_path(self) -> str:
        """The hub cache confined processes get (read-only), or ``""`` for none."""
        if self.model_cache is not None:
            return os.path.abspath(self.model_cache) if self.model_cache else ""
        from cudagym.paths import model_cache_dir

        default = model_cache_dir()
        return str(default.resolve()) if default.is_dir() else ""

    def reads(self) -> tuple[str, ...]:
        """What confined workers and runners read besides the system: ``pythonpath`` and the model cache."""
        cache = self.model_cache_path()
        return (*self.pythonpath, cache) if cache else self.pythonpath

    def model_env(self) -> dict[str, str]:
        """Where the hub libraries find the model cache, offline (empty without one)."""
        cache = self.model_cache_path()
        if not cache:
            return {}
        return {"HF_HUB_CACHE": cache, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "HF_HUB_DISABLE_TELEMETRY": "1"}


def _result(job: Job, status: EvalStatus, message: str, log_text: str = "", **extra: Any) -> EvalResult:
    return EvalResult(status=status, message=message, build=job.build, protocol_id=job.protocol.id,
                      log=log_text, **extra)


# ----------------------------------------------------------------------------------------------------
# Parent side: one worker process
# ----------------------------------------------------------------------------------------------------

class _Output:
    """Reads a worker's stdout+stderr; splits it per job at end markers; caps what it keeps."""

    def __init__(self, stream: Any, token: str, policy: SandboxPolicy, on_overflow: Callable[[str], None]) -> None:
        self.prefix = f"\x1ecudagym-job-end:{token}:".encode()
        self.policy = policy
        self.on_overflow = on_overflow
        self.current = CappedLog(policy.log_bytes)
        self.finished: dict[int, CappedLog] = {}
        self.eof = False
        self.cond = threading.Condition()
        self._stop = False
        self._pending = b""
        self._thread = threading.Thread(target=self._run, args=(stream,), name="cudagym-worker-output",
                                        daemon=True)
        self._thread.start()

    def _run(self, stream: Any) -> None:
        fd = stream.fileno()
        try:
            while not self._stop:
                ready, _, _ = select.select([fd], [], [], 0.2)
                chunk = os.read(fd, 65536) if ready else None
                if chunk == b"":
                    break
                if chunk:
                    self._feed(chunk)
        finally:
            with self.cond:
                self.current.feed(self._pending)
                self.eof = True
                self.cond.notify_all()
            stream.close()

    def _feed(self, chunk: bytes) -> None:
        data = self._pending + chunk
        with self.cond:
            while True:
                i = data.find(self.prefix)
                end = data.find(b"\x1e", i + len(self.prefix)) if i >= 0 else -1
                if end < 0:
                    break
                self.current.feed(data[:i].removesuffix(b"\n"))
                seq = data[i + len(self.prefix):end]
                self.finished[int(seq) if seq.lstrip(b"-").isdigit() else -3] = self.current
                self.current = CappedLog(self.policy.log_bytes)
                data = data[end + 1:].removeprefix(b"\n")
                self.cond.notify_all()
            keep = len(data) - i if i >= 0 else _partial_suffix(data, self.prefix)  # a marker may be split
            self.current.feed(data[: len(data) - keep])
            self._pending = data[len(data) - keep:]
            if self.current.total_bytes > self.policy.output_bytes:
                self.on_overflow(f"wrote more than {self.policy.output_bytes >> 20} MiB to stdout/stderr; "
                                 "the judge killed the process group")

    def take(self, seq: int, timeout_s: float) -> CappedLog:
        """The output of job ``seq`` (or whatever came since the last job, once the timeout passes)."""
        with self.cond:
            self.cond.wait_for(lambda: seq in self.finished or self.eof, timeout=timeout_s)
            out = self.finished.pop(seq, None)
            if out is None:
                out, self.current = self.current, CappedLog(self.policy.log_bytes)
            return out

    def stop(self) -> None:
        """Stop reading (a process that escaped the group may still hold the pipe open)."""
        self._stop = True
        self._thread.join(timeout=2)


def _partial_suffix(data: bytes, prefix: bytes) -> int:
    """Length of the longest end of ``data`` that could start ``prefix``."""
    for k in range(min(len(prefix) - 1, len(data)), 0, -1):
        if prefix.startswith(data[-k:]):
            return k
    return 0


@dataclass
class _Outcome:
    result: EvalResult
    retire: bool


class _Worker:
    """The judge-side handle of one worker process."""

    def __init__(self, device: str, generation: int, options: PoolOptions, root: Path) -> None:
        self.device = device
        self.generation = generation
        self.options = options
        self.jobs_done = 0
        self.info: SandboxInfo | None = None
        self.violation = ""
        self._unread: bytes | None = None  # a result message read while looking for a phase message
        self.root = Path(tempfile.mkdtemp(prefix=f"gpu{device}-w{generation}-", dir=root))
        home, tmp = self.root / "home", self.root / "tmp"
        home.mkdir()
        tmp.mkdir()
        (self.root / "jobs").mkdir()
        jobs_r, jobs_w = os.pipe()
        results_r, results_w = os.pipe()
        self.fds_out, fds_in = socket.socketpair()  # runner sockets go to the worker over this
        token = secrets.token_hex(8)
        argv = [sys.executable, "-m", "cudagym.judge.worker", "--job-fn", options.job_fn, "--jobs-fd",
                str(jobs_r), "--results-fd", str(results_w), "--token", token, "--root", str(self.root),
                "--policy", inner_policy(options.policy).to_json(), "--fd-channel", str(fds_in.fileno())]
        try:
            self.isolation = confine.isolation(limits=policy_limits(options.policy))
            # confined: the GPU's device nodes, the toolchain and Python, and this worker's own folder
            # (and, for a trusted worker of the split, which loads no candidate code, the folder of a diagnostic
            # trace where CUDAGYM_TRACE asks for one: cudagym.judge.split.trace)
            traces = trace_folders() if options.uses_runner else ()
            view = confine.view_for(reads=options.reads(), writes=(str(self.root), *traces), gpu=True,
                                    chdir=self.root)
            command = confine.wrap(argv, view)
            self.proc = confine.popen(
                command, cwd=self.root, env=self._env(home, tmp), stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                pass_fds=(jobs_r, results_w, fds_in.fileno()),
            )
        except BaseException:
            os.close(jobs_w)
            os.close(results_r)
            self.fds_out.close()
            remove_tree(self.root)
            raise
        finally:
            os.close(jobs_r)
            os.close(results_w)
            fds_in.close()
        self.jobs = Connection(jobs_w, readable=False)
        self.results = Connection(results_r, writable=False)
        self.watch: Watch = shared_watchdog().watch(self.proc.pid, options.policy, dirs=(str(self.root),))
        self.output = _Output(self.proc.stdout, token, options.policy, self._overflow)
        self.ready = False

    def _env(self, home: Path, tmp: Path) -> dict[str, str]:
        # Inductor compiles in this process, not in its pool of compile subprocesses: the pool starts at the
        # first torch.compile of the worker and keeps that job's environment and folder, whose private TMPDIR
        # and HOME _serve deletes when the job ends, so every later job whose graph needs a new Triton kernel
        # failed (Triton writes ptxas's input under TMPDIR), and its torch.compile baseline went untimed.
        extra = {"CUDA_VISIBLE_DEVICES": self.device,
                 "TORCHINDUCTOR_CACHE_DIR": str(self.root / "inductor"),
                 "TRITON_CACHE_DIR": str(self.root / "triton"),
                 "TORCHINDUCTOR_COMPILE_THREADS": "1",
                 **self.options.model_env(), **self.options.env}
        extra.setdefault("PYTHONPATH", child_pythonpath(self.options.pythonpath))
        return scrub_env(os.environ, home=str(home), tmpdir=str(tmp), extra=extra)

    @property
    def pid(self) -> int:
        """The worker's process id (its process group id too)."""
        return self.proc.pid

    @property
    def alive(self) -> bool:
        """True while the process runs and has broken no limit."""
        return self.proc.poll() is None and not self.watch.violation and not self.violation

    def _overflow(self, reason: str) -> None:
        if not self.violation:
            self.violation = reason
            kill_process_group(self.pid)

    def wait_ready(self, closing: threading.Event) -> str:
        """Wait for the worker's hello; an error message when it died or took too long, else ``""``."""
        if self.ready:
            return ""
        deadline = time.monotonic() + self.options.startup_timeout_s
        while not closing.is_set():
            if self.results.poll(0.05):
                try:
                    msg = json.loads(self.results.recv_bytes(MAX_MESSAGE_BYTES))
                    self.info = from_dict(SandboxInfo, msg["info"])
                except (EOFError, OSError, ValueError, KeyError, TypeError):
                    break
                self.ready = True
                startup = self.output.take(-1, 2.0).text().strip()  # the worker marks the end of its start-up
                if startup:
                    log.debug("worker %d for GPU %s started:\n%s", self.pid, self.device, startup)
                return ""
            if self.proc.poll() is not None or time.monotonic() > deadline:
                break
        self.kill()
        if closing.is_set():
            return "the judge closed while the worker started"
        how = (describe_exit(confine.exit_status(self.proc.returncode)) if self.proc.returncode is not None
               else f"did not start within {self.options.startup_timeout_s:.0f} s")
        tail = self.output.take(-2, 2.0).last_lines(30)
        return f"worker for GPU {self.device} failed to start ({how}); job function {self.options.job_fn}\n{tail}"

    def run(self, job: Job, timeout_s: float, closing: threading.Event, runner: _Runner | None = None) -> _Outcome:
        """Send one job and wait for its result, enforcing the timeout; the outcome says whether to retire.

        With ``runner``, the job's candidate runs there: it gets its own copy of the job, and the worker
        gets the socket to it.
        """
        seq = self.jobs_done
        nonce = secrets.token_hex(8)
        # the worker sees no cache and no folder of the judge's: it gets its own copy of this job's artifact
        # and makes its own working copy of the solution (the judge checks both)
        handed = self.root / "artifacts" / f"job{seq}"
        original, given = job.build, job
        try:
            build = export_artifact(job.build, handed / "build")
            work = handed / "work"
            workdir = str(shutil.copytree(job.workdir, work, symlinks=True) if job.workdir
                          else prepare_workdir(work, job.solution))
        except OSError as exc:
            return _Outcome(_result(job, EvalStatus.INFRA_ERROR, f"the job could not be handed to the "
                                    f"worker: {exc}"), False)
        job = dataclasses.replace(job, build=build, workdir=workdir)
        self.watch.dirs = (str(self.root),)
        extra: dict[str, Any] = {}
        if runner is not None:
            try:
                extra["runner_job"] = runner.hand(given, job)
                socket.send_fds(self.fds_out, [b"R"], [runner.trusted_end.fileno()])
            except OSError as exc:
                return _Outcome(_result(job, EvalStatus.INFRA_ERROR, f"the job could not be handed to its "
                                        f"runner: {exc}"), False)
        outcome = self._run_job(job, seq, nonce, timeout_s, closing, extra)
        outcome.result = dataclasses.replace(scrub_result(outcome.result, workspace=workdir), build=original)
        return outcome

    def _run_job(self, job: Job, seq: int, nonce: str, timeout_s: float, closing: threading.Event,
                 extra: dict[str, Any]) -> _Outcome:
        try:
            self.jobs.send({"seq": seq, "nonce": nonce, "job": job, **extra})
        except OSError:
            pass  # the worker is gone; the loop below reports how it ended
        deadline = time.monotonic() + timeout_s
        candidate = False  # whether the worker said the candidate went to its runner (the split's phase message)
        while True:
            if self.results.poll(0.05):
                phase = self._phase(seq, nonce)
                if phase is None:
                    return self._receive(job, seq, nonce)
                candidate = candidate or phase == "candidate"
                continue
            if self.proc.poll() is not None and not self.results.poll(0):
                return self._died(job)
            if self.watch.violation or self.violation:
                kill_process_group(self.pid)
                return self._died(job)
            if closing.is_set():
                self.kill()
                return _Outcome(_result(job, EvalStatus.INFRA_ERROR, "the judge closed while the job ran"), True)
            if time.monotonic() > deadline:
                self.kill()
                out = self.output.take(seq, 1.0)
                tail = out.last_lines()
                said = f"\nlast output:\n{tail}" if tail else ""
                if self.options.uses_runner and not candidate:  # the task's reference or the judge hung, not it
                    msg = (f"timed out after {timeout_s:.0f} s before any candidate code was loaded (the task's "
                           f"reference, or the judge, took the whole time); the judge killed the worker{said}")
                    return _Outcome(_result(job, EvalStatus.INFRA_ERROR, msg, out.text()), True)
                msg = (f"timed out after {timeout_s:.0f} s (a hung kernel or an endless host loop?); the "
                       f"judge killed the worker's process group{said}")
                return _Outcome(_result(job, EvalStatus.TIMEOUT, msg, out.text()), True)

    def _phase(self, seq: int, nonce: str) -> str | None:
        """The phase a waiting message of the worker names for job ``seq``, or None where it is the result.

        Only the split's trusted worker sends phases (no candidate code runs in its process): ``candidate`` as
        it sends the candidate to the job's runner to load.
        """
        try:
            raw = self.results.recv_bytes(MAX_MESSAGE_BYTES)
        except (EOFError, OSError):
            self._unread = None
            return None
        try:
            msg = json.loads(raw)
        except ValueError:
            msg = None
        if isinstance(msg, dict) and msg.get("kind") == "phase" and (msg.get("seq"), msg.get("nonce")) == (seq, nonce):
            return str(msg.get("phase", ""))
        self._unread = raw
        return None

    def _receive(self, job: Job, seq: int, nonce: str) -> _Outcome:
        try:
            raw, self._unread = self._unread, None  # a message _phase read that was not a phase
            msg = json.loads(raw if raw is not None else self.results.recv_bytes(MAX_MESSAGE_BYTES))
            if (msg.get("kind"), msg.get("seq"), msg.get("nonce"), msg.get("job_id")) != (
                    "result", seq, nonce, job.job_id):
                raise ValueError("message does not answer this job")
            result = from_dict(EvalResult, msg["result"])
            healthy, health = bool(msg["healthy"]), str(msg.get("health", ""))
        except EOFError:
            return self._died(job)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            self.kill()
            text = self.output.take(seq, 1.0).text()
            return _Outcome(_result(job, EvalStatus.RUNTIME_ERROR, f"the worker sent a malformed result ({exc}); "
                                    "candidate code must not write to the judge's channels", text), True)
        self.jobs_done += 1
        captured = without_profiler_chatter(self.output.take(seq, 2.0).text())  # capped to the policy's log_bytes
        if captured.strip():
            result = dataclasses.replace(result, log=f"{result.log}\n--- output of the job ---\n{captured}".lstrip())
        if not healthy and result.status is EvalStatus.OK:
            result = dataclasses.replace(result, status=EvalStatus.RUNTIME_ERROR,
                                         message=f"the CUDA context was broken after the run: {health}")
        suspect = result.status in _SUSPECT if not self.options.uses_runner else (
            result.status is EvalStatus.INFRA_ERROR)  # with a runner, the candidate never ran in the worker
        retire = (not healthy or is_context_poisoned(result) or self.jobs_done >= self.options.max_jobs_per_worker
                  or (self.options.retire_on_failure and suspect))
        return _Outcome(result, retire)

    def _died(self, job: Job) -> _Outcome:
        reason = self.watch.violation or self.violation
        if not reason:  # it closed its pipes: let it finish exiting, so its exit status is its own
            _await_exit(self.proc)
        self.kill()
        out = self.output.take(-2, 1.0)
        code = confine.exit_status(self.proc.returncode) if self.proc.returncode is not None else -9
        how = reason or (f"the worker process {describe_exit(code)} before returning a result"
                         + (" (sys.exit or os._exit in candidate code?)" if code > 0 else ""))
        tail = out.last_lines()
        return _Outcome(_result(job, EvalStatus.CRASHED, how + (f"\nlast output:\n{tail}" if tail else ""),
                                out.text()), True)

    def kill(self) -> None:
        """Kill the worker's process group and wait for the worker."""
        if kill_and_reap(self.proc) is None:
            log.error("worker %d for GPU %s did not die after SIGKILL", self.pid, self.device)

    def close(self) -> None:
        """Kill the worker and free its pipes, threads and folders."""
        self.kill()
        shared_watchdog().unwatch(self.watch)
        self.output.stop()
        self.jobs.close()
        self.results.close()
        self.fds_out.close()
        remove_tree(self.root)



def _runner_env(device: str, options: PoolOptions, root: Path, queues: int = 0) -> dict[str, str]:
    """The scrubbed environment of a runner (the job's, or a sanitized one) whose private folder is ``root``.

    ``queues``: its CUDA context's hardware work queues (:attr:`Protocol.runner_queues`; 0: CUDA's default).
    """
    queued = {"CUDA_DEVICE_MAX_CONNECTIONS": str(queues)} if queues else {}
    return trace_runner_env(scrub_env(os.environ, home=str(root / "home"), tmpdir=str(root / "tmp"), extra={
        "CUDA_VISIBLE_DEVICES": device, "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
        "TRITON_CACHE_DIR": str(root / "triton"), "TORCHINDUCTOR_COMPILE_THREADS": "1",
        "PYTHONPATH": child_pythonpath(options.pythonpath), **options.model_env(), **options.env, **queued}))


class _Runner:
    """The judge-side handle of one runner process: started ahead of its job, used for one job, then killed.

    It is confined like a worker (its own folder the only writable one), started with one end of a socket
    pair; the other end goes to the worker that judges the job.
    """

    def __init__(self, device: str, options: PoolOptions, root: Path, queues: int = 0) -> None:
        from cudagym.judge.split import RUNNER_MODULE

        self.options = options
        self.queues = queues  # its CUDA context's hardware work queues, fixed when it started (0: CUDA's default)
        self.root = Path(tempfile.mkdtemp(prefix=f"gpu{device}-runner-", dir=root))
        for sub in ("home", "tmp"):
            (self.root / sub).mkdir()
        self.trusted_end, runner_end = socket.socketpair()
        argv = [sys.executable, "-m", RUNNER_MODULE, "--sock", str(runner_end.fileno()), "--root", str(self.root),
                "--policy", inner_policy(options.policy).to_json()]
        env = _runner_env(device, options, self.root, queues)
        try:
            # its own folder only: never the trace's (the candidate's process; cudagym.judge.split.trace)
            view = confine.view_for(reads=options.reads(), writes=(str(self.root),), gpu=True, chdir=self.root)
            self.proc = confine.popen(confine.wrap(argv, view), cwd=self.root, env=env, stdin=subprocess.DEVNULL,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                                      pass_fds=(runner_end.fileno(),))
        except BaseException:
            self.trusted_end.close()
            remove_tree(self.root)
            raise
        finally:
            runner_end.close()
        self.violation = ""
        self.watch: Watch = shared_watchdog().watch(self.proc.pid, options.policy, dirs=(str(self.root),))
        self.output = _Output(self.proc.stdout, secrets.token_hex(8), options.policy, self._overflow)

    def _overflow(self, reason: str) -> None:
        if not self.violation:
            self.violation = reason
            kill_process_group(self.proc.pid)

    @property
    def alive(self) -> bool:
        """True while the process runs and has broken no limit."""
        return self.proc.poll() is None and not self.watch.violation and not self.violation

    def hand(self, job: Job, worker_job: Job) -> Job:
        """The job as the runner sees it: its own copy of the artifact and of the working folder."""
        handed = self.root / "job"
        build = export_artifact(job.build, handed / "build")
        work = handed / "work"
        workdir = str(shutil.copytree(job.workdir, work, symlinks=True) if job.workdir
                      else prepare_workdir(work, job.solution))
        return dataclasses.replace(worker_job, build=build, workdir=workdir)

    def finish(self, result: EvalResult) -> EvalResult:
        """Kill the runner; the result with what it printed and, if it died, how."""
        exited = self.proc.poll()
        reason = self.watch.violation or self.violation
        if exited is None and not reason and result.status is EvalStatus.CRASHED:
            exited = _await_exit(self.proc)  # its channel closed as it died: the message says how (SIGSEGV, exit 3)
        if kill_and_reap(self.proc) is None:
            log.error("runner %d did not die after SIGKILL", self.proc.pid)
        captured = without_profiler_chatter(self.output.take(-2, 2.0).text())
        if captured.strip():
            result = dataclasses.replace(result, log=f"{result.log}\n--- output of the job ---\n{captured}".lstrip())
        if result.status in (EvalStatus.CRASHED, EvalStatus.RUNTIME_ERROR, EvalStatus.TIMEOUT) and (
                reason or exited is not None):
            how = reason or f"the candidate's process {describe_exit(confine.exit_status(exited or 0))}"
            result = dataclasses.replace(result, message=f"{result.message} ({how})")
        return result

    def close(self) -> None:
        """Kill the process and free its socket, threads and folder."""
        kill_and_reap(self.proc)
        shared_watchdog().unwatch(self.watch)
        self.output.stop()
        self.trusted_end.close()
        remove_tree(self.root)


# ----------------------------------------------------------------------------------------------------
# Parent side: lanes and the pool
# ----------------------------------------------------------------------------------------------------

_STOP = object()


class _Lane:
    """One GPU: a queue, a thread that feeds the worker, and the worker (replaced as needed)."""

    def __init__(self, device: str, options: PoolOptions, root: Path, closing: threading.Event) -> None:
        self.device = device
        self.options = options
        self.root = root
        self.closing = closing
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.pending = 0  # queued + running, for picking the least-loaded lane
        self.generation = 0  # workers that became current
        self.started = 0  # worker processes started (spares included)
        self.worker: _Worker | None = None
        self.spares: list[_Worker] = []  # oldest first: the one most likely to have finished starting
        self.runners: list[_Runner] = []  # started ahead of their jobs (the split), oldest first
        self.busy_s = 0.0  # time spent on jobs, from taking one off the queue to setting its result
        self.jobs_finished = 0
        self.callbacks_s = 0.0  # the part of busy_s spent in the result future's callbacks
        self.teardown_s = 0.0  # the part of busy_s after the worker's verdict (runner and folders cleaned up)
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._loop, name=f"cudagym-gpu{device}", daemon=True)
        self.thread.start()

    def _new_worker(self) -> _Worker:
        self.started += 1
        return _Worker(self.device, self.started, self.options, self.root)

    def _promote(self) -> None:
        """Make the oldest live spare (or a new process) the current worker, and top the spares up."""
        self.generation += 1
        worker = None
        while self.spares and worker is None:
            spare = self.spares.pop(0)
            if spare.alive:
                worker = spare
            else:
                spare.close()
        self.worker = worker or self._new_worker()
        while len(self.spares) < self.options.spare_workers and not self.closing.is_set():
            self.spares.append(self._new_worker())  # imports torch and the harness now, not after a crash

    def _take_runner(self, queues: int = 0) -> _Runner:
        """A runner that has never run a job, its CUDA context made with ``queues`` hardware work queues.

        The oldest live spare of that kind, or a new one; the spares topped up with that kind (a spare of another
        kind is closed: the jobs now ask for this one).
        """
        runner = None
        while self.runners and runner is None:
            spare = self.runners.pop(0)
            if spare.alive and spare.queues == queues:
                runner = spare
            else:
                spare.close()
        runner = runner or _Runner(self.device, self.options, self.root, queues)
        self._top_up_runners(queues)
        return runner

    def _top_up_runners(self, queues: int = 0) -> None:
        while (self.options.uses_runner and len(self.runners) < max(1, self.options.spare_runners or 1)
               and not self.closing.is_set()):
            self.runners.append(_Runner(self.device, self.options, self.root, queues))

    def _retire(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None

    def _loop(self) -> None:
        self._promote()  # warm: a worker is importing torch before the first job arrives
        self._top_up_runners()
        while True:
            item = self.queue.get()
            if item is _STOP:
                break
            job, future = item
            took = time.monotonic()
            try:
                result = self._run(job) if not self.closing.is_set() else _result(
                    job, EvalStatus.INFRA_ERROR, "the judge closed before the job ran")
            except Exception as exc:  # a bug here must still give the job its one result
                log.exception("lane for GPU %s failed on job %s", self.device, job.job_id)
                result = _result(job, EvalStatus.INFRA_ERROR, f"judge error: {exc!r}")
            with self.lock:
                self.pending -= 1
            handed = time.monotonic()
            future.set_result(result)  # its callbacks (the pipeline's journal and stamps) run on this thread
            self.callbacks_s += time.monotonic() - handed
            self.busy_s += time.monotonic() - took
            self.jobs_finished += 1
        self._retire()
        while self.spares:
            self.spares.pop().close()
        while self.runners:
            self.runners.pop().close()

    def _run(self, job: Job) -> EvalResult:
        if self.worker is not None and not self.worker.alive:
            self._retire()  # died between jobs (a stray thread of the last job?): not this job's fault
        if self.worker is None:
            self._promote()
        assert self.worker is not None
        problem = self.worker.wait_ready(self.closing)
        if problem:
            self._retire()
            self._promote()
            return _result(job, EvalStatus.INFRA_ERROR, problem)
        timeout = self.options.job_timeout_s or job.protocol.eval_timeout_s
        started = time.monotonic()
        runner = self._take_runner(runner_queues(job.protocol)) if self.options.uses_runner else None
        judged = 0.0
        try:
            outcome = self.worker.run(job, timeout, self.closing, runner)
            judged = time.monotonic()
            if runner is not None:
                outcome.result = runner.finish(outcome.result)
        finally:
            if runner is not None:
                runner.close()
        gating = time.monotonic()
        outcome.result = self._sanitized(job, outcome.result)
        gated_s = time.monotonic() - gating  # the gates' own runs (SUBMIT, where the protocol asks)
        remove_tree(self.worker.root / "artifacts")
        self.teardown_s += time.monotonic() - judged - gated_s if judged else 0.0
        outcome.result = dataclasses.replace(outcome.result, isolation=self.worker.isolation)
        if not outcome.result.wall_time_s:  # a result the judge made (crash, timeout) has no harness clock
            outcome.result = dataclasses.replace(outcome.result, wall_time_s=time.monotonic() - started)
        if outcome.retire:
            log.info("replacing worker %d for GPU %s after job %s (%s)", self.worker.pid, self.device,
                     job.job_id, outcome.result.status.value)
            self._retire()
            if not self.closing.is_set():
                self._promote()
        return outcome.result

    def _sanitized(self, job: Job, result: EvalResult) -> EvalResult:
        """The protocol's gates on a passing SUBMIT.

        compute-sanitizer's (:mod:`cudagym.judge.sanitizer`), then the kernels' attribution from outside the runner
        (:mod:`cudagym.judge.attribution`).
        """
        if not sanitizer.gates(job, result) and not attribution.wanted(job, result):
            return result
        launch = sanitizer.Launch(self.root, self.options.policy, self.options.reads(),
                                  functools.partial(_runner_env, self.device, self.options), self.closing,
                                  self.options.job_timeout_s)
        return attribution.gate(job, sanitizer.gate(job, result, launch), launch)

    def info(self) -> WorkerInfo:
        w = self.worker
        if w is None or w.proc.poll() is not None:
            return WorkerInfo(self.device, 0, self.generation, 0, busy_s=self.busy_s, lane_jobs=self.jobs_finished,
                              callbacks_s=self.callbacks_s, teardown_s=self.teardown_s)
        return WorkerInfo(self.device, w.pid, self.generation, w.jobs_done, w.info, w.isolation, self.busy_s,
                          self.jobs_finished, self.callbacks_s, self.teardown_s)


def default_spare_runners(gpus: int) -> int:
    """Spare runners per GPU where :class:`PoolOptions` leaves it open: 3/4 of the host's cores per GPU, 2 to 12.

    Each job takes one runner and starts the next, so at a steady rate about start time / job time runners are
    always still starting (Little's law), and only the spares beyond those are ready for the next job. On the H200
    host a runner took 9.2 s from its process's birth to ready, and a bundled evaluation held its lane 1.25 s
    (session 16): about 7.4 starting, so the 8 spares then (half the 16 cores) left under one ready on average,
    and one job in ten waited about a second for a runner. 12 leave four or five ready. A runner starts on about
    one core for most of its start, so the cores bound how many may start at once.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 2
    return max(2, min(12, 3 * cores // (4 * max(1, gpus))))


class WorkerPool:
    """One sandboxed worker process per GPU, fed by per-GPU queues; thread-safe.

    Example:
        >>> with WorkerPool([0, 1]) as pool:  # doctest: +SKIP
        ...     result = pool.submit(job).result()

    Args:
        device_ids: CUDA device ids (or UUIDs) as ``CUDA_VISIBLE_DEVICES`` names them; empty for no GPU.
        job_fn: ``module:function`` run in the worker for each job.
        options: Everything else (sandbox policy, recycling, timeouts); ``job_fn`` overrides its field.
        root_dir: Where workers keep private folders (default: a new temporary folder).
    """

    def __init__(
        self,
        device_ids: Sequence[int | str],
        job_fn: str | None = None,
        *,
        options: PoolOptions | None = None,
        root_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        options = options or PoolOptions()
        if job_fn is not None:
            options = dataclasses.replace(options, job_fn=job_fn)
        from cudagym.errors import ConfigError

        spare = default_spare_runners(len(device_ids)) if options.spare_runners is None else options.spare_runners
        options = dataclasses.replace(options, spare_runners=spare)
        if not 1 <= spare <= 16:
            raise ConfigError(f"expected 1 <= spare_runners <= 16, got {spare}")
        if options.model_cache and not os.path.isdir(options.model_cache):
            raise ConfigError(f"the model cache {options.model_cache} is not a folder (PoolOptions.model_cache: a "
                              "Hugging Face hub cache, as `cudagym tasks fetch-models` fills)")
        # resolved once: every worker and runner of the pool sees the same folder (or none)
        options = dataclasses.replace(options, model_cache=options.model_cache_path())
        if options.max_jobs_per_worker < 1 or not 0 <= options.spare_workers <= 16:
            raise ConfigError(f"expected max_jobs_per_worker >= 1 and 0 <= spare_workers <= 16, got "
                              f"{options.max_jobs_per_worker} and {options.spare_workers}")
        self.options = options
        self._own_root = root_dir is None
        self.root = Path(root_dir) if root_dir else Path(tempfile.mkdtemp(prefix="cudagym-judge-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._lanes = [_Lane(str(d), options, self.root, self._closing) for d in device_ids]
        self._next = 0

    @property
    def device_ids(self) -> tuple[str, ...]:
        """The devices this pool runs workers on."""
        return tuple(lane.device for lane in self._lanes)

    def submit(self, job: Job) -> Future[EvalResult]:
        """Queue a job on the least-loaded GPU; the future always gets exactly one result, never an exception."""
        future: Future[EvalResult] = Future()
        future.set_running_or_notify_cancel()
        if os.getpid() != self._pid:  # a forked child: the lane threads stayed in the parent
            future.set_result(_result(job, EvalStatus.INFRA_ERROR, f"this worker pool belongs to process "
                                      f"{self._pid}, not to its fork {os.getpid()}; create the judge after forking"))
            return future
        with self._lock:
            if self._closing.is_set() or not self._lanes:
                why = "the judge is closed" if self._lanes else "this judge has no GPU workers"
                status = EvalStatus.INFRA_ERROR if self._lanes else EvalStatus.NO_GPU
                future.set_result(_result(job, status, why))
                return future
            n = len(self._lanes)
            rotated = [self._lanes[(self._next + k) % n] for k in range(n)]
            lane = min(rotated, key=lambda ln: ln.pending)  # the first of the least loaded: round robin on ties
            self._next = (self._lanes.index(lane) + 1) % n
            with lane.lock:
                lane.pending += 1
            lane.queue.put((job, future))
        return future

    def info(self) -> list[WorkerInfo]:
        """The current worker of each device."""
        return [lane.info() for lane in self._lanes]

    def close(self) -> None:
        """Stop every worker; queued jobs get an ``INFRA_ERROR`` result. Safe to call twice.

        In a process forked from the pool's owner it does nothing: the workers are the owner's.
        """
        with self._lock:
            if self._closing.is_set() or os.getpid() != self._pid:
                return
            self._closing.set()
            for lane in self._lanes:
                lane.queue.put(_STOP)
        for lane in self._lanes:
            lane.thread.join(timeout=60)
        if self._own_root:
            remove_tree(self.root)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ----------------------------------------------------------------------------------------------------
# Child side: ``python -m cudagym.judge.worker``
# ----------------------------------------------------------------------------------------------------

def load_job_fn(spec: str) -> Callable[[Job], EvalResult]:
    """Import ``module:function``."""
    module, _, name = spec.partition(":")
    fn = getattr(importlib.import_module(module), name or "run_job")
    if not callable(fn):
        raise TypeError(f"expected {spec} to be a function of a Job, got {type(fn).__name__}")
    return typing.cast(Callable[[Job], EvalResult], fn)


def main(argv: Sequence[str] | None = None) -> int:
    """Worker entry point: enter the sandbox, load the job function, then serve jobs until told to stop."""
    parser = argparse.ArgumentParser(prog="python -m cudagym.judge.worker")
    for name in ("--job-fn", "--token", "--root", "--policy"):
        parser.add_argument(name, required=True)
    parser.add_argument("--jobs-fd", type=int, required=True)
    parser.add_argument("--results-fd", type=int, required=True)
    parser.add_argument("--fd-channel", type=int, default=-1)
    args = parser.parse_args(argv)
    policy = SandboxPolicy.from_json(args.policy)
    info = enter_sandbox(policy)  # first: namespaces and capabilities are per thread
    os.environ[escape.WORKER_ROOT_ENV] = args.root
    escape.install()  # names file and network attempts the sandbox stopped (cannot be removed once added)
    jobs = Connection(args.jobs_fd, writable=False)
    results = Connection(args.results_fd, readable=False)
    job_fn = load_job_fn(args.job_fn)  # an import error ends the worker; the judge reports its output
    _end_output(args.token, -1)  # start-up output (sandbox warnings) is not the first job's
    results.send_bytes(json.dumps({"kind": "ready", "info": to_dict(info)}).encode())
    while True:
        try:
            msg = jobs.recv()
        except EOFError:
            return 0
        def candidate_phase(seq: int = msg["seq"], nonce: str = msg["nonce"]) -> None:
            results.send_bytes(json.dumps({"kind": "phase", "seq": seq, "nonce": nonce, "phase": "candidate"}).encode())

        reply = _serve(msg, job_fn, policy, Path(args.root), args.fd_channel, candidate_phase)
        _end_output(args.token, msg["seq"])
        results.send_bytes(json.dumps(reply).encode())
        if not reply["healthy"]:
            return 0  # a broken CUDA context cannot be repaired in-process; the judge starts a new worker


def _serve(
    msg: dict[str, Any], job_fn: Callable[..., EvalResult], policy: SandboxPolicy, root: Path, fd_channel: int = -1,
    on_candidate: Callable[[], None] | None = None,
) -> dict[str, Any]:
    job: Job = msg["job"]
    kwargs: dict[str, Any] = {}
    if "runner_job" in msg:  # the split: the socket to this job's runner comes over the descriptor channel
        from cudagym.judge.split import RunnerHandoff

        with socket.socket(fileno=os.dup(fd_channel)) as channel:
            _, fds, _, _ = socket.recv_fds(channel, 1, 1)
        kwargs["runner"] = RunnerHandoff(fds[0], msg["runner_job"], on_candidate)
    private = Path(tempfile.mkdtemp(prefix="job-", dir=root / "jobs"))
    for sub in ("home", "tmp"):
        (private / sub).mkdir()
    os.environ.update(HOME=str(private / "home"), TMPDIR=str(private / "tmp"), TMP=str(private / "tmp"),
                      TEMP=str(private / "tmp"))
    tempfile.tempdir = None
    try:
        workdir = job.workdir or str(prepare_workdir(private / "work", job.solution))
        problems = check_workdir(workdir, job.solution)
        if not os.path.isdir(workdir):
            result = _result(job, EvalStatus.INFRA_ERROR, f"the job's working folder {workdir} does not exist")
        elif problems:
            result = _result(job, EvalStatus.RULE_VIOLATION, "protected files were changed: " + "; ".join(problems),
                             violations=(Violation("protected_files", "; ".join(problems)),))
        else:
            os.chdir(workdir)
            set_cpu_budget(policy.cpu_time_s)
            artifact = os.path.dirname(job.build.artifact_path) if job.build.artifact_path else ""
            # a trusted worker of the split may write its trace (candidate code runs in its runner, never here)
            traces = list(trace_folders()) if "runner_job" in msg else []
            escape.start_job(workdir, extra=([artifact] if artifact else []) + traces)
            try:
                result = job_fn(job, **kwargs)
            finally:
                attempts = escape.finish_job()
            if not isinstance(result, EvalResult):
                result = _result(job, EvalStatus.INFRA_ERROR, f"job function returned {type(result).__name__}, "
                                 "expected EvalResult")
            result = _with_escapes(result, job, *attempts)
    except Exception:
        result = _result(job, EvalStatus.INFRA_ERROR, "the job function raised:\n" + traceback.format_exc()[-4000:])
    finally:
        os.chdir(root)
        remove_tree(private)
    healthy, health = _cuda_context_ok()
    return {"kind": "result", "seq": msg["seq"], "nonce": msg["nonce"], "job_id": job.job_id,
            "healthy": healthy, "health": health, "result": to_dict(result)}


def _with_escapes(result: EvalResult, job: Job, files: list[str], network: list[str]) -> EvalResult:
    """The result with the sandbox's rules named for every file or network attempt the job made.

    They become ``file_access`` / ``network`` violations where the protocol runs those guards.
    """
    from cudagym.judge.guards.base import select_guards

    wanted = {g.name for g in select_guards(job.protocol.guards)}
    found = [Violation(name, message) for name, message in escape.violation_messages(files, network).items()
             if name in wanted]
    if not found:
        return result
    message = "; ".join(f"{v.guard}: {v.message}" for v in found)
    status = result.status if result.status is EvalStatus.RULE_VIOLATION else EvalStatus.RULE_VIOLATION
    return dataclasses.replace(result, status=status, violations=(*result.violations, *found),
                               message=f"{message}\n{result.message}".strip() if result.message else message)


def _cuda_context_ok() -> tuple[bool, str]:
    """False after a sticky CUDA error (illegal address, device assert): the context cannot be reused."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return True, ""
    try:
        torch.cuda.synchronize()
        if torch.ones(1, device="cuda").add_(1).item() != 2.0:
            return False, "a test kernel returned a wrong value"
    except Exception as exc:
        return False, f"{type(exc).__name__}: {exc}"
    return True, ""


def _end_output(token: str, seq: int) -> None:
    """Flush Python's and C's stdio, then write the end-of-job marker the judge splits output at."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    try:
        ctypes.CDLL(None).fflush(None)
        os.write(1, f"\n\x1ecudagym-job-end:{token}:{seq}\x1e\n".encode())
    except OSError:
        pass  # stdout closed by the candidate: the judge stops waiting for the marker after a moment


# what torch's profiler library (kineto) prints on its own at every profile's start and stop in some builds
PROFILER_CHATTER = re.compile(
    r"^USDT:\S+ \S+ \d+:\d+ SyncActivityProfilerHandler\.cpp:\d+\] profiler_(?:start|stop)\n?", re.MULTILINE)


def without_profiler_chatter(text: str) -> str:
    """The job's output without the lines torch's profiler prints by itself when the judge profiles a forward."""
    return PROFILER_CHATTER.sub("", text)


if __name__ == "__main__":
    sys.exit(main())
