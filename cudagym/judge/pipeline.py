"""The one judging pipeline, over two plug-in services: builds, and GPU execution.

Every judge backend runs this pipeline; only the services differ (:class:`~cudagym.judge.local.LocalJudge`:
a build thread pool and a worker pool on this host's GPUs; :class:`~cudagym.judge.ray_judge.RayJudge`: build
tasks and GPU actors of a Ray cluster). One evaluation, in the order it runs::

    journal (a known job id is answered from its record)
    -> build (BuildService; identical requests share one build)
    -> verdict without a GPU job when the build failed or there is no GPU (made here, once)
    -> baseline lookup (BaselineCache; a missing key is timed by a job that runs no candidate code)
    -> the job as a value (JobSpec: task, files, artifact key, cached baselines)
    -> fair dispatch to the GPU service (FairDispatcher: round robin over clients, every GPU kept busy)
    -> result: stamps of hardware and protocol, baselines stored from reference jobs, journaled once

No thread waits on a GPU: each stage is a callback on the previous stage's future. Each job's future gets
exactly one result, never an exception; a bug in a stage becomes an ``INFRA_ERROR`` result.
"""

from __future__ import annotations

import abc
import dataclasses
import logging
import os
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudagym.errors import ConfigError
from cudagym.judge.baselines import BaselineCache, BaselineKey, is_reference_job, reference_solution
from cudagym.judge.gpus import GpuProbe
from cudagym.judge.interface import EvalMode, Judge
from cudagym.judge.job import JobSpec, KnownBaselines
from cudagym.judge.journal import Journal
from cudagym.judge.protocol import Protocol, get_protocol
from cudagym.judge.records import BuildResult, EvalResult, EvalStatus, Hardware, no_gpu_verdict
from cudagym.judge.scheduler import ClientCaps, FairDispatcher
from cudagym.judge.worker import WorkerInfo
from cudagym.solution import Solution
from cudagym.task import Task

log = logging.getLogger(__name__)

BASELINES_CLIENT = "cudagym:baselines"
CLOSED_MESSAGE = "the judge closed before the job ran"
CANCELLED_MESSAGE = "cancelled: the env that asked for this job reset or closed before a GPU ran it"
# a job is never judged against baselines timed only beside its own candidate (no clean time to bound them)
BASELINES_FAILED_MESSAGE = "not judged: the task's baselines could not be timed in a job of their own"


def done_future(value: Any) -> Future[Any]:
    """A future that already holds ``value``."""
    future: Future[Any] = Future()
    future.set_result(value)
    return future


# ----------------------------------------------------------------------------------------------------
# The two services
# ----------------------------------------------------------------------------------------------------

class BuildService(abc.ABC):
    """Builds solutions; identical requests share one build and finished ones are remembered."""

    @abc.abstractmethod
    def build(self, task: Task, solution: Solution, protocol: Protocol) -> Future[BuildResult]:
        """Start a build (or answer from the memo); the future never holds an exception."""

    def warm_up(self) -> Future[Any]:
        """Build once-per-toolchain parts ahead of the first agent's build (nothing by default)."""
        return done_future({})

    def close(self) -> None:  # noqa: B027 - optional hook
        """Stop building; running builds' results have no reader any more."""


class GpuService(abc.ABC):
    """Runs :class:`JobSpec` values on GPUs: resolves the artifact key on its host, then runs the worker."""

    @abc.abstractmethod
    def probe(self) -> GpuProbe:
        """The GPUs (found once; may take seconds the first time)."""

    @abc.abstractmethod
    def known_hardware(self) -> Hardware:
        """The hardware if already probed (never starts a probe)."""

    @abc.abstractmethod
    def run(self, spec: JobSpec) -> Future[EvalResult]:
        """Run one job; the future always gets exactly one result, never an exception."""

    def slots(self) -> int:
        """Jobs to keep in flight so every GPU stays busy: one running and one waiting per GPU."""
        return 2 * max(1, len(self.probe().device_ids))

    def workers(self) -> list[WorkerInfo]:
        """The worker process of each GPU, where the service can tell."""
        return []

    def close(self) -> None:  # noqa: B027 - optional hook
        """Stop the workers; queued jobs get an ``INFRA_ERROR`` result."""


# ----------------------------------------------------------------------------------------------------
# The pipeline
# ----------------------------------------------------------------------------------------------------

@dataclass(eq=False)
class _Request:
    job_id: str
    task: Task
    solution: Solution
    mode: EvalMode
    protocol: Protocol
    client: str
    journal: Journal | None
    out: Future[EvalResult]
    capped: bool = True


class Pipeline:
    """The judging pipeline over a build service and a GPU service, shared by many judge handles.

    Args:
        builds: The build service.
        gpus: The GPU service.
        baselines: The baseline cache (read before each job, filled from reference jobs).
        max_queued_per_env: Unfinished jobs one judge handle may have; its ``submit`` waits beyond that.
    """

    def __init__(self, builds: BuildService, gpus: GpuService, baselines: BaselineCache, *,
                 max_queued_per_env: int = 8) -> None:
        self.builds = builds
        self.gpus = gpus
        self.baselines = baselines
        self.caps = ClientCaps(max_queued_per_env)
        self.dispatch = FairDispatcher(capacity=2)  # resized once the GPUs are known
        self.closed = False
        self.pid = os.getpid()  # a forked child must neither use nor stop its parent's workers
        self.refs = 0
        self._lock = threading.Lock()
        self._baselines_lock = threading.RLock()  # a finished baseline job forgets itself on the same thread
        self._active: dict[str, set[_Request]] = {}
        self._baseline_jobs: dict[BaselineKey, Future[EvalResult]] = {}

    # -- entry points ------------------------------------------------------------------------------

    def submit(self, task: Task, solution: Solution, mode: EvalMode, protocol: Protocol, *, job_id: str,
               client: str, journal: Journal | None = None, capped: bool = True) -> Future[EvalResult]:
        """Judge one solution; the future always gets exactly one result."""
        out: Future[EvalResult] = Future()
        out.set_running_or_notify_cancel()
        if journal is not None:
            clash = journal.conflict(job_id, task_id=task.id, solution_hash=solution.content_hash, mode=mode.value,
                                     protocol_id=protocol.id)
            if clash:  # the journal answers a known id with its verdict: only for that same job
                log.warning("job id %.200r %s; judging it under a fresh id", job_id, clash)
                job_id = f"{job_id}:{uuid.uuid4().hex}"
        known = journal.result(job_id) if journal is not None else None
        if known is not None:
            out.set_result(known)  # a resumed run: this job already has its verdict
            return out
        if journal is not None:
            journal.record_job(job_id, task_id=task.id, solution_hash=solution.content_hash, mode=mode.value,
                               protocol_id=protocol.id)
        request = _Request(job_id, task, solution, mode, protocol, client, journal, out, capped)
        if capped:
            self.caps.acquire(client, lambda: self.closed)  # back-pressure: at most the cap per env
        with self._lock:
            self._active.setdefault(client, set()).add(request)
        self.builds.build(task, solution, protocol).add_done_callback(
            lambda f: self._guarded(request, self._after_build, f))
        return out

    def cancel(self, client: str) -> int:
        """Give the client's unfinished jobs a cancelled result; GPU jobs already running finish unread."""
        with self._lock:
            requests = list(self._active.get(client, ()))
        self.dispatch.cancel(client)
        for request in requests:
            self._finish(request, self._verdict(request, EvalStatus.INFRA_ERROR, CANCELLED_MESSAGE))
        return len(requests)

    # -- the stages --------------------------------------------------------------------------------

    def _guarded(self, request: _Request, step: Callable[[_Request, Future[Any]], None], future: Future[Any]) -> None:
        if request.out.done():
            return  # cancelled meanwhile
        try:
            if future.cancelled():
                self._finish(request, self._verdict(request, EvalStatus.INFRA_ERROR, CLOSED_MESSAGE))
                return
            step(request, future)
        except Exception as exc:  # a bug in the judge must still give the job its one result
            log.exception("judge failed on job %s", request.job_id)
            self._finish(request, self._verdict(request, EvalStatus.INFRA_ERROR, f"judge error: {exc!r}"))

    def _after_build(self, request: _Request, future: Future[BuildResult]) -> None:
        build = future.result()
        if self.closed:
            self._finish(request, self._verdict(request, EvalStatus.INFRA_ERROR, CLOSED_MESSAGE, build))
            return
        if not build.ok:
            message = f"build {build.status.value}: {build.message}".rstrip(": ")
            self._finish(request, self._verdict(request, EvalStatus.BUILD_FAILED, message, build))
            return
        probe = self.gpus.probe()
        if not probe.device_ids:
            self._finish(request, no_gpu_verdict(build, protocol_id=request.protocol.id, hardware=probe.hardware,
                                                 reason=probe.message))
            return
        self.dispatch.set_capacity(self.gpus.slots())
        key = BaselineKey.of(request.task, probe.hardware, request.protocol)
        if not self.baselines.get(key).known and not is_reference_job(request.task, request.solution):
            # baselines are measured by a job that runs no candidate code, never taken from a candidate's job
            self._clean_baselines(request, key).add_done_callback(
                lambda f: self._guarded(request, lambda r, done: self._after_baselines(r, build, key, done), f))
            return
        self._queue_job(request, build, key)

    def _after_baselines(self, request: _Request, build: BuildResult, key: BaselineKey,
                         clean: Future[EvalResult]) -> None:
        """Queue the job once its clean baseline job has ended; where that job failed, the job ends without running.

        A job whose baselines are not in the cache times them beside the candidate, where work the candidate
        leaves on the GPU slows them; only the clean times bound those (a torch.compile the task cannot take may
        stay unknown, eager may not).
        """
        failed = clean.result()
        if self.baselines.get(key).eager.measured or failed.status is EvalStatus.OK:
            self._queue_job(request, build, key)
            return
        status = EvalStatus.TASK_TOO_LARGE if failed.status is EvalStatus.TASK_TOO_LARGE else EvalStatus.INFRA_ERROR
        self._finish(request, self._verdict(
            request, status, f"{BASELINES_FAILED_MESSAGE} ({failed.status.value}: {failed.message[:500]})", build))

    def _clean_baselines(self, request: _Request, key: BaselineKey) -> Future[EvalResult]:
        """The baseline job of ``key`` (the reference as its own candidate, guards off); one per key at a time."""
        with self._baselines_lock:  # not self._lock: submit() takes that one
            running = self._baseline_jobs.get(key)
            if running is not None:
                return running
            timing = request.protocol.with_changes(guards=())  # same id and timing fields: the same cache key
            future = self.submit(request.task, reference_solution(request.task), EvalMode.PROFILE, timing,
                                 job_id=f"baselines:{uuid.uuid4().hex}", client=BASELINES_CLIENT, capped=False)
            self._baseline_jobs[key] = future
        future.add_done_callback(lambda _f: self._forget_baseline_job(key))
        return future

    def _forget_baseline_job(self, key: BaselineKey) -> None:
        with self._baselines_lock:
            self._baseline_jobs.pop(key, None)

    def _queue_job(self, request: _Request, build: BuildResult, key: BaselineKey) -> None:
        known = self.baselines.get(key)
        spec = JobSpec.of(request.job_id, request.task, request.solution, request.mode, request.protocol, build,
                          known)
        cancelled = self._verdict(request, EvalStatus.INFRA_ERROR, CANCELLED_MESSAGE, build)
        self.dispatch.put(request.client, lambda: self._start(request, spec, build, known),
                          lambda: self._finish(request, cancelled), priority=request.client == BASELINES_CLIENT)

    def _start(self, request: _Request, spec: JobSpec, build: BuildResult, known: KnownBaselines) -> Future[Any]:
        if request.out.done():
            return done_future(None)  # cancelled while it waited
        if self.closed:
            self._finish(request, self._verdict(request, EvalStatus.INFRA_ERROR, CLOSED_MESSAGE, build))
            return done_future(None)
        future = self.gpus.run(spec)
        future.add_done_callback(lambda f: self._guarded(request, lambda r, f: self._after_job(r, build, known, f),
                                                         future))
        return future

    def _after_job(self, request: _Request, build: BuildResult, known: KnownBaselines,
                   future: Future[EvalResult]) -> None:
        result = dataclasses.replace(future.result(), build=build)  # the build record of the build host
        hardware = self._hardware_of(result)
        if not (known.known and known.yardstick.measured) and is_reference_job(request.task, request.solution) and (
                result.eager.measured or result.compiled.measured or result.runner_reference.measured):
            self.baselines.put(BaselineKey.of(request.task, hardware, request.protocol), result.eager,
                               result.compiled, task_id=request.task.id, yardstick=result.yardstick)
        self._finish(request, result)

    def _finish(self, request: _Request, result: EvalResult) -> None:
        """Stamp, journal and deliver ``result``: the first call per request wins."""
        with self._lock:
            if request.out.done():
                return
            active = self._active.get(request.client)
            if active is not None:
                active.discard(request)
                if not active:
                    del self._active[request.client]
        result = dataclasses.replace(result, hardware=self._hardware_of(result),
                                     protocol_id=result.protocol_id or request.protocol.id)
        if request.journal is not None:
            try:
                request.journal.record_result(request.job_id, result, task_id=request.task.id,
                                              solution_hash=request.solution.content_hash)
            except OSError:
                log.exception("could not journal job %s", request.job_id)
        try:
            request.out.set_result(result)
        finally:
            if request.capped:
                self.caps.release(request.client)

    def _verdict(self, request: _Request, status: EvalStatus, message: str,
                 build: BuildResult | None = None) -> EvalResult:
        result = EvalResult(status, message, protocol_id=request.protocol.id)
        return dataclasses.replace(result, build=build) if build is not None else result

    def _hardware_of(self, result: EvalResult) -> Hardware:
        real = result.hardware.gpu not in ("none", "unknown", "")
        return result.hardware if real else self.gpus.known_hardware()

    # -- lifetime ----------------------------------------------------------------------------------

    def acquire(self) -> None:
        """One more judge handle uses this pipeline."""
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
        """Cancel queued jobs and stop both services; safe to call twice, a no-op in a forked child."""
        with self._lock:
            if self.closed or os.getpid() != self.pid:
                return
            self.closed = True
        self.dispatch.cancel_all()
        self.gpus.close()
        self.builds.close()


# ----------------------------------------------------------------------------------------------------
# A judge handle on a pipeline
# ----------------------------------------------------------------------------------------------------

class PipelineJudge(Judge):
    """A judge handle on a (possibly shared) :class:`Pipeline`; one handle per env.

    Each handle is one client of the pipeline's fair dispatch and has its own cap of queued jobs, its own
    protocol and journal; :meth:`cancel_pending` and :meth:`close` drop its jobs that have not reached a GPU.

    Args:
        protocol: Protocol name, id or record.
        pipeline: The pipeline (its last handle's :meth:`close` stops it).
        journal: A JSONL journal path (or :class:`Journal`): every job and result is recorded, and a job id
            given to :meth:`submit` that already has a result is answered from it.
    """

    def __init__(self, protocol: str | Protocol | None, pipeline: Pipeline,
                 journal: str | os.PathLike[str] | Journal | None = None) -> None:
        self.protocol = get_protocol(protocol)
        pipeline.acquire()
        self._pipeline = pipeline
        self.journal = Journal(journal) if isinstance(journal, (str, os.PathLike)) else journal
        self.client = uuid.uuid4().hex
        self._closed = False

    @property
    def pipeline(self) -> Pipeline:
        """The pipeline this handle submits to."""
        return self._pipeline

    @property
    def baselines(self) -> BaselineCache:
        """The baseline cache this judge reads and fills."""
        return self._pipeline.baselines

    def build(self, task: Task, solution: Solution) -> BuildResult:
        """Compile the solution (cached by content); never raises for bad candidate code."""
        self._check_open()
        return self._pipeline.builds.build(task, solution, self.protocol).result()

    def submit(
        self, task: Task, solution: Solution, mode: EvalMode = EvalMode.PROFILE, *, job_id: str | None = None
    ) -> Future[EvalResult]:
        """Start judging; the future always gets exactly one result (waits while this handle is at its cap)."""
        self._check_open()
        return self._pipeline.submit(task, solution, mode, self.protocol, job_id=job_id or uuid.uuid4().hex,
                                     client=self.client, journal=self.journal)

    def cancel_pending(self) -> int:
        """Drop this handle's jobs that no GPU has started; their futures get a cancelled result."""
        return self._pipeline.cancel(self.client)

    def warm_up(self) -> Future[Any]:
        """Build the once-per-toolchain parts ahead of the first agent's build (see the build service)."""
        self._check_open()
        return self._pipeline.builds.warm_up()

    def hardware(self) -> Hardware:
        """The first GPU of this judge (``gpu == "none"`` without one); probed once."""
        return self._pipeline.gpus.probe().hardware

    def workers(self) -> list[WorkerInfo]:
        """The worker process of each GPU (sandbox facts included)."""
        return self._pipeline.gpus.workers()

    def close(self) -> None:
        """Cancel this handle's queued jobs and release it; the pipeline stops with its last handle."""
        if not self._closed:
            self._closed = True
            self._pipeline.cancel(self.client)
            self._pipeline.release()

    def __enter__(self) -> PipelineJudge:
        return self

    def _check_open(self) -> None:
        if self._closed:
            raise ConfigError(f"this {type(self).__name__} is closed; create a new one (or use default_judge())")


def cache_root_of(cache_dir: str | os.PathLike[str] | None) -> Path:
    """The cudagym cache folder a judge uses: ``cache_dir``, else the user's (:func:`cudagym.paths.user_cache_dir`)."""
    from cudagym.paths import user_cache_dir

    return Path(cache_dir) if cache_dir is not None else user_cache_dir()
