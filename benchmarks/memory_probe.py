"""Where one SUBMIT's device memory goes: the CUDA caching allocator's history around a 2 GiB task's evaluation.

Run on the GPU host (one GPU, about a minute; writes under ``--out``)::

    python benchmarks/memory_probe.py --out "$OUT/memory_probe"

It judges the 2 GiB RMS-norm task of ``tests/test_harness_memory_gpu.py`` (the reference as its own candidate,
guards off, a short timing loop) twice: in this one process, then in the trust split, this process as the
trusted side and a runner the worker pool's own way (sandboxed; started with ``CUDAGYM_MEMORY_HISTORY`` so it
records too, :mod:`cudagym.judge.harness.memhistory`). Each process's allocations are recorded with their Python
frames (``torch.cuda.memory._record_memory_history``); for each it writes the snapshot (``<name>.pickle``, for
https://pytorch.org/memory_viz) and a table (``<name>.txt``, also printed): at the peak of reserved and of
allocated bytes, every live block of 64 MiB and up with the frames that allocated it, every segment with how
much of it was in use (what a partly used one holds), and ``max_memory_reserved`` against
``max_memory_allocated``. ``summary.json`` has each evaluation's status and ``EvalResult.cost``.

``--task ID`` probes any suite's task instead (a KernelBench one with ``CUDAGYM_KERNELBENCH_DIR`` set, e.g. the
depthwise convolutions whose timing phase peaked over the bound in session 11's sweep), ``--protocol`` under
that protocol's precision and guards.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch

from cudagym.errors import CudaGymError
from cudagym.judge.harness import memhistory
from cudagym.judge.interface import EvalMode
from cudagym.judge.job import Job, KnownBaselines
from cudagym.judge.protocol import Protocol, get_protocol
from cudagym.judge.records import BuildResult, BuildStatus, EvalResult
from cudagym.solution import Solution
from cudagym.task import Task, make_task

GIB = 1 << 30
LISTED_BYTES = [memhistory.LARGE]  # the live blocks a table lists at a peak: this size and up (--min-mib)
# As the GPU test: every guard off, a short loop (the harness's own copies are what is measured)
QUICK = dict(guards=(), warmup_runs=2, warmup_ms=0.0, min_runs=5, max_runs=10, target_ci_pct=0.0)

TASK = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x / torch.sqrt((x * x).mean(dim=1, keepdim=True) + 1e-5)


def get_inputs():
    return [torch.randn(4096, {columns})]


def get_init_inputs():
    return []
'''


def rmsnorm_task(gib: float) -> Task:
    """The GPU test's task with an input (and output) of ``gib`` GiB of fp32 (4096 rows)."""
    columns = max(1, int(gib * GIB) // (4 * 4096))
    return make_task(TASK.format(columns=columns), id=f"probe/rmsnorm_{gib:g}gib", suite="probe", level=1,
                     name=f"rmsnorm_{gib:g}gib", origin="probe")


def _task(task_id: str) -> Task:
    """The task ``task_id`` names, from the suite that owns ids of its form."""
    from cudagym.suites import load_tasks, suite_of

    return load_tasks(suite_of(task_id).name, ids=[task_id])[0]


def make_job(task: Task, protocol: Protocol, work: Path, on_gpu: bool = True) -> Job:
    """The reference as its own candidate, built, with a working folder under ``work``.

    On the GPU the raw format's reference solution (what ``cudagym baselines`` judges); on the CPU (the smoke
    test of this script) the same model as an inline solution, which needs no build.
    """
    from cudagym.judge import build as stage
    from cudagym.judge.baselines import reference_solution
    from cudagym.judge.sandbox import prepare_workdir

    if on_gpu:
        solution = reference_solution(task)
        built = stage.build(task, solution, protocol, stage.default_cache())
        if not built.ok:
            raise SystemExit(f"the reference solution did not build: {built.message}")
    else:
        solution = Solution("inline", {"model_new.py": f"{task.source.rstrip()}\n\n\nModelNew = Model\n"})
        built = BuildResult(BuildStatus.OK, "inline")
    workdir = prepare_workdir(work / "work", solution)
    return Job(f"probe-{task.short_hash}", task, solution, built, EvalMode.SUBMIT, protocol, KnownBaselines(),
               str(workdir))


def write_report(out: Path, name: str, snapshot: dict[str, Any], counters: dict[str, int]) -> str:
    """``name.pickle`` and ``name.txt`` under ``out``; the table, for printing."""
    import pickle

    with (out / f"{name}.pickle").open("wb") as fh:
        pickle.dump(snapshot, fh)
    text = f"=== {name}\n{memhistory.report(snapshot, counters, min_bytes=LISTED_BYTES[0])}\n"
    (out / f"{name}.txt").write_text(text)
    return text


def recorded(out: Path, name: str, run: Any) -> tuple[EvalResult, str]:
    """``run()`` with this process's allocations recorded; its result and the table."""
    if not torch.cuda.is_available():  # the CPU smoke test: the evaluation only
        return run(), f"=== {name}\nno CUDA: nothing recorded\n"
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    memhistory.start_recording()
    try:
        result = run()
        snapshot, counters = memhistory.take_snapshot(), memhistory.peak_counters()
    finally:
        memhistory.stop_recording()
    return result, write_report(out, name, snapshot, counters)


def in_workdir(job: Job, fn: Any) -> Any:
    """``fn()`` with the job's working folder as the current one (as a worker runs a job)."""
    here = os.getcwd()
    os.chdir(job.workdir or here)
    try:
        return fn()
    finally:
        os.chdir(here)


class DeviceSampler:
    """The device's used memory (every process's) at its most, and each process's (``nvidia-smi``) at its most.

    What the processes hold beyond their allocators' peaks (CUDA contexts, loaded modules, the arenas) is the
    difference between these and the tables.
    """

    def __init__(self) -> None:
        self.used_before = 0
        self.used_peak = 0
        self.per_pid: dict[int, int] = {}
        self._done = threading.Event()
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> DeviceSampler:
        free, total = torch.cuda.mem_get_info()
        self.used_before = self.used_peak = total - free
        self._threads = [threading.Thread(target=self._device, daemon=True),
                         threading.Thread(target=self._processes, daemon=True)]
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        for thread in self._threads:
            thread.join(10)

    def _device(self) -> None:
        while not self._done.is_set():
            free, total = torch.cuda.mem_get_info()
            self.used_peak = max(self.used_peak, total - free)
            time.sleep(0.002)

    def _processes(self) -> None:
        query = ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]
        while not self._done.is_set():
            try:
                text = subprocess.run(query, capture_output=True, text=True, timeout=10).stdout
            except (OSError, subprocess.SubprocessError):
                return  # no nvidia-smi: the device totals only
            for line in text.splitlines():
                pid, _, mib = line.partition(",")
                if pid.strip().isdigit() and mib.strip().isdigit():
                    self.per_pid[int(pid)] = max(self.per_pid.get(int(pid), 0), int(mib) << 20)
            time.sleep(0.2)

    def describe(self, names: dict[int, str]) -> str:
        """The device's growth and each process's most, for the table."""
        lines = [f"device: used {self.used_before / GIB:.2f} GiB before, {self.used_peak / GIB:.2f} GiB at most "
                 f"(grew {(self.used_peak - self.used_before) / GIB:.2f} GiB; every process's memory, CUDA contexts "
                 "included)"]
        for pid, nbytes in sorted(self.per_pid.items()):
            who = names.get(pid, "another process: in the split the runner, if nothing else uses this GPU")
            lines.append(f"  nvidia-smi: pid {pid} ({who}) held {nbytes / GIB:.2f} GiB at most")
        if not self.per_pid:
            lines.append("  nvidia-smi: no per-process figures (not installed, or no process visible)")
        return "\n".join(lines)


def one_process(job: Job, out: Path, device: str | None) -> tuple[EvalResult, str]:
    """The whole evaluation in this process (``device``: None for the current GPU, ``"cpu"``)."""
    from cudagym.judge.harness.runner import evaluate

    return sampled(out, "one_process", lambda: in_workdir(job, lambda: evaluate(job, device)), device)


def sampled(out: Path, name: str, run: Any, device: str | None) -> tuple[EvalResult, str]:
    """:func:`recorded`, with the device's and each process's use sampled beside it on the GPU."""
    if device == "cpu":
        return recorded(out, name, run)
    with DeviceSampler() as sampler:
        result, table = recorded(out, name, run)
    table += sampler.describe({os.getpid(): "this process"}) + "\n"
    (out / f"{name}.txt").write_text(table)
    return result, table


def split(job: Job, out: Path, gpu: str, device: str | None) -> tuple[EvalResult, list[str]]:
    """This process as the trusted side, a pool-style runner for the candidate; both processes' tables."""
    from cudagym.judge.harness.runner import evaluate
    from cudagym.judge.split.channel import Channel
    from cudagym.judge.split.remote import RunnerLink
    from cudagym.judge.worker import PoolOptions, _Runner

    root = Path(tempfile.mkdtemp(prefix="memory-probe-runner-"))
    options = PoolOptions(runner=True, env={memhistory.HISTORY_ENV: "memory-history"})  # in the runner's own folder
    runner = _Runner(gpu, options, root)
    tables: list[str] = []
    try:
        handed = runner.hand(job, job)
        link = RunnerLink(Channel(runner.trusted_end), time.monotonic() + job.protocol.eval_timeout_s)

        def judged() -> EvalResult:
            try:
                return evaluate(job, device, runner=link, runner_job=handed)
            finally:
                link.end()  # the runner returns from its job and exits: its history is written at exit

        result, table = sampled(out, "split_trusted", lambda: in_workdir(job, judged), device)
        tables.append(table)
        tables.extend(_runner_tables(runner, out))
    finally:
        runner.close()
        shutil.rmtree(root, ignore_errors=True)
    return result, tables


def _runner_tables(runner: Any, out: Path) -> list[str]:
    """Wait for the runner to exit on its own, then read the history it wrote at exit."""
    try:
        runner.proc.wait(timeout=180)
    except Exception:
        return ["=== split_runner\nthe runner did not exit within 180 s: no history"]
    printed = runner.output.take(-2, 2.0).text()
    (out / "split_runner_output.txt").write_text(printed)
    tables = []
    for path in sorted((runner.root / "memory-history").glob("*.pickle")):
        import pickle

        with path.open("rb") as fh:
            snapshot = pickle.load(fh)
        counters_file = path.with_suffix(".json")
        counters = json.loads(counters_file.read_text()) if counters_file.exists() else {}
        tables.append(write_report(out, f"split_runner_{path.stem}", snapshot, counters))
    return tables or [f"=== split_runner\nno history written; the runner printed:\n{printed[-3000:]}"]


def _gpu_name(cpu: bool) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` name of the GPU to judge on, as the pool finds it ("0" on the CPU path)."""
    if cpu:
        return "0"
    from cudagym.judge.gpus import probe_gpus

    return probe_gpus("auto").device_ids[0]


def describe(result: EvalResult) -> dict[str, Any]:
    """Status, message, cost and the bound of one evaluation, for ``summary.json``.

    The bound (README, "Device memory", :func:`cudagym.judge.task_check.memory_bound_bytes`): R + S + O in one
    process, R + S + 2O in the split's worker (arenas included), R the reference's need, eager or compiled;
    the runner's peak is the candidate's own need plus S + O at most.
    """
    from cudagym.judge.task_check import memory_bound_bytes

    cost = result.cost
    bound = memory_bound_bytes(cost)
    return {"status": result.status.value, "message": result.message, "cost": dataclasses.asdict(cost),
            "peak_gib": round(cost.peak_device_memory_bytes / GIB, 3), "bound_gib": round(bound / GIB, 3),
            "over_bound_gib": round((cost.peak_device_memory_bytes - bound) / GIB, 3),
            "allocated_peak_gib": round(cost.peak_allocated_bytes / GIB, 3),
            "allocated_over_bound_gib": round((cost.peak_allocated_bytes - bound) / GIB, 3),
            "runner_peak_gib": round(cost.runner_peak_device_memory_bytes / GIB, 3),
            "memory_notes": [n for n in result.notes if "device memory" in n]}


def main(argv: list[str] | None = None) -> int:
    """Probe one process and the split (or one of them); tables printed and written under ``--out``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")) / "memory_probe")
    parser.add_argument("--gib", type=float, default=2.0, help="input (and output) size in GiB")
    parser.add_argument("--mode", choices=("both", "one", "split"), default="both")
    parser.add_argument("--cpu", action="store_true", help="judge on the CPU, nothing recorded (a smoke test)")
    parser.add_argument("--task", default="", help="a task id of any suite (e.g. a KernelBench task, with "
                        "CUDAGYM_KERNELBENCH_DIR set) instead of the RMS-norm task; --gib is then unused")
    parser.add_argument("--protocol", default="", help="the protocol whose precision and guards apply (default: "
                        "the default protocol); the timing loop is always the short one")
    parser.add_argument("--min-mib", type=float, default=memhistory.LARGE / (1 << 20),
                        help="list the live blocks of this size and up at each peak (default: %(default)s)")
    args = parser.parse_args(argv)
    if not args.min_mib > 0:
        parser.error("--min-mib must be above 0")
    LISTED_BYTES[0] = int(args.min_mib * (1 << 20))
    if not args.cpu and not torch.cuda.is_available():
        print("memory_probe: no CUDA device here (--cpu runs the evaluations without recording)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        task = _task(args.task) if args.task else rmsnorm_task(args.gib)
        base = get_protocol(args.protocol or None)
    except CudaGymError as exc:
        print(f"memory_probe: {exc}", file=sys.stderr)
        return 2
    protocol = base.with_changes(id=f"memory-probe-{base.id}", **QUICK)
    summary: dict[str, Any] = {"task": task.id, "protocol": protocol.id, "torch": torch.__version__}
    device = "cpu" if args.cpu else None
    with tempfile.TemporaryDirectory(prefix="memory-probe-") as work:
        job = make_job(task, protocol, Path(work), on_gpu=not args.cpu)
        if args.mode in ("both", "one"):
            result, table = one_process(job, args.out, device)
            print(table, flush=True)
            summary["one_process"] = describe(result)
        if args.mode in ("both", "split"):
            result, tables = split(job, args.out, _gpu_name(args.cpu), device)
            print("\n".join(tables), flush=True)
            summary["split"] = describe(result)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    print(json.dumps(summary, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
