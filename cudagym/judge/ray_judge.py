"""RayJudge: the same pipeline, with builds as Ray CPU tasks and GPU jobs on Ray actors (``num_gpus=1``).

``pip install "cudagym[ray]"``. The pipeline (journal, baselines, fair dispatch, stamps) runs in the driver,
as in :class:`~cudagym.judge.local.LocalJudge`; only the two services differ:

- :class:`RayBuilds`: each build is a Ray task (``num_cpus=1``) on any node, with that node's build cache;
  the driver remembers finished builds by content.
- :class:`RayGpus`: one actor per GPU, each running the same code as a local judge on its own GPU (a
  :class:`~cudagym.judge.local.LocalGpus`: one sandboxed worker pool, spare workers, recycling). A job
  crosses as a :class:`~cudagym.judge.job.JobSpec`: the actor resolves the artifact key in its own node's
  build cache (building on a miss), so no path of another host is ever used.
- Baselines: the driver's :class:`~cudagym.judge.baselines.BaselineCache` (a folder on the driver's host) is
  the one cache of the cluster; jobs carry the known times as values.
- Failures: actors restart (``max_restarts``); a job whose actor died is run once more on the restarted
  actor, and a second death is its ``CRASHED`` verdict. A job that poisoned the CUDA context is a verdict
  like any other (the actor's pool has already replaced that worker process): it is never run again.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from cudagym.errors import ConfigError
from cudagym.judge.baselines import BaselineCache
from cudagym.judge.gpus import GpuProbe
from cudagym.judge.job import JobSpec
from cudagym.judge.pipeline import BuildService, GpuService, Pipeline, PipelineJudge, cache_root_of, done_future
from cudagym.judge.protocol import Protocol
from cudagym.judge.records import BuildResult, BuildStatus, EvalResult, EvalStatus, Hardware
from cudagym.judge.worker import PoolOptions
from cudagym.solution import Solution
from cudagym.task import Task

log = logging.getLogger(__name__)

DEFAULT_BUILD_FN = "cudagym.judge.build:build"
RESTART_WAIT_S = 300.0  # how long a restarting actor may take (it imports torch, starts its workers)
INSTALL_HINT = 'RayJudge needs Ray: pip install "cudagym[ray]" (or pip install ray)'


def require_ray() -> Any:
    """The ``ray`` module, or a ConfigError that says how to install it."""
    try:
        import ray
    except ModuleNotFoundError as exc:
        raise ConfigError(INSTALL_HINT) from exc
    return ray


def _connect(ray: Any, address: str | None) -> None:
    if not ray.is_initialized():
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)


# ----------------------------------------------------------------------------------------------------
# Builds as CPU tasks
# ----------------------------------------------------------------------------------------------------

def _build_on_node(task: Task, solution: Solution, protocol: Protocol, build_fn: Any, cache_dir: str | None) -> Any:
    """A Ray task: build on this node with its build cache."""
    from cudagym.judge.local import LocalBuilds

    builds = LocalBuilds(build_fn, cache_root_of(cache_dir), workers=1)
    try:
        return builds.build(task, solution, protocol).result()
    finally:
        builds.close()


class RayBuilds(BuildService):
    """Each build a Ray task of one CPU; finished builds remembered in the driver by content."""

    def __init__(self, build_fn: Any, cache_dir: str | None) -> None:
        ray = require_ray()
        self._task = ray.remote(num_cpus=1)(_build_on_node)
        self.build_fn = build_fn
        self.cache_dir = cache_dir
        self._lock = threading.Lock()
        self._memo: dict[tuple[str, ...], BuildResult] = {}
        self._inflight: dict[tuple[str, ...], Future[BuildResult]] = {}

    def build(self, task: Task, solution: Solution, protocol: Protocol) -> Future[BuildResult]:
        """Start a build task (or answer from the memo)."""
        key = (task.content_hash, solution.content_hash, protocol.id)
        with self._lock:
            if key in self._memo:
                return done_future(self._memo[key])
            if key in self._inflight:
                return self._inflight[key]
            out: Future[BuildResult] = Future()
            self._inflight[key] = out
        ref = self._task.remote(task, solution, protocol, self.build_fn, self.cache_dir)
        ref.future().add_done_callback(lambda f: self._finished(key, solution, f, out))
        return out

    def _finished(self, key: tuple[str, ...], solution: Solution, f: Future[Any], out: Future[BuildResult]) -> None:
        problem = f.exception()
        result = f.result() if problem is None else BuildResult(
            BuildStatus.TOOL_ERROR, solution.format, message=f"the Ray build task failed: {problem!r}")
        with self._lock:
            self._inflight.pop(key, None)
            if result.status not in (BuildStatus.TOOL_ERROR, BuildStatus.TIMEOUT):
                self._memo[key] = result
        out.set_result(result)


# ----------------------------------------------------------------------------------------------------
# GPU actors
# ----------------------------------------------------------------------------------------------------

class GpuActor:
    """Runs on a Ray actor: a local GPU service over the actor's GPU(s) and this node's build cache."""

    def __init__(self, options: PoolOptions, build_fn: Any, cache_dir: str | None, given: GpuProbe | None) -> None:
        import ray

        from cudagym.judge.local import LocalBuilds, LocalGpus

        devices = [str(d) for d in ray.get_gpu_ids()] if given is None else list(given.device_ids)
        self.builds = LocalBuilds(build_fn, cache_root_of(cache_dir), workers=1)
        self.gpus = LocalGpus(devices or "none", options, self.builds, given)

    def probe(self) -> GpuProbe:
        """This actor's GPUs."""
        return self.gpus.probe()

    def run(self, spec: JobSpec) -> EvalResult:
        """Run one job to its verdict."""
        return self.gpus.run(spec).result()

    def pid(self) -> int:
        """The actor's process id (tests kill it to check restarts)."""
        return os.getpid()


class RayGpus(GpuService):
    """One Ray actor per GPU (``num_gpus=gpus_per_actor``), restarted when it dies.

    Args:
        actors: How many actors (default: the cluster's GPUs).
        gpus_per_actor: GPUs each actor reserves (1; 0 for CPU tests with a stand-in job function).
        options: The actors' worker settings.
        build_fn: The build stage each actor resolves artifacts with.
        cache_dir: Each node's cudagym cache folder (default: the node user's).
        gpus: A known probe for every actor (tests fake a GPU with it).
        max_restarts: Restarts of a dead actor.
    """

    def __init__(self, actors: int | None, gpus_per_actor: float, options: PoolOptions, build_fn: Any,
                 cache_dir: str | None, gpus: GpuProbe | None = None, max_restarts: int = 3) -> None:
        ray = require_ray()
        self.ray = ray
        count = actors if actors is not None else int(ray.cluster_resources().get("GPU", 0) // max(gpus_per_actor, 1))
        remote = ray.remote(num_gpus=gpus_per_actor, num_cpus=1, max_restarts=max_restarts, max_task_retries=0,
                            max_concurrency=4)(GpuActor)
        self.actors = [remote.remote(options, build_fn, cache_dir, gpus) for _ in range(count)]
        self._probe: GpuProbe | None = None
        self._lock = threading.Lock()
        self._turn = itertools.count()

    def probe(self) -> GpuProbe:
        """The first actor's GPU, standing for all (one kind of GPU per cluster is assumed)."""
        with self._lock:
            if self._probe is None:
                if not self.actors:
                    self._probe = GpuProbe((), Hardware(), "the Ray cluster has no GPU (ray.cluster_resources())")
                else:
                    first = self.ray.get(self.actors[0].probe.remote())
                    ids = tuple(str(i) for i in range(len(self.actors))) if first.device_ids else ()
                    self._probe = GpuProbe(ids, first.hardware, first.message)
            return self._probe

    def known_hardware(self) -> Hardware:
        """The hardware if already probed."""
        return self._probe.hardware if self._probe is not None else Hardware()

    def run(self, spec: JobSpec) -> Future[EvalResult]:
        """Run on the next actor; an actor that dies gets the job once more after its restart."""
        out: Future[EvalResult] = Future()
        out.set_running_or_notify_cancel()
        self._attempt(spec, next(self._turn) % len(self.actors), 1, out)
        return out

    def _attempt(self, spec: JobSpec, index: int, tries_left: int, out: Future[EvalResult]) -> None:
        ref = self.actors[index].run.remote(spec)
        ref.future().add_done_callback(lambda f: self._answered(spec, index, tries_left, f, out))

    def _answered(self, spec: JobSpec, index: int, tries_left: int, f: Future[Any], out: Future[EvalResult]) -> None:
        problem = f.exception()
        if problem is None:
            out.set_result(f.result())  # poisoned-context verdicts included: never run again
            return
        dead = isinstance(problem, self.ray.exceptions.RayActorError)
        if dead and tries_left > 0:
            log.warning("GPU actor %d died during job %s; running it once more after the restart", index, spec.job_id)
            threading.Thread(target=self._rerun_when_back, args=(spec, index, tries_left - 1, out), daemon=True,
                             name="cudagym-ray-rerun").start()
            return
        status = EvalStatus.CRASHED if dead else EvalStatus.INFRA_ERROR
        why = "the GPU actor died twice running this job" if dead else f"the GPU actor failed: {problem!r}"
        out.set_result(EvalResult(status, why, build=spec.build, protocol_id=spec.protocol.id))

    def _rerun_when_back(self, spec: JobSpec, index: int, tries_left: int, out: Future[EvalResult]) -> None:
        """Wait until the restarted actor answers (a call to a restarting actor fails at once), then re-run."""
        deadline = time.monotonic() + RESTART_WAIT_S
        while time.monotonic() < deadline:
            try:
                self.ray.get(self.actors[index].pid.remote(), timeout=30)
                break
            except Exception:  # still restarting (or gone for good: the re-run below then reports it)
                time.sleep(1.0)
        self._attempt(spec, index, tries_left, out)

    def close(self) -> None:
        """Stop the actors (their worker pools die with them)."""
        for actor in self.actors:
            try:
                self.ray.kill(actor, no_restart=True)
            except Exception:  # an actor already gone
                log.debug("could not kill a GPU actor", exc_info=True)
        self.actors = []


# ----------------------------------------------------------------------------------------------------
# The judge
# ----------------------------------------------------------------------------------------------------

def ray_pipeline(
    *,
    address: str | None = None,
    actors: int | None = None,
    gpus_per_actor: float = 1,
    build_fn: Any = DEFAULT_BUILD_FN,
    job_fn: str | None = None,
    pool_options: PoolOptions | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    gpus: GpuProbe | None = None,
    max_restarts: int = 3,
    max_queued_per_env: int = 8,
) -> Pipeline:
    """The pipeline of a :class:`RayJudge` (arguments as there)."""
    ray = require_ray()
    _connect(ray, address)
    options = pool_options or PoolOptions()
    if job_fn is not None:
        options = dataclasses.replace(options, job_fn=job_fn)
    folder = str(cache_dir) if cache_dir is not None else None
    services = RayBuilds(build_fn, folder), RayGpus(actors, gpus_per_actor, options, build_fn, folder, gpus,
                                                    max_restarts)
    return Pipeline(*services, BaselineCache(Path(cache_root_of(folder)) / "baselines"),
                    max_queued_per_env=max_queued_per_env)


class RayJudge(PipelineJudge):
    """The judging pipeline on a Ray cluster: builds as CPU tasks, one GPU actor per GPU.

    Args:
        protocol: Protocol name, id or record.
        journal: A JSONL journal path (see :class:`~cudagym.judge.pipeline.PipelineJudge`).
        address: ``ray.init`` address when Ray is not initialised yet (None: a running cluster or a local one).
        actors: GPU actors (default: the cluster's GPU count).
        gpus_per_actor: GPUs each actor reserves (1).
        build_fn: The build stage (``module:function`` or a callable Ray can ship).
        job_fn: ``module:function`` the workers run per job (the harness by default).
        pool_options: Worker settings of every actor's pool.
        cache_dir: The cudagym cache folder on each node (default: the user's on that node).
        gpus: A known probe for every actor (skips probing; tests fake a GPU with it).
        max_restarts: Restarts of a dead actor.
        max_queued_per_env: Unfinished jobs one handle may have before ``submit`` waits.

    Raises:
        ConfigError: Ray is not installed (the message says how to install it).
    """

    def __init__(self, protocol: str | Protocol | None = None, *, journal: Any = None,
                 _pipeline: Pipeline | None = None, **options: Any) -> None:
        super().__init__(protocol, _pipeline or ray_pipeline(**options), journal)

    def __enter__(self) -> RayJudge:
        return self
