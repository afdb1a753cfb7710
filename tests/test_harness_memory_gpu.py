"""Bounded device memory on a real GPU: a 2 GiB task's peak stays within the bound in one process and in the
trust split (both processes, and the whole device with the CUDA contexts measured), one that cannot fit is
TASK_TOO_LARGE (and the process still judges the next job), and every result carries its peaks and phases.

Run on the GPU host (one GPU is enough, about two minutes)::

    pytest -m gpu tests/test_harness_memory_gpu.py -v -s

The reference is judged as its own candidate (``ModelNew = Model``, the raw format's no-op kernel: what
``cudagym baselines check`` runs), with every guard off, so the harness's own copies are what is measured.
The bounds (README, "Device memory is bounded"), with R the reference's own peak (its input, its intermediate
and its output here: measured as ``cost.reference_peak_bytes``), S one input set, O one output set:

- one process: ``peak <= R + S + O``;
- the split's trusted process: ``peak <= R + S + 2 O + H`` (the arenas are one input set and one output set, and
  it keeps its own copy of the candidate's outputs; ``H`` is the room of the heap it shares with the runner,
  beside its reserve, which is the output arena: ``cudagym.judge.split.heap.heap_bytes``);
- the runner: the candidate's own need (here R less its input, which it reads from the arena) ``+ S + O``, all of
  it in the heap (its torch allocations are routed there while it answers requests), so its own allocator holds
  small buffers only.

Each plus small buffers (:data:`SMALL`): the L2 flush buffer, the chunked comparisons' temporaries, the
allocator's rounding.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from gpu_jobs import judge, stage_build

from cudagym.judge.baselines import reference_solution
from cudagym.judge.interface import EvalMode
from cudagym.judge.job import Job, KnownBaselines
from cudagym.judge.protocol import DEFAULT_PROTOCOL, KERNELBENCH
from cudagym.judge.records import EvalCost, EvalResult, EvalStatus
from cudagym.judge.split.heap import heap_bytes
from cudagym.judge.task_check import memory_bound_bytes
from cudagym.task import make_task

pytestmark = pytest.mark.gpu

GIB = 1 << 30
MIB = 1 << 20
QUICK = dict(guards=(), warmup_runs=2, warmup_ms=0.0, min_runs=5, max_runs=10, target_ci_pct=0.0)
# The small buffers beside the bound: the L2 flush buffer (2 x 50 MB on an H200), the chunked comparisons'
# temporaries (a dozen pieces of 16M elements at most, 64 MB each in fp32), the allocator's 2 MiB rounding.
SMALL = 1 * GIB

# RMS normalisation over dim 1 of a 2 GiB input: the reference needs its input, its output and one
# intermediate (x * x) of that size; the output reuses the intermediate's freed block, so R is 4 GiB.
RMSNORM_2GIB = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x / torch.sqrt((x * x).mean(dim=1, keepdim=True) + 1e-5)


def get_inputs():
    return [torch.randn(4096, 131072)]


def get_init_inputs():
    return []
'''

TOO_LARGE = RMSNORM_2GIB.replace("torch.randn(4096, 131072)", "torch.empty(64, 1 << 30)")  # 256 GiB


def run(tmp_path: Path, source: str, name: str, protocol=DEFAULT_PROTOCOL, monkeypatch=None) -> EvalResult:
    task = make_task(source, id=f"test/{name}", suite="test", level=1, name=name, origin="test")
    solution = reference_solution(task)
    checking = protocol.with_changes(**QUICK)
    built = stage_build()(task, solution, checking)
    assert built.ok, built.message
    from cudagym.judge.sandbox import prepare_workdir

    workdir = prepare_workdir(tmp_path / name, solution)
    job = Job(f"gpu-{task.short_hash}", task, solution, built, EvalMode.PROFILE, checking, KnownBaselines(),
              str(workdir))
    return judge(job, monkeypatch)


def describe(result: EvalResult) -> str:
    """The cost line, and the per-phase peaks the harness logs (which phase holds the peak)."""
    phases = [n for n in result.notes if n.startswith("device memory by phase")]
    assert phases, result.log[-2000:]  # every GPU evaluation logs them
    return f"{cost_line(result.cost)}\n{phases[-1]}"


def cost_line(cost: EvalCost) -> str:
    return (f"peak {cost.peak_device_memory_bytes / GIB:.2f} GiB (arenas {cost.arena_bytes / GIB:.2f} GiB), runner "
            f"{cost.runner_peak_device_memory_bytes / GIB:.2f} GiB, reference alone "
            f"{cost.reference_peak_bytes / GIB:.2f} GiB (compiled {cost.compiled_peak_bytes / GIB:.2f} GiB); phases "
            f"load {cost.load_s:.2f} s, check {cost.check_s:.2f} s, "
            f"timing {cost.timing_s:.2f} s "
            f"(compile {cost.compile_s:.2f} s), profile {cost.profile_s:.2f} s")


def assert_within_the_recorded_bound(cost: EvalCost) -> None:
    """Live allocations within the bound the tables apply, whose small buffers the evaluation recorded itself."""
    import torch

    from cudagym.judge.harness.hardware import l2_cache_bytes

    flush = 2 * l2_cache_bytes(torch.device("cuda", torch.cuda.current_device()))
    assert flush < cost.small_buffers_bytes < SMALL  # the flush buffer and the comparisons' temporaries
    print(f"small buffers {cost.small_buffers_bytes / MIB:.0f} MiB (flush {flush / MIB:.0f} MiB); live peak "
          f"{(cost.peak_allocated_bytes - memory_bound_bytes(cost)) / MIB:+.0f} MiB against the recorded bound")
    assert cost.peak_allocated_bytes <= memory_bound_bytes(cost)


def test_a_2_gib_task_stays_within_the_bound_in_one_process(tmp_path, monkeypatch):
    result = run(tmp_path, RMSNORM_2GIB, "rmsnorm_2gib", monkeypatch=monkeypatch)
    assert result.status is EvalStatus.OK, result.message
    assert result.eager.measured and result.compiled.measured and result.candidate.measured
    cost = result.cost
    print(describe(result))
    assert cost.input_set_bytes == cost.output_set_bytes == 2 * GIB
    assert cost.reference_peak_bytes >= 4 * GIB  # its input, and its output or its intermediate
    assert cost.arena_bytes == cost.runner_peak_device_memory_bytes == 0  # no split here
    r, s, o = cost.reference_peak_bytes, cost.input_set_bytes, cost.output_set_bytes
    assert 6 * GIB < cost.peak_device_memory_bytes <= r + s + o + SMALL
    assert 6 * GIB < cost.peak_allocated_bytes <= cost.peak_device_memory_bytes  # live tensors, within the reserved
    assert_within_the_recorded_bound(cost)
    assert cost.device_memory_total_bytes > cost.peak_device_memory_bytes


# ------------------------------------------------------------------------------------- the split


def context_bytes(index: int) -> int:
    """What one more CUDA process costs the device: a fresh interpreter's torch context and its first block."""
    import torch

    child = f"import sys, torch; torch.ones(1, device='cuda:{index}'); print('up', flush=True); sys.stdin.read()"
    free_before = torch.cuda.mem_get_info(index)[0]
    proc = subprocess.Popen([sys.executable, "-c", child], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        free_during = torch.cuda.mem_get_info(index)[0]
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(60)
    return free_before - free_during


@contextmanager
def device_used_peak(index: int) -> Iterator[list[int]]:
    """Sample the device's used memory (every process's) every millisecond; yields ``[peak]`` filled at exit."""
    import torch

    found = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            free, total = torch.cuda.mem_get_info(index)
            found[0] = max(found[0], total - free)
            time.sleep(0.001)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield found
    finally:
        done.set()
        thread.join(10)


def test_a_2_gib_task_stays_within_the_bound_in_the_split_both_processes_and_the_device(tmp_path):
    import torch

    from cudagym.judge.local import LocalJudge, probe_gpus

    index = torch.cuda.current_device()
    context = context_bytes(index)
    free, total = torch.cuda.mem_get_info(index)
    used_before = total - free  # this process's context, and nothing of the judge's yet
    task = make_task(RMSNORM_2GIB, id="test/rmsnorm_2gib_split", suite="test", level=1, name="rmsnorm_2gib_split",
                     origin="test")
    protocol = DEFAULT_PROTOCOL.with_changes(id="memory-split", **QUICK)
    with LocalJudge(protocol, devices=list(probe_gpus("auto").device_ids[:1]), cache_dir=tmp_path / "cache") as j, \
            device_used_peak(index) as device_peak:
        result = j.evaluate(task, reference_solution(task), EvalMode.SUBMIT)
    assert result.status is EvalStatus.OK, result.message + result.log[-3000:]
    assert "made by the trusted process" in result.log
    cost = result.cost
    r, s, o = cost.reference_peak_bytes, cost.input_set_bytes, cost.output_set_bytes
    grown = device_peak[0] - used_before
    print(describe(result))
    print(f"one CUDA context {context / MIB:.0f} MiB; the device held {grown / GIB:.2f} GiB more than before the "
          f"judge started (trusted bound {(r + s + o + heap_bytes(o, o, r - s)) / GIB:.2f} GiB, "
          f"runner bound {(r + o) / GIB:.2f} GiB)")
    assert s == o == 2 * GIB and r >= 4 * GIB
    assert "outputs read from the heap shared with the runner" in result.log, result.log[-3000:]
    heap = heap_bytes(o, o, r - s)  # its reserve is one output set here (one 2 GiB output)
    room = heap - o
    # the input arena, the heap (its reserve the output arena) and the signals, each rounded to the 2 MiB granularity
    assert s + heap <= cost.arena_bytes <= s + heap + 6 * MIB
    assert cost.peak_device_memory_bytes <= r + s + 2 * o + room + SMALL
    assert cost.arena_bytes < cost.peak_allocated_bytes <= cost.peak_device_memory_bytes  # the arenas counted in both
    assert_within_the_recorded_bound(cost)
    # the runner's candidate is the reference on the arena's input (R - S) + its own profile input draw (S), all of
    # it in the heap its torch allocations are routed to (counted above, in the trusted process's arenas): its own
    # allocator holds only what it makes outside the heap (2 MiB on an H100 in session 46; the runner held 4.24 GiB
    # before the heap, session 28's bound R + O + SMALL)
    assert cost.arena_bytes - s - o >= r - s  # the arenas as measured: the heap's room covers the runner's need
    assert 0 < cost.runner_peak_device_memory_bytes <= SMALL
    # The whole device: both processes' bounds and the CUDA contexts of the processes alive (the worker, its
    # spare, the job's runner and the spare runners the pool starts for the next jobs), each as measured above;
    # SMALL leaves room for the kernels they load.
    from cudagym.judge.worker import default_spare_runners

    contexts = (3 + default_spare_runners(1)) * context
    assert grown <= cost.peak_device_memory_bytes + cost.runner_peak_device_memory_bytes + contexts + SMALL
    assert grown <= (r + s + 2 * o + room) + (r + o) + contexts + 2 * SMALL


# ------------------------------------------------------------------------------------- too large


def test_a_task_that_cannot_fit_is_task_too_large_and_the_process_judges_the_next(tmp_path, monkeypatch):
    result = run(tmp_path, TOO_LARGE, "too_large", monkeypatch=monkeypatch)
    assert result.status is EvalStatus.TASK_TOO_LARGE, result.message
    assert "test/too_large" in result.message and "GiB" in result.message
    small = RMSNORM_2GIB.replace("torch.randn(4096, 131072)", "torch.randn(64, 1024)")
    after = run(tmp_path, small, "small_after", protocol=KERNELBENCH, monkeypatch=monkeypatch)
    assert after.status is EvalStatus.OK, after.message
    assert 0 < after.cost.peak_device_memory_bytes < GIB
    assert after.precision.cudnn_allow_tf32 and not after.precision.matmul_allow_tf32
