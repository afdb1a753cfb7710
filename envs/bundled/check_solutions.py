"""Build every bundled reference solution and check it on a GPU, without the judge.

Run on the GPU host from the repository root (about 2-3 minutes of builds on 16 cores, then ~5 s per task)::

    python envs/bundled/check_solutions.py --build-dir /tmp/bundled-build --out bundled_check.json

For every task under ``envs/bundled/tasks``: build ``solutions/<level>/<name>`` as a torch extension (the
protected ``binding.cpp`` + ``kernels/*.cu`` + ``kernels/*.cpp``, ``TORCH_CUDA_ARCH_LIST=9.0``, one module name
per task, builds in parallel processes), check ``ModelNew`` against ``Model`` on three seeds at
atol=rtol=1e-4 with TF32 off, and time eager PyTorch, the solution and ``torch.compile`` with CUDA events
(warm-up, L2 flush before every run, median). GPU work runs in a worker subprocess that is restarted after a
crash, a hang or a sticky CUDA error, so one broken task never stops the rest. The JSON at ``--out`` is
rewritten after every task (a run cut short keeps what it measured); the table is printed at the end.
torch.compile comes last: the references are compiled in parallel processes (filling Inductor's on-disk
caches), then timed one by one, while the time budget lasts. Inputs are drawn on the GPU by default (the
same distributions, much faster than drawing 256 MB on the CPU); ``--cpu-inputs`` draws them on the CPU and
moves them, as the judge does.

This is a data-folder script for maintainers, not part of the package API; the judge has its own harness.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
LOG = logging.getLogger("check_solutions")
STICKY_EXIT = 3  # the worker's exit code after an error that poisons the CUDA context


@dataclass
class TaskResult:
    """Everything measured for one task; times in milliseconds, None when not measured."""

    id: str
    build_ok: bool = False
    build_s: float | None = None
    build_error: str = ""
    ok: bool = False
    max_abs_err: float | None = None
    error: str = ""
    eager_ms: float | None = None
    cand_ms: float | None = None
    compile_ms: float | None = None
    compile_error: str = ""
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    eager_in_range: bool | None = None
    notes: list[str] = field(default_factory=list)


def template_dir() -> Path:
    """The protected extension files (binding.cpp, binding_registry.h), from the package or the repository."""
    try:
        from importlib.resources import files

        return Path(str(files("cudagym.templates").joinpath("extension")))
    except (ImportError, ModuleNotFoundError):
        return HERE.parents[1] / "cudagym" / "templates" / "extension"


def discover(selectors: list[str]) -> list[str]:
    """Task ids like ``L1/01_Swish`` that have a solution folder, filtered by substrings if given."""
    ids = []
    for path in sorted((HERE / "tasks").glob("L*/*.py")):
        tid = f"{path.parent.name}/{path.stem}"
        if (HERE / "solutions" / tid / "model_new.py").is_file():
            ids.append(tid)
        else:
            LOG.warning("%s has no solution folder; skipped", tid)
    if selectors:
        ids = [t for t in ids if any(s in t for s in selectors)]
    return ids


def module_name(tid: str) -> str:
    """A unique extension name per task (pybind11 caches modules by name within a process)."""
    return "bundled_" + "".join(ch if ch.isalnum() else "_" for ch in tid)


def build_one(tid: str, build_dir: str, templates: str) -> dict[str, Any]:
    """Build one solution with torch.utils.cpp_extension.load (runs in a pool process)."""
    os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0"
    os.environ.setdefault("MAX_JOBS", "4")
    start = time.perf_counter()
    try:
        from torch.utils.cpp_extension import load

        kernels = HERE / "solutions" / tid / "kernels"
        sources = [str(Path(templates) / "binding.cpp")]
        sources += [str(p) for p in sorted(kernels.glob("*.cu"))] + [str(p) for p in sorted(kernels.glob("*.cpp"))]
        name = module_name(tid)
        out = Path(build_dir) / name
        out.mkdir(parents=True, exist_ok=True)
        load(name=name, sources=sources, extra_include_paths=[templates, str(kernels)],
             extra_cflags=["-O3", "-std=c++17"], extra_cuda_cflags=["-O3", "-std=c++17"],
             build_directory=str(out), verbose=False)
        return {"id": tid, "ok": True, "seconds": time.perf_counter() - start, "error": ""}
    except Exception as exc:  # a broken solution is a result, not a crash of the checker
        return {"id": tid, "ok": False, "seconds": time.perf_counter() - start, "error": f"{exc}"[-3000:]}


def build_all(ids: list[str], build_dir: Path, jobs: int, results: dict[str, TaskResult]) -> None:
    """Build every solution in parallel processes; record build status and time in ``results``."""
    templates = str(template_dir())
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
        futures = [pool.submit(build_one, tid, str(build_dir), templates) for tid in ids]
        for fut in as_completed(futures):
            got = fut.result()
            res = results[got["id"]]
            res.build_ok, res.build_s, res.build_error = got["ok"], round(got["seconds"], 1), got["error"]
            LOG.info("build %-40s %s (%.0f s)", got["id"], "ok" if got["ok"] else "FAILED", got["seconds"])
            if not got["ok"]:
                LOG.info("  %s", got["error"][-800:])


# ---------------------------------------------------------------------------------------------------------
# worker side: runs in a fresh subprocess, owns the CUDA context


def load_task(tid: str) -> dict[str, Any]:
    """Execute a task file and return its namespace (Model, get_inputs, get_init_inputs)."""
    path = HERE / "tasks" / f"{tid}.py"
    ns: dict[str, Any] = {"__name__": f"bundled_task_{module_name(tid)}"}
    exec(compile(path.read_text(), str(path), "exec"), ns)
    return ns


def load_model_new(tid: str, build_dir: Path) -> type:
    """Import the built extension as ``cuda_extension`` and return the solution's ModelNew class."""
    import importlib.util

    name = module_name(tid)
    spec = importlib.util.spec_from_file_location(name, build_dir / name / f"{name}.so")
    if spec is None or spec.loader is None:
        raise ImportError(f"no built module at {build_dir / name}")
    ext = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ext)
    sys.modules["cuda_extension"] = ext
    path = HERE / "solutions" / tid / "model_new.py"
    ns: dict[str, Any] = {"__name__": f"bundled_solution_{name}"}
    exec(compile(path.read_text(), str(path), "exec"), ns)
    return ns["ModelNew"]


class Timer:
    """CUDA-event timing of one callable: warm-up, then an L2 flush before every timed run; median in ms."""

    def __init__(self, warmup: int, runs: int) -> None:
        import torch

        self.warmup, self.runs = warmup, runs
        l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size or 64 * 2**20
        self.flush = torch.empty(2 * l2_bytes, dtype=torch.uint8, device="cuda")  # twice the L2

    def median_ms(self, fn: Any, inputs: list[Any]) -> float:
        """Median wall time of ``fn(*inputs)`` on the device, in milliseconds."""
        import torch

        with torch.no_grad():
            for _ in range(self.warmup):
                fn(*inputs)
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            times = []
            for _ in range(self.runs):
                self.flush.zero_()  # evict the inputs from L2 so every run reads them from HBM
                start.record()
                fn(*inputs)
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
        return statistics.median(times)


def make_inputs(ns: dict[str, Any], seed: int, on_gpu: bool) -> list[Any]:
    """The task's inputs for ``seed`` on the GPU: drawn there directly (fast) or on the CPU and moved."""
    import torch

    torch.manual_seed(seed)
    if on_gpu:
        with torch.device("cuda"):
            raw = ns["get_inputs"]()
    else:
        raw = ns["get_inputs"]()
    return [t.cuda() if isinstance(t, torch.Tensor) else t for t in raw]


def make_model(ns: dict[str, Any], cls: type, seed: int) -> Any:
    """``cls(*get_init_inputs())`` built under ``seed`` on the CPU (as the harness does), then moved."""
    import torch

    torch.manual_seed(seed)
    return cls(*ns["get_init_inputs"]()).cuda().eval()


def check_correctness(tid: str, ns: dict[str, Any], model_new: type, seeds: list[int], atol: float,
                      rtol: float, gpu_inputs: bool) -> tuple[bool, float, str]:
    """Compare ModelNew with Model on each seed; return (all ok, worst max-abs error, first problem)."""
    import torch

    worst, problem = 0.0, ""
    for seed in seeds:
        model = make_model(ns, ns["Model"], seed)
        new = make_model(ns, model_new, seed)
        new.load_state_dict(model.state_dict())
        inputs = make_inputs(ns, 10_000 + seed, gpu_inputs)
        saved = [t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]
        with torch.no_grad():
            ref = model(*inputs)
            out = new(*inputs)
        torch.cuda.synchronize()
        if any(isinstance(a, torch.Tensor) and not torch.equal(a, b) for a, b in zip(inputs, saved, strict=True)):
            problem = problem or f"seed {seed}: the solution modified its inputs"
        if not isinstance(out, torch.Tensor) or out.shape != ref.shape or out.dtype != ref.dtype:
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            return False, float("inf"), f"seed {seed}: expected {tuple(ref.shape)} {ref.dtype}, got {got}"
        diff = (out - ref).abs()
        nan_mismatch = bool((torch.isnan(out) != torch.isnan(ref)).any())
        err = float(diff.nan_to_num(0.0).max()) if diff.numel() else 0.0
        worst = max(worst, err)
        if nan_mismatch or not torch.allclose(out, ref, atol=atol, rtol=rtol, equal_nan=True):
            bad = int(((diff > atol + rtol * ref.abs()) | (torch.isnan(out) != torch.isnan(ref))).sum())
            problem = problem or f"seed {seed}: {bad}/{ref.numel()} elements outside atol=rtol={atol:g}"
        del model, new, inputs, saved, ref, out, diff
    return not problem, worst, problem


def worker_check(tid: str, build_dir: Path, args: argparse.Namespace, timer: Timer) -> dict[str, Any]:
    """Correctness on every seed, then eager and candidate timings on the last seed's inputs."""
    ns = load_task(tid)
    model_new = load_model_new(tid, build_dir)
    seeds = list(range(args.seeds))
    gpu_inputs = not args.cpu_inputs
    ok, worst, problem = check_correctness(tid, ns, model_new, seeds, args.atol, args.rtol, gpu_inputs)
    out: dict[str, Any] = {"ok": ok, "max_abs_err": worst, "error": problem}
    model = make_model(ns, ns["Model"], seeds[-1])
    new = make_model(ns, model_new, seeds[-1])
    new.load_state_dict(model.state_dict())
    inputs = make_inputs(ns, 10_000 + seeds[-1], gpu_inputs)
    out["eager_ms"] = timer.median_ms(model, inputs)
    out["cand_ms"] = timer.median_ms(new, inputs)
    return out


def worker_compile(tid: str, args: argparse.Namespace, timer: Timer) -> dict[str, Any]:
    """torch.compile (default mode) of the reference, timed like the others (the warm phase filled the cache)."""
    import torch

    ns = load_task(tid)
    compiled = torch.compile(make_model(ns, ns["Model"], 0))
    inputs = make_inputs(ns, 10_000, not args.cpu_inputs)
    return {"compile_ms": timer.median_ms(compiled, inputs)}


def warm_compile(tid: str, gpu_inputs: bool) -> str:
    """Compile the reference once in a pool process so the timing pass finds Inductor's on-disk caches warm."""
    try:
        import torch
        import torch._inductor.config as inductor_config

        inductor_config.compile_threads = 2  # several of these run at once
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        ns = load_task(tid)
        compiled = torch.compile(make_model(ns, ns["Model"], 0))
        inputs = make_inputs(ns, 10_000, gpu_inputs)
        with torch.no_grad():
            compiled(*inputs)
        torch.cuda.synchronize()
        del compiled, inputs
        torch.cuda.empty_cache()
        return ""
    except Exception as exc:  # the timing pass reports it
        return f"{type(exc).__name__}: {exc}"[-500:]


def warm_all(ids: list[str], jobs: int, gpu_inputs: bool, until: float) -> None:
    """Run warm_compile for every task in parallel processes, abandoning what is left at ``until``."""
    ctx = multiprocessing.get_context("spawn")
    pool = ctx.Pool(processes=max(1, min(jobs, 8)))
    pending = {tid: pool.apply_async(warm_compile, (tid, gpu_inputs)) for tid in ids}
    pool.close()
    try:
        for tid, res in pending.items():
            remaining = until - time.monotonic()
            if remaining <= 0:
                LOG.warning("warm-up of torch.compile stopped at the time budget")
                break
            try:
                err = res.get(timeout=remaining)
                LOG.info("warm compile %-40s %s", tid, "ok" if not err else err[:120])
            except multiprocessing.TimeoutError:
                LOG.warning("warm-up of torch.compile stopped at the time budget")
                break
    finally:
        pool.terminate()  # nothing may keep the GPU busy once timing starts
        pool.join()


def cuda_context_alive() -> bool:
    """False once an error (illegal address, launch failure) has poisoned the CUDA context."""
    import torch

    try:
        torch.cuda.synchronize()
        torch.zeros(1, device="cuda").add_(1).item()
        return True
    except Exception:
        return False


def worker_main(args: argparse.Namespace) -> int:
    """Run one pass (check or compile) over the job's tasks, appending one JSON line per event."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 baselines: the default protocol's precision
    torch.backends.cudnn.allow_tf32 = False
    job = json.loads(Path(args.job).read_text())
    build_dir = Path(job["build_dir"])
    timer = Timer(args.warmup, args.runs)
    with open(job["results"], "a", encoding="utf-8") as log:
        for tid in job["tasks"]:
            log.write(json.dumps({"event": "start", "id": tid}) + "\n")
            log.flush()
            try:
                got = worker_check(tid, build_dir, args, timer) if job["mode"] == "check" else \
                    worker_compile(tid, args, timer)
            except Exception as exc:
                key = "error" if job["mode"] == "check" else "compile_error"
                got = {key: f"{type(exc).__name__}: {exc}"[-2000:], "traceback": traceback.format_exc()[-3000:]}
            log.write(json.dumps({"event": "done", "id": tid, **got}) + "\n")
            log.flush()
            torch.cuda.empty_cache()
            if not cuda_context_alive():
                return STICKY_EXIT
    return 0


# ---------------------------------------------------------------------------------------------------------
# orchestrator side: no CUDA here


def run_pass(mode: str, ids: list[str], build_dir: Path, work: Path, args: argparse.Namespace,
             deadline: float, on_result: Any) -> None:
    """Run ``ids`` through worker subprocesses, restarting after crashes, hangs and sticky CUDA errors."""
    pending = list(ids)
    attempt = 0
    while pending and time.monotonic() < deadline:
        attempt += 1
        results = work / f"{mode}_{attempt}.jsonl"
        job = work / f"{mode}_{attempt}.json"
        job.write_text(json.dumps({"mode": mode, "tasks": pending, "build_dir": str(build_dir),
                                   "results": str(results)}))
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--job", str(job), "--seeds",
               str(args.seeds), "--runs", str(args.runs), "--warmup", str(args.warmup), "--atol", str(args.atol),
               "--rtol", str(args.rtol), *(["--cpu-inputs"] if args.cpu_inputs else [])]
        stderr_path = work / f"{mode}_{attempt}.stderr"
        with open(stderr_path, "w", encoding="utf-8") as stderr:
            proc = subprocess.Popen(cmd, stderr=stderr)
        current, started, seen, progress = None, time.monotonic(), 0, False
        per_task = args.task_timeout if mode == "check" else args.compile_timeout
        while proc.poll() is None:
            time.sleep(0.5)
            lines = results.read_text().splitlines() if results.exists() else []
            for line in lines[seen:]:
                event = json.loads(line)
                progress = True
                if event["event"] == "start":
                    current, started = event["id"], time.monotonic()
                else:
                    on_result(mode, event)
                    pending.remove(event["id"])
                    current = None
            seen = len(lines)
            now = time.monotonic()
            if (current and now - started > per_task) or now > deadline:
                proc.kill()
                proc.wait()
        lines = results.read_text().splitlines() if results.exists() else []
        for line in lines[seen:]:
            event = json.loads(line)
            progress = True
            if event["event"] == "done":
                on_result(mode, event)
                pending.remove(event["id"])
                current = None
            else:
                current = event["id"]
        if current is None and not progress and pending and proc.returncode != 0:
            current = pending[0]  # the worker died before starting anything: blame the first task, move on
        if current in pending:  # started but never finished: crash, hang or the deadline
            tail = stderr_path.read_text(errors="replace")[-1500:] if stderr_path.exists() else ""
            why = "deadline reached" if time.monotonic() > deadline else f"worker died or hung (exit {proc.returncode})"
            on_result(mode, {"id": current, ("error" if mode == "check" else "compile_error"): f"{why}\n{tail}"})
            pending.remove(current)
    for tid in pending:
        on_result(mode, {"id": tid, ("error" if mode == "check" else "compile_error"): "skipped: time budget"})


def apply_result(results: dict[str, TaskResult], mode: str, event: dict[str, Any]) -> None:
    """Fold one worker event into the task's record and derive the speedups."""
    res = results[event["id"]]
    if mode == "check":
        res.ok = bool(event.get("ok", False))
        res.max_abs_err = event.get("max_abs_err", res.max_abs_err)
        res.error = event.get("error", "")
        res.eager_ms = event.get("eager_ms", res.eager_ms)
        res.cand_ms = event.get("cand_ms", res.cand_ms)
        if "traceback" in event:
            res.notes.append(event["traceback"])
    else:
        res.compile_ms = event.get("compile_ms", res.compile_ms)
        res.compile_error = event.get("compile_error", "")
    if res.eager_ms is not None:
        res.eager_in_range = 0.1 <= res.eager_ms <= 20.0
    if res.cand_ms:
        res.speedup_vs_eager = res.eager_ms / res.cand_ms if res.eager_ms else None
        res.speedup_vs_compile = res.compile_ms / res.cand_ms if res.compile_ms else None
    status = "ok" if res.ok else f"FAIL {res.error[:80]}"
    LOG.info("%s %-40s %s eager=%s cand=%s compile=%s", mode, res.id, status, fmt(res.eager_ms),
             fmt(res.cand_ms), fmt(res.compile_ms))


def environment() -> dict[str, Any]:
    """GPU, driver-side and library versions, for the JSON header (queried in a subprocess: no CUDA here)."""
    code = ("import json, torch; p = torch.cuda.get_device_properties(0); print(json.dumps({'gpu': p.name, "
            "'sm': f'{p.major}.{p.minor}', 'torch': torch.__version__, 'cuda': torch.version.cuda}))")
    try:
        return json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                         timeout=120).stdout)
    except Exception as exc:
        return {"error": str(exc)}


def write_json(path: Path, header: dict[str, Any], results: dict[str, TaskResult]) -> None:
    """Rewrite the JSON report atomically."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps({**header, "tasks": [asdict(r) for r in results.values()]}, indent=1))
    tmp.replace(path)


def fmt(value: float | None, digits: int = 3) -> str:
    """A number for the table, or '-' when missing."""
    return "-" if value is None else f"{value:.{digits}f}"


def print_table(results: dict[str, TaskResult]) -> None:
    """The summary table (CLI output)."""
    head = f"{'id':<34} {'max_abs_err':>11} {'ok':>4} {'eager_ms':>9} {'compile_ms':>10} {'cand_ms':>8} " \
           f"{'vs_eager':>8} {'vs_compile':>10}"
    print(head)
    print("-" * len(head))
    for r in results.values():
        err = "-" if r.max_abs_err is None else f"{r.max_abs_err:.2e}"
        ok = "yes" if r.ok else ("BLD" if not r.build_ok else "NO")
        print(f"{r.id:<34} {err:>11} {ok:>4} {fmt(r.eager_ms):>9} {fmt(r.compile_ms):>10} {fmt(r.cand_ms):>8} "
              f"{fmt(r.speedup_vs_eager, 2):>8} {fmt(r.speedup_vs_compile, 2):>10}")
    ok = sum(r.ok for r in results.values())
    tier2 = sum(bool(r.ok and r.speedup_vs_eager and r.speedup_vs_eager > 1 / 0.95) for r in results.values())
    tier3 = sum(bool(r.ok and r.speedup_vs_eager and r.speedup_vs_compile and r.speedup_vs_eager > 1 / 0.95
                     and r.speedup_vs_compile > 1 / 0.95) for r in results.values())
    print(f"\n{ok}/{len(results)} correct; >5% faster than eager: {tier2}; also than torch.compile: {tier3}")
    for r in results.values():
        if r.build_error or r.error or r.compile_error:
            print(f"\n{r.id}: {(r.build_error or r.error or r.compile_error)[-600:]}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build-dir", type=Path, default=Path("/tmp/cudagym-bundled-build"),
                   help="where the extension builds go (reused when up to date)")
    p.add_argument("--out", type=Path, default=Path("bundled_check.json"), help="JSON report path")
    p.add_argument("--tasks", nargs="*", default=[], help="only task ids containing one of these substrings")
    p.add_argument("--jobs", type=int, default=max(1, min(12, (os.cpu_count() or 2) // 2)), help="parallel builds")
    p.add_argument("--seeds", type=int, default=3, help="correctness seeds per task")
    p.add_argument("--runs", type=int, default=50, help="timed runs per measurement (median)")
    p.add_argument("--warmup", type=int, default=10, help="untimed runs before timing")
    p.add_argument("--atol", type=float, default=1e-4)
    p.add_argument("--rtol", type=float, default=1e-4)
    p.add_argument("--time-budget", type=float, default=540.0, help="seconds for the whole run")
    p.add_argument("--task-timeout", type=float, default=150.0, help="seconds per task in the check pass")
    p.add_argument("--compile-timeout", type=float, default=150.0, help="seconds per task in the compile pass")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile pass")
    p.add_argument("--cpu-inputs", action="store_true",
                   help="draw inputs on the CPU and move them, as the judge does (slower); default: on the GPU")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--job", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Build, check, time, report."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    if args.worker:
        return worker_main(args)
    deadline = time.monotonic() + args.time_budget
    ids = discover(args.tasks)
    if not ids:
        LOG.error("no tasks matched %s under %s", args.tasks, HERE / "tasks")
        return 2
    results = {tid: TaskResult(id=tid) for tid in ids}
    header = {"environment": environment(), "atol": args.atol, "rtol": args.rtol, "seeds": args.seeds,
              "runs": args.runs, "warmup": args.warmup, "tf32": False,
              "inputs_drawn_on": "cpu" if args.cpu_inputs else "gpu"}
    args.build_dir.mkdir(parents=True, exist_ok=True)
    work = args.build_dir / f"run_{int(time.time())}"
    work.mkdir()
    build_all(ids, args.build_dir, args.jobs, results)
    write_json(args.out, header, results)

    def on_result(mode: str, event: dict[str, Any]) -> None:
        apply_result(results, mode, event)
        write_json(args.out, header, results)

    built = [tid for tid in ids if results[tid].build_ok]
    run_pass("check", built, args.build_dir, work, args, deadline, on_result)
    if not args.no_compile:
        # compile in parallel first (CPU-bound, no timing running), keeping ~2 s per task for the timed pass
        warm_all(ids, args.jobs, not args.cpu_inputs, deadline - 2.0 * len(ids) - 30.0)
        run_pass("compile", ids, args.build_dir, work, args, deadline, on_result)
    write_json(args.out, header, results)
    print_table(results)
    return 0 if all(r.ok for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
