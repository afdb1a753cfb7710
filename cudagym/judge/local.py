"""LocalJudge: the pipeline over a build thread pool and one sandboxed worker process per local GPU.

:class:`LocalJudge` = :class:`~cudagym.judge.pipeline.Pipeline` + :class:`LocalBuilds` (a thread pool sized
to the host's cores, a memo of finished builds) + :class:`LocalGpus` (a
:class:`~cudagym.judge.worker.WorkerPool` with one worker per visible GPU, or the chosen subset). The env
process stays free of CUDA (:mod:`cudagym.judge.gpus`). On a machine without a GPU the judge still builds,
and :meth:`LocalJudge.evaluate` returns ``NO_GPU`` with the build result attached.

Several envs share one pipeline through :func:`default_judge`: every call returns a judge handle on one
process-wide pipeline (worker pool, build threads, baseline cache); it stops when the last handle is
closed, or at exit. :func:`cudagym.judge.backends.make_judge` shares one pipeline per set of options.
"""

from __future__ import annotations

import atexit
import dataclasses
import importlib
import json
import logging
import os
import re
import tempfile
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from cudagym.errors import ConfigError
from cudagym.judge import confine
from cudagym.judge.baselines import BaselineCache, BaselineKey
from cudagym.judge.build.process import BUILD_OWNER, kill_running_tools
from cudagym.judge.gpus import Devices, GpuProbe, _normalize_devices, probe_gpus
from cudagym.judge.job import Job, JobSpec
from cudagym.judge.journal import Journal
from cudagym.judge.pipeline import BuildService, GpuService, Pipeline, PipelineJudge, cache_root_of, done_future
from cudagym.judge.protocol import Protocol
from cudagym.judge.records import BuildResult, BuildStatus, EvalResult, EvalStatus, Hardware
from cudagym.judge.sandbox import prepare_workdir, remove_tree
from cudagym.judge.worker import PoolOptions, WorkerInfo, WorkerPool
from cudagym.paths import writable_cache_dir
from cudagym.solution import Solution
from cudagym.task import Task

log = logging.getLogger(__name__)

DEFAULT_BUILD_FN = "cudagym.judge.build:build"
BuildFn = Callable[[Task, Solution, Protocol], BuildResult]
MEMO_SIZE = 512

__all__ = ["BaselineKey", "GpuProbe", "Job", "LocalBuilds", "LocalGpus", "LocalJudge", "default_judge", "probe_gpus",
           "_normalize_devices"]


def host_cores() -> int:
    """CPU cores this process may use (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS
        return os.cpu_count() or 1


# ----------------------------------------------------------------------------------------------------
# Builds on this host
# ----------------------------------------------------------------------------------------------------

class LocalBuilds(BuildService):
    """Builds on a thread pool of this host; identical requests share one build, finished ones are remembered.

    Args:
        build_fn: A callable ``(task, solution, protocol) -> BuildResult`` or the ``module:function`` of a
            ``build(task, solution, protocol, cache)``.
        cache_root: The cudagym cache folder (builds under ``build/``).
        workers: Builds at once (default: one per core).
    """

    def __init__(self, build_fn: BuildFn | str, cache_root: Path, workers: int | None = None) -> None:
        workers = host_cores() if workers is None else workers
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ConfigError(f"expected build_workers >= 1, got {workers!r}")
        self.build_fn = build_fn
        self.cache_root = cache_root
        self.workers = workers
        self._callable: BuildFn | None = build_fn if callable(build_fn) else None
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="cudagym-build")
        self._lock = threading.Lock()
        self._memo: OrderedDict[tuple[str, ...], BuildResult] = OrderedDict()
        self._inflight: dict[tuple[str, ...], Future[BuildResult]] = {}

    def build(self, task: Task, solution: Solution, protocol: Protocol) -> Future[BuildResult]:
        """Build on a build thread, or answer from the memo."""
        # what a build depends on: the files and their format, and the protocol's build settings (a protocol
        # changed with with_changes may keep its id)
        settings = json.dumps({"timeout": protocol.build_timeout_s, "extra": protocol.extra}, sort_keys=True,
                              default=str)
        key = (task.content_hash, solution.format, solution.content_hash, protocol.id, settings)
        with self._lock:
            if key in self._memo:
                self._memo.move_to_end(key)
                return done_future(self._memo[key])
            if key in self._inflight:
                return self._inflight[key]
            future = self.pool.submit(self._build_now, task, solution, protocol)
            self._inflight[key] = future
        future.add_done_callback(lambda f: self._remember(key, f))
        return future

    def warm_up(self) -> Future[Any]:
        """Build each format's worked example on a build thread, ahead of the first agent's build.

        The once-per-toolchain work (torch header PCH, protected binding module) is then done, so even the
        first agent's binding files compile against the PCH. On a cold cache it takes about 30 s on a
        16-core host and a minute on 2 cores. A custom build stage is left alone.
        """
        spec = self.build_fn
        if callable(spec) or not spec.startswith("cudagym.judge.build"):
            return done_future({})
        from cudagym.judge.build import BuildCache, warm_up

        return self.pool.submit(warm_up, BuildCache(self.cache_root))

    def _build_now(self, task: Task, solution: Solution, protocol: Protocol) -> BuildResult:
        owner = BUILD_OWNER.set(self)  # close() kills this build's compilers
        try:
            if self._callable is None:
                assert isinstance(self.build_fn, str)
                self._callable = _load_build_fn(self.build_fn, self.cache_root)
            return self._callable(task, solution, protocol)
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
                while len(self._memo) > MEMO_SIZE:
                    self._memo.popitem(last=False)

    def close(self) -> None:
        """Drop queued builds and kill running compilers (their results have no reader now)."""
        self.pool.shutdown(wait=False, cancel_futures=True)  # never wait: builds run for minutes at worst
        kill_running_tools(self)


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
# GPU jobs on this host
# ----------------------------------------------------------------------------------------------------

class LocalGpus(GpuService):
    """One sandboxed worker per GPU of this host; a job's artifact key is resolved in this host's builds.

    Args:
        devices: ``"auto"``, ``"none"``, or a list of CUDA device ids / UUIDs (one worker each).
        options: Worker settings (sandbox limits, recycling, timeouts, the job function).
        resolver: This host's build service: a job's artifact is found there by its key (built on a miss).
        gpus: The GPUs when already known (skips the probe subprocess; also how tests fake a GPU).
    """

    def __init__(self, devices: Devices, options: PoolOptions, resolver: BuildService,
                 gpus: GpuProbe | None = None) -> None:
        self.devices = devices
        self.options = options
        self.resolver = resolver
        self.root = Path(tempfile.mkdtemp(prefix="cudagym-judge-"))
        self.closed = False
        self._given = gpus
        self._probe: GpuProbe | None = None
        self._pool: WorkerPool | None = None
        self._lock = threading.Lock()
        self._probe_lock = threading.Lock()  # the probe takes seconds; builds must not wait for it

    def probe(self) -> GpuProbe:
        """The GPUs (probed once); starts the workers as soon as they are known, so they warm up early."""
        with self._probe_lock:
            if self._probe is None:
                probe = self._given or probe_gpus(self.devices)
                with self._lock:
                    if probe.device_ids and not self.closed:
                        self._pool = WorkerPool(probe.device_ids, options=self.options, root_dir=self.root / "workers")
                    self._probe = probe
            return self._probe

    def known_hardware(self) -> Hardware:
        """The hardware if already probed."""
        return self._probe.hardware if self._probe is not None else Hardware()

    def pool(self) -> WorkerPool | None:
        """The worker pool; None without GPUs or once closed."""
        self.probe()
        return self._pool

    def run(self, spec: JobSpec) -> Future[EvalResult]:
        """Resolve the artifact here, make the job's working copy, run it on the least-loaded GPU."""
        out: Future[EvalResult] = Future()
        out.set_running_or_notify_cancel()
        self.resolver.build(spec.task, spec.solution, spec.protocol).add_done_callback(
            lambda f: self._with_build(spec, f, out))
        return out

    def _with_build(self, spec: JobSpec, built: Future[BuildResult], out: Future[EvalResult]) -> None:
        try:
            local = built.result()
            pool = self.pool()
            if pool is None:
                out.set_result(_infra(spec, "the judge closed before the job ran"))
                return
            if not local.ok or local.artifact_key != spec.artifact_key:
                out.set_result(_infra(spec, f"this host's build of artifact {spec.artifact_key!r} gave "
                                            f"{local.status.value} {local.artifact_key!r}: {local.message}"))
                return
            folder = f"{re.sub(r'[^A-Za-z0-9._-]+', '_', spec.job_id)[:64]}-{uuid.uuid4().hex[:8]}"  # ids are free text
            workdir = prepare_workdir(self.root / "jobs" / folder, spec.solution)
            job = pool.submit(spec.to_job(local, str(workdir)))
            job.add_done_callback(lambda f: self._done(workdir, f, out))
        except Exception as exc:  # the future must still get its one result
            log.exception("GPU service failed on job %s", spec.job_id)
            out.set_result(_infra(spec, f"judge error: {exc!r}"))

    @staticmethod
    def _done(workdir: Path, job: Future[EvalResult], out: Future[EvalResult]) -> None:
        remove_tree(workdir)
        out.set_result(job.result())

    def workers(self) -> list[WorkerInfo]:
        """The worker process of each GPU (sandbox facts included)."""
        pool = self.pool()
        return pool.info() if pool is not None else []

    def close(self) -> None:
        """Stop the workers and remove private folders."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
        remove_tree(self.root)


def _infra(spec: JobSpec, message: str) -> EvalResult:
    return EvalResult(EvalStatus.INFRA_ERROR, message, build=spec.build, protocol_id=spec.protocol.id)


# ----------------------------------------------------------------------------------------------------
# The judge
# ----------------------------------------------------------------------------------------------------

def local_pipeline(
    *,
    devices: Devices = "auto",
    build_workers: int | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    job_fn: str | None = None,
    build_fn: BuildFn | str = DEFAULT_BUILD_FN,
    pool_options: PoolOptions | None = None,
    gpus: GpuProbe | None = None,
    max_queued_per_env: int = 8,
) -> Pipeline:
    """The pipeline of a :class:`LocalJudge` (arguments as there); checks the sandbox first.

    Raises:
        ConfigError: ``pool_options`` or ``job_fn`` of the wrong type (the other options are checked where used), or a
            cache folder that cannot be written.
        SandboxUnavailableError: bubblewrap is missing or cannot run here, and ``CUDAGYM_SANDBOX`` is not ``off``.
    """
    _normalize_devices(devices)  # a bad value is a ConfigError now, not when the first job probes the GPUs
    if pool_options is not None and not isinstance(pool_options, PoolOptions):
        raise ConfigError(f"expected pool_options to be a PoolOptions or None, got {type(pool_options).__name__} "
                          f"{pool_options!r}")
    if job_fn is not None and not (isinstance(job_fn, str) and ":" in job_fn):
        raise ConfigError(f"expected job_fn to be a 'module:function' str or None, got {job_fn!r}")
    confine.isolation()  # fail closed: no sandbox, no judge (unless CUDAGYM_SANDBOX=off says so)
    options = pool_options or PoolOptions()
    if job_fn is not None:
        options = dataclasses.replace(options, job_fn=job_fn)
    root = writable_cache_dir(cache_root_of(cache_dir))  # a read-only cache fails here, not in every build
    builds = LocalBuilds(build_fn, root, build_workers)
    return Pipeline(builds, LocalGpus(devices, options, builds, gpus), BaselineCache(root / "baselines"),
                    max_queued_per_env=max_queued_per_env)


class LocalJudge(PipelineJudge):
    """Judge on this machine: builds on CPU threads, checks and times on one worker process per GPU.

    Example:
        >>> with LocalJudge(devices="auto") as judge:  # doctest: +SKIP
        ...     result = judge.evaluate(task, solution, EvalMode.PROFILE)

    Args:
        protocol: Protocol name, id or record (default ``cudagym-v6``).
        devices: ``"auto"`` (every visible GPU), ``"none"``, or a list of CUDA device ids / UUIDs (one worker each).
        build_workers: Builds that may run at once (default: one per CPU core of this process).
        cache_dir: The cudagym cache folder (baselines under ``baselines/``, builds under ``build/``);
            default ``$CUDAGYM_CACHE_DIR``, else ``$XDG_CACHE_HOME/cudagym``, else ``~/.cache/cudagym``.
        job_fn: ``module:function`` the workers run per job (the harness by default).
        build_fn: The build stage: a callable ``(task, solution, protocol) -> BuildResult`` or the
            ``module:function`` of a ``build(task, solution, protocol, cache)``.
        pool_options: Worker settings (sandbox limits, recycling, timeouts); ``job_fn`` overrides its field.
        journal: A JSONL journal path (or :class:`Journal`): every job and result is recorded, and a job id
            given to :meth:`submit` that already has a result is answered from it.
        gpus: The GPUs when already known (skips the probe subprocess; also how tests fake a GPU).
        max_queued_per_env: Unfinished jobs one judge handle may have before ``submit`` waits.

    Raises:
        ConfigError: The cache folder cannot be written (a read-only mount, folders another user owns).
        SandboxUnavailableError: bubblewrap is missing or cannot run here, and ``CUDAGYM_SANDBOX`` is not ``off``.
    """

    def __init__(
        self,
        protocol: str | Protocol | None = None,
        *,
        journal: str | os.PathLike[str] | Journal | None = None,
        _pipeline: Pipeline | None = None,
        **options: Any,
    ) -> None:
        super().__init__(protocol, _pipeline or local_pipeline(**options), journal)

    def __enter__(self) -> LocalJudge:
        return self


# ----------------------------------------------------------------------------------------------------
# One shared judge per process
# ----------------------------------------------------------------------------------------------------

_default: Pipeline | None = None
_default_lock = threading.Lock()


def default_judge(protocol: str | Protocol | None = None, **options: Any) -> LocalJudge:
    """A judge handle on the process-wide pipeline, so every env of a process shares one set of workers.

    Args:
        protocol: This handle's protocol (handles with different protocols share the workers).
        options: ``LocalJudge`` options (``devices``, ``build_workers``, ...) used when the pipeline is
            first created; ignored while it runs. ``journal`` is this handle's own.
    """
    global _default
    journal = options.pop("journal", None)
    with _default_lock:
        if _default is None or _default.closed or _default.pid != os.getpid():  # new, closed, or forked
            try:
                _default = local_pipeline(**options)
            except TypeError as exc:
                raise ConfigError(f"default_judge: {exc}") from exc
        return LocalJudge(protocol, journal=journal, _pipeline=_default)


@atexit.register
def _shutdown_default() -> None:
    if _default is not None:
        _default.shutdown()
