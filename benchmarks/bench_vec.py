"""The vector env's own time: 64 sub-envs doing file tools and compiles against a test judge on CPU.

``gym.make_vec(id, num_envs=64)`` (the threaded vector env, one shared pipeline) over a pipeline whose build
service sleeps ``BUILD_S`` per build (a stand-in for nvcc, on a pool as wide as the envs). Each vector step,
a quarter of the sub-envs compile (a new solution each time, so no memo hit) and the rest run file tools.
The env machinery's own time is the wall time of a vector step minus the longest build that step waited
for; the target is <= 5% of wall time.

Run: ``pytest benchmarks/bench_vec.py --benchmark-columns=median,rounds -s`` (the fraction is printed and
kept in the benchmark's ``extra_info``, with each step's median and max: on a shared machine the total
swings with other processes' load, the median much less).

Where the time went (2-core CPU, per vector step of about 255 ms): almost all of the env's own time is
before the last build starts. With one thread per sub-env and one GIL, the 48 file-tool steps (0.1-0.3
ms each) ran interleaved with the 16 compiles' parse, snapshot and hand-off, so the last build started
20-40 ms into the step (10-13% of wall). The vector env now starts the judge-bound sub-envs first and
the file tools once those have handed off; in a steady step the last build starts about 3 ms in (16
hand-offs of about 0.17 ms), and results, rendering and info batching after the builds add about 1 ms.
The first step also starts the build pool's threads; a loaded machine's stalls add whole milliseconds.

On the H200 host (evaluations per GPU-hour through ``make_vec`` with 16 sub-envs, LocalJudge vs RayJudge):
``CUDAGYM_BENCH_GPU=1 pytest benchmarks/bench_vec.py -k gpu -s``.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from conftest_env import TOKENIZER, small_kernelbench  # noqa: E402
from judge_stubs import StubGpus  # noqa: E402

import cudagym  # noqa: E402, F401 - registers the ids
from cudagym.judge import split  # noqa: E402
from cudagym.judge.baselines import BaselineCache  # noqa: E402
from cudagym.judge.harness import claims, runner  # noqa: E402
from cudagym.judge.pipeline import BuildService, Pipeline, PipelineJudge  # noqa: E402
from cudagym.judge.protocol import Protocol  # noqa: E402
from cudagym.judge.records import BuildResult, BuildStatus  # noqa: E402
from cudagym.judge.split import runner as split_runner  # noqa: E402
from cudagym.solution import Solution  # noqa: E402
from cudagym.task import Task  # noqa: E402

NUM_ENVS = 64
BUILD_S = 0.25
STEPS = 24


class SleepingBuilds(BuildService):
    """Each build sleeps ``BUILD_S``; records how long the builds of the current step took."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(NUM_ENVS)
        self.lock = threading.Lock()
        self.longest = 0.0

    def build(self, task: Task, solution: Solution, protocol: Protocol) -> Future[BuildResult]:
        return self.pool.submit(self._build, solution)

    def _build(self, solution: Solution) -> BuildResult:
        started = time.perf_counter()
        time.sleep(BUILD_S)
        with self.lock:
            self.longest = max(self.longest, time.perf_counter() - started)
        return BuildResult(BuildStatus.OK, solution.format, artifact_key=solution.content_hash[:16])

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def action(env: int, step: int) -> str:
    if (env + step) % 4 == 0:
        return '{"name": "compile"}'
    if (env + step) % 4 == 1:
        body = f"# env {env} step {step}\\nimport torch\\n" + "x = 1\\n" * 40
        return f'{{"name": "write_file", "arguments": {{"path": "model_new.py", "content": "{body}"}}}}'
    if (env + step) % 4 == 2:
        return '{"name": "read_file", "arguments": {"path": "model.py"}}'
    return '{"name": "list_files"}'


def run_steps(venv: gym.vector.VectorEnv, builds: SleepingBuilds) -> tuple[float, float, list[float]]:
    """Total wall time of the steps, the part of it spent waiting for the longest build of each step, and
    each step's machinery fraction (the spread shows how much a loaded machine's stalls weigh)."""
    wall = waited = 0.0
    fractions = []
    for step in range(STEPS):
        builds.longest = 0.0
        started = time.perf_counter()
        venv.step([action(i, step) for i in range(NUM_ENVS)])
        took = time.perf_counter() - started
        wall += took
        waited += builds.longest
        fractions.append((took - builds.longest) / took)
    return wall, waited, fractions


def test_vector_env_machinery_time_with_64_sub_envs(benchmark, tmp_path):
    tree = small_kernelbench(tmp_path / "kb")
    builds = SleepingBuilds()
    judge = PipelineJudge("cudagym", Pipeline(builds, StubGpus(devices=0), BaselineCache(tmp_path / "baselines"),
                                              max_queued_per_env=4))
    venv = gym.make_vec("CudaKernel-L1-v0", num_envs=NUM_ENVS, judge=judge, token_counter=TOKENIZER,
                        suite_options={"root": str(tree)}, max_episode_steps=10_000)
    venv.reset(seed=0)
    wall, waited, fractions = benchmark.pedantic(run_steps, args=(venv, builds), rounds=1, iterations=1)
    venv.close()
    judge.close()
    fraction = (wall - waited) / wall
    median = statistics.median(fractions)
    benchmark.extra_info.update(num_envs=NUM_ENVS, steps=STEPS, build_s=BUILD_S, wall_s=wall, waited_s=waited,
                                machinery_fraction=fraction, step_fraction_median=median,
                                step_fraction_max=max(fractions))
    print(f"\n{NUM_ENVS} sub-envs, {STEPS} steps: wall {wall:.2f} s, builds {waited:.2f} s, env machinery "
          f"{wall - waited:.2f} s = {fraction:.1%} of wall (target <= 5%); per step: median {median:.1%}, "
          f"max {max(fractions):.1%}; load average {os.getloadavg()[0]:.2f}")


# ---------------------------------------------------------------------------------------------- on a GPU

GPU = os.environ.get("CUDAGYM_BENCH_GPU") == "1"
L1 = ["bundled/L1/01_Swish", "bundled/L1/05_Softmax", "bundled/L1/09_DiagMatmul"]
GPU_ENVS = 16
GPU_SECONDS = float(os.environ.get("CUDAGYM_BENCH_SECONDS", "120"))


def need_gpu() -> None:
    """Skip, saying why, where ``CUDAGYM_BENCH_GPU=1`` was set on a host without a CUDA GPU."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("CUDAGYM_BENCH_GPU=1, but this host has no CUDA GPU (torch.cuda.is_available() is False)")


def evaluations_per_gpu_hour(judge: Any, protocol: str | None = None) -> tuple[float, int]:
    """16 sub-envs of ``make_vec`` write their task's reference solution, then ``profile`` every step (under
    ``protocol``, else the judge's own)."""
    from cudagym.sources.bundled import BundledSource

    source = BundledSource()
    venv = gym.make_vec("CudaKernel-Bundled-v0", num_envs=GPU_ENVS, judge=judge, tasks=L1, protocol=protocol,
                        max_episode_steps=1_000_000, max_turns=1_000_000, token_budget=1 << 30)
    venv.reset(seed=0)
    subenvs = venv.unwrapped.envs
    files = [dict(source.solution(env.unwrapped.task.id).files) for env in subenvs]
    for k in range(max(len(f) for f in files)):  # one file per sub-env per step
        venv.step([_write(f, k) for f in files])
    profile = json.dumps({"name": "profile"})
    venv.step([profile] * GPU_ENVS)  # builds and baselines cached before the clock starts
    gpus = max(1, len(judge.workers()))
    lanes_before = _lanes(judge)
    done, started, parts = 0, time.perf_counter(), []
    while time.perf_counter() - started < GPU_SECONDS:
        *_, info = venv.step([profile] * GPU_ENVS)
        done += sum(1 for status in info["last_eval"]["status"] if status == "ok")  # correct verdicts only
        parts += job_parts(info["last_eval"])
    elapsed = time.perf_counter() - started
    lanes = _lanes(judge)
    venv.close()
    print(f"\n{type(judge).__name__}: {describe_parts(parts, elapsed, gpus)}")
    print(f"{type(judge).__name__}: {describe_requests(parts)}")
    print(f"{type(judge).__name__}: {describe_lanes(lanes_before, lanes, elapsed, parts)}")
    print(f"{type(judge).__name__}: {done} correct verdicts in {elapsed:.1f} s of steps on {gpus} GPU(s) (the steps "
          f"began in the first {GPU_SECONDS:.0f} s)")
    return done / elapsed * 3600 / gpus, done


def _lanes(judge: Any) -> tuple[float, int, float, float]:
    """Busy seconds, jobs, callback and teardown seconds summed over the judge's GPU lanes (zeros where it
    cannot tell)."""
    infos = judge.workers()
    return (sum(w.busy_s for w in infos), sum(w.lane_jobs for w in infos), sum(w.callbacks_s for w in infos),
            sum(w.teardown_s for w in infos))


def describe_lanes(before: tuple[float, int, float, float], after: tuple[float, int, float, float],
                   elapsed_s: float, parts: list[dict[str, float]]) -> str:
    """Where the lanes' time went over the run: on jobs at all, inside the harness, after the verdict (the
    runner's teardown), handing results on."""
    busy, jobs, callbacks, teardown = (a - b for a, b in zip(after, before, strict=True))
    if not jobs:
        return "lane accounting not available from this judge"
    wall = sum(p["wall"] for p in parts)
    return (f"lanes busy {busy:.1f} s of {elapsed_s:.1f} s ({busy / elapsed_s:.1%}) on {jobs:.0f} jobs: "
            f"{busy / jobs:.3f} s per job, of it harness wall {wall / max(1, len(parts)):.3f} s (mean over the "
            f"correct verdicts), runner teardown {teardown / jobs:.3f} s, result callbacks {callbacks / jobs:.3f} s")


LOAD_NOTE = re.compile(re.escape(runner.LOAD_NOTE).replace(re.escape("{:.2f}"), r"([\d.]+)"))
PARTS = ("wall", "load", "check", "timing", "profile", "primed", "runner ready", "calibration", "yardstick",
         "candidate load", "runner start")
RUNNER_START = re.compile(re.escape(split_runner.START_STAGE) + r" ([\d.]+) s")  # in the runner's own account
# the harness's note of what each kind of request cost the judge
REQUEST_KINDS = ("calibrate", "reference_warm", "reference", "reference_batch", "timed")
WARM_NOTE = re.compile(re.escape(runner.REFERENCE_WARM_NOTE)
                       + r": .* built there in ([\d.]+) ms, its calls ([\d.]+) ms")
REQUEST = re.compile(r"(\w+) \d+ x ([\d.]+) ms")
REQUESTS_ALL = re.compile(r"(\w+) \d+ x [\d.]+ ms(?: \([^)]*\))? \[first ([\d.]+) ms, all ([\d.]+) ms\]")
PART = re.compile(r"([a-zA-Z][a-zA-Z ]*?) ([\d.]+)$")  # one "name 0.123" of the parts note


def request_parts(note: str) -> dict[str, float]:
    """``{"timed here reply wait ms": 1.2, "timed runner GPU wait ms": 0.9, ...}`` from the harness's parts note."""
    out: dict[str, float] = {}
    body = note.split("): ", 1)[-1]
    for account in body.split(" | "):
        kind, _, rest = account.partition(": ")
        if kind not in REQUEST_KINDS:
            continue
        for side in rest.split("; "):
            who = "runner" if side.startswith("the runner ") else "here"
            for item in side.removeprefix("the runner ").removeprefix("here ").split(", "):
                m = PART.match(item.strip())
                if m:
                    out[f"{kind} {who} {m.group(1)} ms"] = float(m.group(2))
    return out


def job_parts(batch: dict[str, Any]) -> list[dict[str, float]]:
    """Seconds per part of each correct verdict in one vector step's batched ``last_eval`` (where they went)."""
    found = []
    for i, status in enumerate(batch["status"]):
        if status != "ok":
            continue
        cost = batch["cost"]
        part = {"wall": float(batch["wall_time_s"][i])}
        part.update({name: float(cost[f"{name}_s"][i]) for name in ("load", "check", "timing", "profile")})
        for note in batch["notes"][i]:
            m = LOAD_NOTE.search(str(note))
            if m:
                part.update(zip(PARTS[5:10], map(float, m.groups()), strict=True))
                started = RUNNER_START.search(str(note))
                if started:  # how long the runner took to start (birth to ready), where it says
                    part["runner start"] = float(started.group(1))
            if str(note).startswith(claims.REQUESTS_NOTE):  # per kind, milliseconds each (median)
                part.update({f"{kind} request ms": float(ms) for kind, ms in REQUEST.findall(str(note))
                             if kind in REQUEST_KINDS})
                for kind, first, every in REQUESTS_ALL.findall(str(note)):  # the first one, and all of them
                    if kind in REQUEST_KINDS:
                        part.update({f"{kind} first ms": float(first), f"{kind} all ms": float(every)})
            if str(note).startswith(claims.REQUEST_PARTS_NOTE):  # each side's account of a request, part by part
                part.update(request_parts(str(note)))
            warm = WARM_NOTE.search(str(note))
            if warm:  # the runner's account of the reference's warm-up: building it, then its untimed calls
                part.update({"reference built ms": float(warm.group(1)),
                             "reference warm calls ms": float(warm.group(2))})
        found.append(part)
    return found


def describe_requests(parts: list[dict[str, float]]) -> str:
    """Median (and 90th percentile) of what each kind of timed request cost the judge, over the verdicts."""
    cells = _spreads(parts, [(kind, f"{kind} request ms") for kind in REQUEST_KINDS], "ms", 2)
    per_verdict = _spreads(parts, [(f"{kind} {which}", f"{kind} {which} ms") for kind in REQUEST_KINDS
                                   for which in ("first", "all")], "ms", 1)
    per_verdict += _spreads(parts, [(k, f"{k} ms") for k in ("reference built", "reference warm calls")], "ms", 1)
    keys = sorted({k for p in parts for k in p if k.startswith("timed ") and k.endswith(" ms")
                   and (" here " in k or " runner " in k)}, key=_part_order)
    anatomy = _spreads(parts, [(k.removeprefix("timed ").removesuffix(" ms"), k) for k in keys], "ms", 3)
    return ("per timed request, the judge's wall time: " + (", ".join(cells) if cells else "not noted")
            + ("; per verdict, the first request of a kind and all of them: " + ", ".join(per_verdict)
               if per_verdict else "")
            + ("; a timed request part by part: " + ", ".join(anatomy) if anatomy else ""))


def _part_order(key: str) -> tuple[int, int]:
    """The parts in the order they happen: this process's queue and send, the runner's parts, the rest here."""
    name = key.removeprefix("timed ").removesuffix(" ms")
    who, _, part = name.partition(" ")
    names = split.TRUSTED_PHASES if who == "here" else split.RUNNER_PHASES
    rank = names.index(part) if part in names else len(names)
    return (0 if who == "here" and rank == 0 else 1 if who == "runner" else 2, rank)


def _spreads(parts: list[dict[str, float]], keys: list[tuple[str, str]], unit: str, digits: int) -> list[str]:
    """``label median unit (p90 ...)`` for each (label, key) some part has."""
    cells = []
    for label, key in keys:
        xs = sorted(p[key] for p in parts if key in p)
        if xs:
            p90 = xs[int(0.9 * (len(xs) - 1))]
            cells.append(f"{label} {statistics.median(xs):.{digits}f} {unit} (p90 {p90:.{digits}f})")
    return cells


def describe_parts(parts: list[dict[str, float]], elapsed_s: float, gpus: int) -> str:
    """Median (and 90th percentile) seconds per part, beside the seconds of GPU time each verdict had."""
    if not parts:
        return "no correct verdict"
    per_verdict = elapsed_s * gpus / len(parts)
    cells = _spreads(parts, [(name, name) for name in PARTS], "s", 3)
    return f"{len(parts)} verdicts, {per_verdict:.3f} s of GPU time each; per verdict: " + ", ".join(cells)


def _write(files: dict[str, str], k: int) -> str:
    items = sorted(files.items())
    if k >= len(items):
        return json.dumps({"name": "list_files"})
    path, content = items[k]
    return json.dumps({"name": "write_file", "arguments": {"path": path, "content": content}})


@pytest.mark.skipif(not GPU, reason="set CUDAGYM_BENCH_GPU=1 on a GPU host")
def test_gpu_evaluations_per_hour_local_vs_ray(benchmark):
    need_gpu()
    from cudagym.judge.local import LocalJudge

    with LocalJudge() as local:
        local_rate, local_n = benchmark.pedantic(evaluations_per_gpu_hour, args=(local,), rounds=1, iterations=1)
    print(f"\nLocalJudge: {local_rate:,.0f} evaluations per GPU-hour ({local_n} verdicts, 16 clients)")
    ray = pytest.importorskip("ray")
    from cudagym.judge.ray_judge import RayJudge

    ray.init(include_dashboard=False)
    with RayJudge() as remote:
        ray_rate, ray_n = evaluations_per_gpu_hour(remote)
    ray.shutdown()
    print(f"RayJudge: {ray_rate:,.0f} evaluations per GPU-hour ({ray_n}); Ray / local = {ray_rate / local_rate:.3f}")
    benchmark.extra_info.update(local_per_gpu_hour=local_rate, ray_per_gpu_hour=ray_rate,
                                ray_over_local=ray_rate / local_rate)


SPARES = [int(n) for n in os.environ.get("CUDAGYM_BENCH_SPARES", "").split(",") if n.strip()]


@pytest.mark.skipif(not (GPU and SPARES), reason="set CUDAGYM_BENCH_GPU=1 and CUDAGYM_BENCH_SPARES=8,12 on a GPU host")
def test_gpu_evaluations_per_hour_by_spare_runners(benchmark):
    """LocalJudge with each count of spare runners per GPU in turn, in one run: the rate, and the runners' supply."""
    need_gpu()
    from cudagym.judge.local import LocalJudge
    from cudagym.judge.worker import PoolOptions

    rates = {}
    for spares in SPARES:
        with LocalJudge(pool_options=PoolOptions(spare_runners=spares)) as judge:
            rates[spares] = evaluations_per_gpu_hour(judge)[0]
        print(f"{spares} spare runners: {rates[spares]:,.0f} evaluations per GPU-hour")
    first = rates[SPARES[0]]
    print("by spare runners: " + ", ".join(f"{n}: {r:,.0f} ({r / first:.3f}x)" for n, r in rates.items()))
    benchmark.extra_info.update({f"spares_{n}_per_gpu_hour": r for n, r in rates.items()})
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)


PROTOCOLS = [p.strip() for p in os.environ.get("CUDAGYM_BENCH_PROTOCOLS", "").split(";") if p.strip()]


@pytest.mark.skipif(not (GPU and PROTOCOLS), reason="set CUDAGYM_BENCH_GPU=1 and CUDAGYM_BENCH_PROTOCOLS="
                    "'cudagym[yardstick=retimed];cudagym' on a GPU host")
def test_gpu_evaluations_per_hour_by_protocol(benchmark):
    """LocalJudge under each protocol in turn, in one run (e.g. the yardstick timed in every job against taken
    from the baseline cache): the rate and where each job's time went."""
    need_gpu()
    from cudagym.judge.local import LocalJudge

    rates = {}
    for protocol in PROTOCOLS:
        with LocalJudge(protocol) as judge:  # the env takes the judge's protocol
            rates[protocol] = evaluations_per_gpu_hour(judge)[0]
        print(f"{protocol}: {rates[protocol]:,.0f} evaluations per GPU-hour")
    first = rates[PROTOCOLS[0]]
    print("by protocol: " + ", ".join(f"{p}: {r:,.0f} ({r / first:.3f}x)" for p, r in rates.items()))
    benchmark.extra_info.update({f"{p}_per_gpu_hour": r for p, r in rates.items()})
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
