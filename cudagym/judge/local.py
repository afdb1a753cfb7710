"""LocalJudge: builds on a CPU thread pool, checks and times on one sandboxed worker process per local GPU.

The env process stays free of CUDA: the GPUs are found by a probe subprocess (run once per process and
cached), never by ``torch.cuda`` calls here, so the env can still be forked by vector envs and starts in
milliseconds. On a machine without a GPU the judge still builds, and :meth:`LocalJudge.evaluate` returns
``NO_GPU`` with the build result attached.

Several envs share one set of workers through :func:`default_judge`: every call returns a judge handle on
one process-wide backend (worker pool, build threads, baseline cache); the backend stops when the last
handle is closed, or at exit.
"""

from __future__ import annotations

import atexit
import dataclasses
import glob
import importlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudagym.errors import ConfigError
from cudagym.judge import confine
from cudagym.judge.baselines import BaselineCache, BaselineKey, is_reference_job, reference_solution
from cudagym.judge.build.process import BUILD_OWNER, kill_running_tools
from cudagym.judge.interface import EvalMode, Judge
from cudagym.judge.job import Job, KnownBaselines
from cudagym.judge.journal import Journal
from cudagym.judge.protocol import Protocol, get_protocol
from cudagym.judge.records import BuildResult, BuildStatus, EvalResult, EvalStatus, Hardware, from_dict
from cudagym.judge.sandbox import child_pythonpath, prepare_workdir
from cudagym.judge.worker import PoolOptions, WorkerInfo, WorkerPool
from cudagym.solution import Solution
from cudagym.task import Task

log = logging.getLogger(__name__)

DEFAULT_BUILD_FN = "cudagym.judge.build:build"
BuildFn = Callable[[Task, Solution, Protocol], BuildResult]
Devices = str | Sequence[int | str]


# ----------------------------------------------------------------------------------------------------
# Finding the GPUs without touching CUDA here
# ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GpuProbe:
    """The GPUs a judge will use, found by a subprocess.

    Attributes:
        device_ids: ``CUDA_VISIBLE_DEVICES`` names of the workers' GPUs (empty: no GPU).
        hardware: The first GPU (``gpu == "none"`` without one).
        message: Why there is no GPU, when there is none.
    """

    device_ids: tuple[str, ...]
    hardware: Hardware
    message: str = ""


_PROBE = """
import json
out = {"count": 0}
try:
    import torch
    if torch.cuda.is_available():
        from cudagym.judge.harness.hardware import describe
        from cudagym.judge.records import to_dict
        out = {"count": torch.cuda.device_count(), "hardware": to_dict(describe(torch.device("cuda", 0)))}
    else:
        out["error"] = "torch.cuda.is_available() is False (torch " + torch.__version__ + ")"
except Exception as exc:
    out["error"] = type(exc).__name__ + ": " + str(exc)
print(json.dumps(out))
"""

_probes: dict[tuple[str, ...] | None, GpuProbe] = {}
_probes_lock = threading.Lock()


def probe_gpus(devices: Devices = "auto", *, timeout_s: float = 300.0) -> GpuProbe:
    """Find the GPUs (cached per process and device list).

    Args:
        devices: ``"auto"`` (every GPU torch sees), ``"none"`` or ``[]`` (no GPU), or a list of
            ``CUDA_VISIBLE_DEVICES`` names.
        timeout_s: Limit of the probe subprocess (it imports torch and creates a CUDA context).
    """
    wanted = _normalize_devices(devices)
    with _probes_lock:
        if wanted not in _probes:
            _probes[wanted] = _run_probe(wanted, timeout_s)
        return _probes[wanted]


def _normalize_devices(devices: Devices) -> tuple[str, ...] | None:
    if isinstance(devices, str):
        if devices == "auto":
            return None
        if devices in ("none", ""):
            return ()
        return tuple(d.strip() for d in devices.split(",") if d.strip())
    return tuple(str(d) for d in devices)


def _run_probe(wanted: tuple[str, ...] | None, timeout_s: float) -> GpuProbe:
    if wanted == ():
        return GpuProbe((), Hardware(), "no GPU was asked for (devices=[])")
    if not glob.glob("/dev/nvidia[0-9]*") and not os.path.exists("/dev/dxg"):
        return GpuProbe((), Hardware(), "no NVIDIA device nodes (/dev/nvidia*)")
    env = dict(os.environ)
    if wanted:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(wanted)
    env["PYTHONPATH"] = child_pythonpath()
    try:
        proc = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True,
                              timeout=timeout_s, stdin=subprocess.DEVNULL)
        out = json.loads(proc.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError, OSError) as exc:
        return GpuProbe((), Hardware(), f"the GPU probe failed: {exc!r}")
    if not out.get("count"):
        return GpuProbe((), Hardware(), out.get("error", "no CUDA device"))
    visible = wanted or tuple(d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip())
    ids = visible[: out["count"]] if visible else tuple(str(i) for i in range(out["count"]))
    return GpuProbe(ids, from_dict(Hardware, out["hardware"]))


# ----------------------------------------------------------------------------------------------------
# The backend: what several judge handles share
# ----------------------------------------------------------------------------------------------------

class _Backend:
    """Worker pool, build threads, build memo and baseline cache; reference-counted by judge handles."""

    def __init__(self, devices: Devices, build_workers: int, cache_dir: str | os.PathLike[str] | None,
                 options: PoolOptions, build_fn: BuildFn | str, gpus: GpuProbe | None = None) -> None:
        from cudagym.sources.hub import cache_dir as user_cache_dir

        if build_workers < 1:
            raise ConfigError(f"expected build_workers >= 1, got {build_workers}")
        self.devices = devices
        self.cache_root = Path(cache_dir) if cache_dir is not None else user_cache_dir()
        self.baselines = BaselineCache(self.cache_root / "baselines")
        self.options = options
        self.build_fn = build_fn
        self._build_callable: BuildFn | None = build_fn if callable(build_fn) else None
        self.builds = ThreadPoolExecutor(build_workers, thread_name_prefix="cudagym-build")
        self.root = Path(tempfile.mkdtemp(prefix="cudagym-judge-"))
        self.refs = 0
        self.closed = False
        self.pid = os.getpid()  # a forked child must neither use nor stop its parent's workers
        self._lock = threading.Lock()
        self._probe_lock = threading.Lock()  # the probe takes seconds; builds must not wait for it
        self._pool: WorkerPool | None = None
        self._probe: GpuProbe | None = None
        self._given_gpus = gpus
        self._memo: OrderedDict[tuple[str, ...], BuildResult] = OrderedDict()
        self.lock = threading.Lock()

        self.baseline_jobs: dict[BaselineKey, Future[EvalResult]] = {}
        self._inflight: dict[tuple[str, ...], Future[BuildResult]] = {}

    # -- GPUs --------------------------------------------------------------------------------------

    def probe(self) -> GpuProbe:
        """The GPUs (probed once); starts the workers as soon as they are known, so they warm up early."""
        with self._probe_lock:
            if self._probe is None:
                probe = self._given_gpus or probe_gpus(self.devices)
                with self._lock:
                    if probe.device_ids and not self.closed:
                        self._pool = WorkerPool(probe.device_ids, options=self.options, root_dir=self.root / "workers")
                    self._probe = probe
            return self._probe

    def known_hardware(self) -> Hardware:
        """The hardware if already probed (never starts a probe)."""
        return self._probe.hardware if self._probe is not None else Hardware()

    def pool(self) -> WorkerPool | None:
        """The worker pool, None without GPUs."""
        self.probe()
        return self._pool

    # -- builds ------------------------------------------------------------------------------------

    def build(self, task: Task, solution: Solution, protocol: Protocol) -> Future[BuildResult]:
        """Build on a build thread; identical requests share one build and finished ones are remembered."""
        key = (task.content_hash, solution.content_hash, protocol.id)
        with self._lock:
            if key in self._memo:
                self._memo.move_to_end(key)
                done: Future[BuildResult] = Future()
                done.set_result(self._memo[key])
                return done
            if key in self._inflight:
                return self._inflight[key]
            future = self.builds.submit(self._build_now, task, solution, protocol)
            self._inflight[key] = future
        future.add_done_callback(lambda f: self._remember(key, f))
        return future

    def _build_now(self, task: Task, solution: Solution, protocol: Protocol) -> BuildResult:
        owner = BUILD_OWNER.set(self)  # close() kills this build's compilers
        try:
            if self._build_callable is None:
                assert isinstance(self.build_fn, str)
                self._build_callable = _load_build_fn(self.build_fn, self.cache_root)
            return self._build_callable(task, solution, protocol)
        except Exception as exc:  # a broken build stage is the judge's problem, not the candidate's
            log.exception("build stage failed for task %s", task.id)
            return BuildResult(BuildStatus.TOOL_ERROR, solution.format, message=f"the build stage failed: {exc!r}")
        finally:
            BUILD_OWNER.reset(owner)

    def _remember(self, key: tuple[str, ...], future: Future[BuildResult]) -> None:
        with self._lock:
            self._inflight.pop(key, None)
            if future.cancelled():
                return
            result = future.result()
            if result.status not in (BuildStatus.TOOL_ERROR, BuildStatus.TIMEOUT):  # those may pass next time
                self._memo[key] = result
                while len(self._memo) > 512:
                    self._memo.popitem(last=False)

    # -- lifetime ----------------------------------------------------------------------------------

    def acquire(self) -> None:
        """One more judge handle uses this backend."""
        with self._lock:
            self.refs += 1

    def release(self) -> None:
        """A handle is done; the last one stops everything."""
        with self._lock:
            self.refs -= 1
            last = self.refs <= 0
        if last:
            self.shutdown()

    def shutdown(self) -> None:
        """Stop workers and build threads and remove private folders; safe to call twice."""
        with self._lock:
            if self.closed or os.getpid() != self.pid:
                return
            self.closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
        # never wait for running builds (minutes under the build timeout): their results have no reader now
        self.builds.shutdown(wait=False, cancel_futures=True)
        kill_running_tools(self)
        shutil.rmtree(self.root, ignore_errors=True)


def _load_build_fn(spec: str, cache_root: Path) -> BuildFn:
    """The build stage's ``build(task, solution, protocol, cache)`` bound to a cache under ``cache_root``."""
    module_name, _, name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise RuntimeError(f"the build stage {module_name} is not available ({exc})") from exc
    fn = getattr(module, name or "build")
    make_cache = getattr(module, "BuildCache", None)
    cache: Any = make_cache(cache_root) if callable(make_cache) else cache_root  # entries go under build/
    return lambda task, solution, protocol: fn(task, solution, protocol, cache)


# ----------------------------------------------------------------------------------------------------
# The judge
# ----------------------------------------------------------------------------------------------------

class LocalJudge(Judge):
    """Judge on this machine: builds on CPU threads, checks and times on one worker process per GPU.

    Example:
        >>> with LocalJudge(devices="auto") as judge:  # doctest: +SKIP
        ...     result = judge.evaluate(task, solution, EvalMode.PROFILE)

    Args:
        protocol: Protocol name, id or record (default ``cudagym-v2``).
        devices: ``"auto"``, ``"none"``, or a list of CUDA device ids / UUIDs (one worker each).
        build_workers: Builds that may run at once.
        cache_dir: The cudagym cache folder (baselines under ``baselines/``, builds under ``build/``);
            default ``$CUDAGYM_CACHE_DIR``, else ``$XDG_CACHE_HOME/cudagym``, else ``~/.cache/cudagym``.
        job_fn: ``module:function`` the workers run per job (the harness by default).
        build_fn: The build stage: a callable ``(task, solution, protocol) -> BuildResult`` or the
            ``module:function`` of a ``build(task, solution, protocol, cache)``.
        pool_options: Worker settings (sandbox limits, recycling, timeouts); ``job_fn`` overrides its field.
        journal: A JSONL journal path (or :class:`Journal`): every job and result is recorded, and a job id
            given to :meth:`submit` that already has a result is answered from it.
        gpus: The GPUs when already known (skips the probe subprocess; also how tests fake a GPU).

    Raises:
        SandboxUnavailableError: bubblewrap is missing or cannot run here, and ``CUDAGYM_SANDBOX`` is not ``off``.
    """

    def __init__(
        self,
        protocol: str | Protocol | None = None,
        *,
        devices: Devices = "auto",
        build_workers: int = 2,
        cache_dir: str | os.PathLike[str] | None = None,
        job_fn: str | None = None,
        build_fn: BuildFn | str = DEFAULT_BUILD_FN,
        pool_options: PoolOptions | None = None,
        journal: str | os.PathLike[str] | Journal | None = None,
        gpus: GpuProbe | None = None,
        _backend: _Backend | None = None,
    ) -> None:
        self.protocol = get_protocol(protocol)
        if _backend is None:
            confine.isolation()  # fail closed: no sandbox, no judge (unless CUDAGYM_SANDBOX=off says so)
            options = pool_options or PoolOptions()
            if job_fn is not None:
                options = dataclasses.replace(options, job_fn=job_fn)
            _backend = _Backend(devices, build_workers, cache_dir, options, build_fn, gpus)
        _backend.acquire()
        self._backend = _backend
        self.journal = Journal(journal) if isinstance(journal, (str, os.PathLike)) else journal
        self._closed = False

    @property
    def baselines(self) -> BaselineCache:
        """The baseline cache this judge reads and fills."""
        return self._backend.baselines

    def build(self, task: Task, solution: Solution) -> BuildResult:
        """Compile the solution (cached by content); never raises for bad candidate code."""
        self._check_open()
        return self._backend.build(task, solution, self.protocol).result()

    def evaluate(self, task: Task, solution: Solution, mode: EvalMode = EvalMode.PROFILE) -> EvalResult:
        """Build, then check (and for PROFILE/SUBMIT time) on a GPU worker; blocks until the verdict."""
        return self.submit(task, solution, mode).result()

    def submit(
        self, task: Task, solution: Solution, mode: EvalMode = EvalMode.PROFILE, *, job_id: str | None = None
    ) -> Future[EvalResult]:
        """Like :meth:`evaluate`, without waiting: the future always gets exactly one result.

        Args:
            task: The reference task.
            solution: The candidate.
            mode: VERIFY, PROFILE or SUBMIT.
            job_id: A stable id (for resumable runs with a journal); a fresh one when None.
        """
        self._check_open()
        job_id = job_id or uuid.uuid4().hex
        out: Future[EvalResult] = Future()
        out.set_running_or_notify_cancel()
        known = self.journal.result(job_id) if self.journal is not None else None
        if known is not None:
            out.set_result(known)  # a resumed run: this job already has its verdict
            return out
        if self.journal is not None:
            self.journal.record_job(job_id, task_id=task.id, solution_hash=solution.content_hash,
                                    mode=mode.value, protocol_id=self.protocol.id)
        request = _Request(job_id, task, solution, mode, out)
        self._backend.build(task, solution, self.protocol).add_done_callback(
            lambda f: self._guarded(request, self._after_build, f))
        return out

    def warm_up(self) -> Future[Any]:
        """Build each format's worked example on a build thread, ahead of the first agent's build.

        The once-per-toolchain work (torch header PCH, protected binding module) is then done, so even the
        first agent's binding files compile against the PCH. Opt-in: on a cold cache it takes about 30 s on
        a 16-core host and a minute on 2 cores, and :meth:`close` waits for running builds.
        """
        self._check_open()
        spec = self._backend.build_fn
        if callable(spec) or not spec.startswith("cudagym.judge.build"):
            done: Future[Any] = Future()
            done.set_result({})  # a custom build stage has its own warm-up, if any
            return done
        from cudagym.judge.build import BuildCache, warm_up

        return self._backend.builds.submit(warm_up, BuildCache(self._backend.cache_root))

    def hardware(self) -> Hardware:
        """The first GPU of this judge (``gpu == "none"`` without one); probed once, in a subprocess."""
        return self._backend.probe().hardware

    def workers(self) -> list[WorkerInfo]:
        """The worker process of each GPU (sandbox facts included)."""
        pool = self._backend.pool()
        return pool.info() if pool is not None else []

    def close(self) -> None:
        """Release this handle; the backend stops with its last handle. Safe to call twice."""
        if not self._closed:
            self._closed = True
            self._backend.release()

    def __enter__(self) -> LocalJudge:
        return self

    # -- the pipeline, in callbacks (no thread waits on a GPU) ---------------------------------------

    def _guarded(self, request: _Request, step: Callable[[_Request, Future[Any]], None], future: Future[Any]) -> None:
        if future.cancelled():
            self._finish(request, EvalResult(EvalStatus.INFRA_ERROR, "the judge closed before the job ran",
                                             protocol_id=self.protocol.id))
            return
        try:
            step(request, future)
        except Exception as exc:  # a bug in the judge must still give the job its one result
            log.exception("judge failed on job %s", request.job_id)
            self._finish(request, EvalResult(EvalStatus.INFRA_ERROR, f"judge error: {exc!r}",
                                             protocol_id=self.protocol.id))

    def _after_build(self, request: _Request, future: Future[BuildResult]) -> None:
        build = future.result()
        if self._backend.closed:
            self._finish(request, EvalResult(EvalStatus.INFRA_ERROR, "the judge closed before the job ran",
                                             build=build, protocol_id=self.protocol.id))
            return
        if not build.ok:
            self._finish(request, EvalResult(
                EvalStatus.BUILD_FAILED, f"build {build.status.value}: {build.message}".rstrip(": "), build=build,
                protocol_id=self.protocol.id, hardware=self._backend.known_hardware()))
            return
        probe = self._backend.probe()
        pool = self._backend.pool()
        if pool is None:
            self._finish(request, EvalResult(
                EvalStatus.NO_GPU, f"built, but not checked or timed: this judge has no GPU: {probe.message}",
                build=build, protocol_id=self.protocol.id, hardware=probe.hardware))
            return
        key = BaselineKey.of(request.task, probe.hardware, self.protocol)
        known = self._backend.baselines.get(key)
        if not known.known and not is_reference_job(request.task, request.solution):
            # baselines are measured by a job that runs no candidate code, never taken from a candidate's job
            self._clean_baselines(request.task, key).add_done_callback(
                lambda f: self._guarded(request, lambda r, _f: self._run_job(r, build, key), f))
            return
        self._run_job(request, build, key)

    def _run_job(self, request: _Request, build: BuildResult, key: BaselineKey) -> None:
        pool = self._backend.pool()
        if pool is None:  # the judge closed meanwhile
            self._finish(request, EvalResult(EvalStatus.INFRA_ERROR, "the judge closed before the job ran",
                                             build=build, protocol_id=self.protocol.id))
            return
        known = self._backend.baselines.get(key)
        folder = f"{re.sub(r'[^A-Za-z0-9._-]+', '_', request.job_id)[:64]}-{uuid.uuid4().hex[:8]}"  # ids are free text
        workdir = prepare_workdir(self._backend.root / "jobs" / folder, request.solution)
        job = Job(request.job_id, request.task, request.solution, build, request.mode, self.protocol, known,
                  str(workdir))
        pool.submit(job).add_done_callback(lambda f: self._guarded(request, self._after_job(job, known), f))

    def _clean_baselines(self, task: Task, key: BaselineKey) -> Future[EvalResult]:
        """The baseline job of ``key`` (the reference as its own candidate, guards off); one per key at a time."""
        with self._backend.lock:
            running = self._backend.baseline_jobs.get(key)
            if running is not None:
                return running
            timing = self.protocol.with_changes(guards=())  # same id and timing fields: the same cache key
            future = LocalJudge(timing, _backend=self._backend).submit(
                task, reference_solution(task), EvalMode.PROFILE, job_id=f"baselines:{uuid.uuid4().hex}")
            self._backend.baseline_jobs[key] = future
        future.add_done_callback(lambda _f: self._backend.baseline_jobs.pop(key, None))
        return future

    def _after_job(self, job: Job, known: KnownBaselines) -> Callable[[_Request, Future[EvalResult]], None]:
        def step(request: _Request, future: Future[EvalResult]) -> None:
            shutil.rmtree(job.workdir, ignore_errors=True)
            result = future.result()
            hardware = result.hardware if result.hardware.gpu not in ("none", "unknown", "") else \
                self._backend.known_hardware()
            result = dataclasses.replace(result, hardware=hardware, protocol_id=result.protocol_id or self.protocol.id)
            if not known.known and is_reference_job(job.task, job.solution) and (
                    result.eager.measured or result.compiled.measured):
                self._backend.baselines.put(BaselineKey.of(job.task, hardware, self.protocol), result.eager,
                                            result.compiled, task_id=job.task.id)
            self._finish(request, result)
        return step

    def _finish(self, request: _Request, result: EvalResult) -> None:
        if request.out.done():
            return
        if self.journal is not None:
            try:
                self.journal.record_result(request.job_id, result, task_id=request.task.id,
                                           solution_hash=request.solution.content_hash)
            except OSError:
                log.exception("could not journal job %s", request.job_id)
        request.out.set_result(result)

    def _check_open(self) -> None:
        if self._closed:
            raise ConfigError("this LocalJudge is closed; create a new one (or use default_judge())")


@dataclass(frozen=True)
class _Request:
    job_id: str
    task: Task
    solution: Solution
    mode: EvalMode
    out: Future[EvalResult]


# ----------------------------------------------------------------------------------------------------
# One shared judge per process
# ----------------------------------------------------------------------------------------------------

_default: _Backend | None = None
_default_lock = threading.Lock()


def default_judge(protocol: str | Protocol | None = None, **options: Any) -> LocalJudge:
    """A judge handle on the process-wide backend, so every env of a process shares one set of workers.

    Args:
        protocol: This handle's protocol (handles with different protocols share the workers).
        options: ``LocalJudge`` options (``devices``, ``build_workers``, ...) used when the backend is
            first created; ignored while it runs.
    """
    global _default
    journal = options.pop("journal", None)
    with _default_lock:
        if _default is None or _default.closed or _default.pid != os.getpid():  # new, closed, or forked
            opts = dict(options)
            job_fn = opts.pop("job_fn", None)
            pool_options = opts.pop("pool_options", None) or PoolOptions()
            if job_fn is not None:
                pool_options = dataclasses.replace(pool_options, job_fn=job_fn)
            _default = _Backend(opts.pop("devices", "auto"), opts.pop("build_workers", 2),
                                opts.pop("cache_dir", None), pool_options, opts.pop("build_fn", DEFAULT_BUILD_FN),
                                opts.pop("gpus", None))
            if opts:
                raise ConfigError(f"default_judge: unknown options {sorted(opts)}")
        return LocalJudge(protocol, journal=journal, _backend=_default)


@atexit.register
def _shutdown_default() -> None:
    if _default is not None:
        _default.shutdown()
