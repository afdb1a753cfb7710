"""The trust split on the CPU path, through the real worker pool: a trusted worker, a fresh sandboxed runner.

Each attack here is written as a white-box attacker would: it knows the judge's code and patches it in the
process where it runs. Most run with every guard off, so nothing but the split's structure stands between
the attack and the reward: the verdict is made in a process that never loaded the candidate.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence

import pytest
from split_pools import cpu_split_pool
from test_harness_cpu import memorised

from cudagym.judge.interface import EvalMode
from cudagym.judge.job import Job, KnownBaselines
from cudagym.judge.protocol import CUDAGYM_V0
from cudagym.judge.records import BuildResult, BuildStatus, EvalResult, EvalStatus
from cudagym.judge.worker import WorkerPool
from cudagym.solution import Solution
from cudagym.task import make_task

TASK = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        return torch.relu(self.lin(x))

def get_inputs():
    return [torch.randn(8, 32)]

def get_init_inputs():
    return [32]
'''

HONEST = '''
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        return torch.relu(torch.addmm(self.lin.bias, x, self.lin.weight.t()))
'''

ZEROS = '''
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        return torch.zeros(x.shape[0], self.lin.out_features)
'''

# Patch the harness's comparison and verdict in the process the candidate runs in: any output then "passes".
FORGE_COMPARISON = '''
import importlib
import torch
import torch.nn as nn

mod = importlib.import_module("cudagym.judge.harness." + "correctness")
ctx_mod = importlib.import_module("cudagym.judge.harness." + "context")
real = mod.compare_outputs

def always(reference, candidate, tolerance, **kw):
    return real(reference, reference, tolerance, **kw)

setattr(mod, "compare_outputs", always)
setattr(ctx_mod, "compare_outputs", always)

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        return torch.zeros(x.shape[0], self.lin.out_features)
'''

# Look for the reference's answers in the process: every tensor the garbage collector knows of.
STEAL_REFERENCE = '''
import gc
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        want = (x.shape[0], self.lin.out_features)
        for obj in gc.get_objects():
            if isinstance(obj, torch.Tensor) and tuple(obj.shape) == want and obj.data_ptr() != x.data_ptr():
                if bool((obj >= 0).all()) and bool((obj > 0).any()):
                    return obj.clone()
        return torch.zeros(want)
'''

# Claim a 1 us time for every timed call, whatever it took (the runner's timer patched).
FORGE_TIMING = '''
import importlib
import time
import torch
import torch.nn as nn

timing = importlib.import_module("cudagym.judge.harness." + "timing")
real = timing.HostTimer.measure

def fast(self, call, cover_us=None):
    m = real(self, call, cover_us)
    return timing.Measurement(m.outputs, 1.0, 1.0, 1.0)

setattr(timing.HostTimer, "measure", fast)

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        time.sleep(0.005)
        return torch.relu(torch.addmm(self.lin.bias, x, self.lin.weight.t()))
'''

# Poison the process for whoever comes next: every later comparison in this process passes.
POISON_NEXT = FORGE_COMPARISON.replace("return torch.zeros(x.shape[0], self.lin.out_features)",
                                       "return torch.relu(torch.addmm(self.lin.bias, x, self.lin.weight.t()))")

# An output whose attributes raise when the judge touches them.
HOSTILE_OUTPUT = '''
import torch
import torch.nn as nn

class Boom:
    def __getattr__(self, name):
        raise RuntimeError("boom: " + name)

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        return Boom()
'''

EXIT_IN_FORWARD = HONEST.replace("return torch.relu(", "import os; os._exit(0)\n        return torch.relu(")
SEGFAULT_IN_FORWARD = HONEST.replace("return torch.relu(",
                                     "import ctypes; ctypes.string_at(0)\n        return torch.relu(")
# A process's exit can outlast its channel's close (a GPU process tears its CUDA context down first): the channel
# closed by hand, the exit 0.5 s later.
EXIT_3_IN_FORWARD = HONEST.replace("return torch.relu(", (
    "import os, time, socket\n"
    "        argv = open('/proc/self/cmdline', 'rb').read().split(b'\\0')\n"
    "        fd = int(argv[argv.index(b'--sock') + 1])\n"
    "        socket.socket(fileno=fd).shutdown(socket.SHUT_RDWR)\n"
    "        time.sleep(0.5); os._exit(3)\n"
    "        return torch.relu("))

# Write garbage into the socket to the trusted process (its descriptor is on the runner's command line).
GARBAGE_ON_CHANNEL = '''
import os
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        argv = open("/proc/self/cmdline", "rb").read().split(b"\\0")
        fd = int(argv[argv.index(b"--sock") + 1])
        os.write(fd, b"\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x10" + b'{"kind": "outp')
        return torch.relu(torch.addmm(self.lin.bias, x, self.lin.weight.t()))
'''

WRITES_INPUT = HONEST.replace("return torch.relu(", "x.mul_(0.5)\n        return 2 * torch.relu(")


# torch computes these candidates' outputs (the CPU path has no kernels): the fallback guard would stop them all
EVERY_GUARD_BUT_FALLBACK = ("side_stream", "tampering", "timer_patch", "file_access", "host_threads",
                            "input_mutation", "lazy_output", "network", "reference_reuse", "result_cache",
                            "stale_memory", "degenerate_output", "hard_coding", "precision", "decoy_kernels",
                            "suspicious_speedup")


pool = pytest.fixture(scope="module", name="pool")(cpu_split_pool)


def judge(pool: WorkerPool, candidate: str, *, guards: Sequence[str] = (), mode: EvalMode = EvalMode.VERIFY,
          job_id: str = "job", runner_reference_runs: int = 0, reference_batch: int = 0,
          timeout_s: float | None = None, task: str = TASK, target_ci_pct: float = 0.0,
          **fields: object) -> EvalResult:
    """One job of ``task`` (the linear+relu one) with ``candidate`` through the pool."""
    code = textwrap.dedent(candidate)
    job = Job(
        job_id=job_id,
        task=make_task(textwrap.dedent(task), id=f"test/split_{job_id}", suite="test", level=1, name="split",
                       origin="test"),
        solution=Solution("inline", {"model_new.py": code}),
        build=BuildResult(BuildStatus.OK, "inline"),
        mode=mode,
        protocol=CUDAGYM_V0.with_changes(id="test-split", guards=tuple(guards), num_inputs=2, warmup_runs=1,
                                         warmup_ms=0.0, min_runs=5, max_runs=5, target_ci_pct=target_ci_pct,
                                         runner_reference_runs=runner_reference_runs,
                                         runner_reference_batch=reference_batch,
                                         eval_timeout_s=timeout_s or CUDAGYM_V0.eval_timeout_s, **fields),
        baselines=KnownBaselines(),
    )
    return pool.submit(job).result(timeout=300)


def test_honest_candidate_passes_and_is_timed_in_the_runner(pool: WorkerPool) -> None:
    result = judge(pool, HONEST, mode=EvalMode.PROFILE, guards=EVERY_GUARD_BUT_FALLBACK)
    assert result.status is EvalStatus.OK, result.message + result.log[-3000:]
    assert len(result.checks) >= 2 and all(c.passed for c in result.checks)
    assert result.candidate.runs == 5 and result.eager.runs == 5
    assert "made by the trusted process" in result.log
    assert "timing claims: median" in result.log
    load = next(n for n in result.notes if n.startswith("load:"))  # where the runner's start went, stage by stage
    assert re.search(r"the runner's account: setup [0-9.]+ s, source checks [0-9.]+ s, reference [0-9.]+ s, "
                     r"candidate module [0-9.]+ s, models [0-9.]+ s, guards [0-9.]+ s, start to ready ([0-9.]+) s\)$",
                     load), load
    started = float(re.search(r"start to ready ([0-9.]+) s", load).group(1))
    assert 0.1 < started < 180  # the runner's own start (torch imported, the harness loaded) is in its account


def test_the_empty_calls_cost_is_the_cheaper_of_two_rounds_taken_before_the_candidate(pool: WorkerPool) -> None:
    # a round taken in a transient (H200, session 24: 837.2 us against 671-672 us in the jobs around it) made an
    # attacker's calls look short of an empty call; a second round after the runner's reference timing, still
    # before the candidate loads, is taken, and the cheaper stands
    result = judge(pool, HONEST, mode=EvalMode.SUBMIT, runner_reference_runs=5, job_id="rounds")
    assert result.status is EvalStatus.OK, result.message + result.log[-3000:]
    note = next(n for n in result.notes if n.startswith("timing claims: median"))
    rounds = re.search(r"the cheaper of 2 rounds taken before the candidate loaded \(medians ([\d.]+), ([\d.]+) "
                       r"us\)", note)
    assert rounds, note
    calibrated = float(re.search(r"beyond the calibrated ([\d.]+) us of an empty one", note).group(1))
    assert calibrated == min(float(rounds.group(1)), float(rounds.group(2))), note
    assert result.runner_reference is not None and result.runner_reference.runs == 5
    # without the runner's reference timing there is one round, and the note says nothing of rounds
    single = judge(pool, HONEST, mode=EvalMode.SUBMIT, job_id="one-round")
    assert not any("rounds taken before" in n for n in single.notes), single.notes


def test_a_batched_yardstick_stops_at_the_precision_target_though_its_count_skips_the_tens(pool: WorkerPool) -> None:
    # two single calls, then batches of ten: 12, 22, ... samples, never a multiple of 10, and the target was looked
    # at only there, so the yardstick ran to its limit (H200, session 30: about 180 calls where single requests
    # stopped near 30, the verdict's yardstick 0.82 s against 0.355 s). A loose target stops it at the first look that
    # meets it: at 12 samples, or a batch later where one slow call on a busy host widened the interval of the first
    # 12 past 100% (CI: 22); the old rule ran all 200.
    result = judge(pool, HONEST, mode=EvalMode.SUBMIT, runner_reference_runs=200, reference_batch=10,
                   job_id="batch-target", target_ci_pct=100.0)
    assert result.status is EvalStatus.OK, result.message + result.log[-3000:]
    assert result.runner_reference is not None, result.log[-3000:]
    assert 10 < result.runner_reference.runs <= 42, result.runner_reference  # a look or three: never the 200


def test_the_runners_reference_can_be_timed_in_batches_of_its_own_loop_before_the_candidate(pool: WorkerPool) -> None:
    # the warm-up untimed in a request of its own, two timed calls as requests of their own (none late on this
    # path), then the other 8 of the 10 five and three a request: the same count of samples at a fraction of the
    # round trips
    result = judge(pool, HONEST, mode=EvalMode.SUBMIT, runner_reference_runs=10, reference_batch=5, job_id="batch")
    assert result.status is EvalStatus.OK, result.message + result.log[-3000:]
    assert result.runner_reference is not None and result.runner_reference.runs == 10
    assert result.runner_reference.min_us > 0, result.runner_reference
    note = next(n for n in result.notes if "timed in the runner's own loop" in n)
    assert note.endswith("8 of its 10 timed calls timed in the runner's own loop, 5 a request (its L2 flush, no "
                         "launch cover on this path), the rest one a request"), note
    cost = next(n for n in result.notes if n.startswith("timed requests, this process's wall time each (median): "))
    assert re.search(r"reference_warm 1 x [0-9.]+ ms .*reference 2 x [0-9.]+ ms .*reference_batch 2 x [0-9.]+ ms",
                     cost), cost
    # one a request, as before, without the setting
    single = judge(pool, HONEST, mode=EvalMode.SUBMIT, runner_reference_runs=10, job_id="single")
    assert single.runner_reference.runs == 10
    assert not any("timed in the runner's own loop" in n for n in single.notes), single.notes


def test_a_runner_that_fails_before_the_candidate_loads_is_the_judges_failure_not_the_candidates(
        pool: WorkerPool) -> None:
    # a reference that kills the runner's process when the runner times it (before any candidate code is there):
    # the task's or the judge's doing, so reward 0 (infra_error), never the candidate's -1 (crashed)
    dying = textwrap.dedent(TASK).replace("    def forward(self, x):\n", (
        "    def forward(self, x):\n"
        "        import os, sys\n"
        "        if getattr(sys.modules['__main__'].__spec__, 'name', '') == 'cudagym.judge.split.runner':\n"
        "            os._exit(3)\n"))
    assert dying != textwrap.dedent(TASK)
    result = judge(pool, HONEST, mode=EvalMode.PROFILE, runner_reference_runs=5, task=dying, job_id="dies-early")
    assert result.status is EvalStatus.INFRA_ERROR, result.message + result.log[-2000:]
    assert "the judge's runner failed before any candidate code was in it" in result.message


def test_a_task_whose_reference_hangs_before_the_candidate_loads_is_the_judges_timeout(pool: WorkerPool) -> None:
    # the reference never finishes loading (a sleep at import): the job runs out of time before any candidate code
    # is in the runner, which is the task's doing (reward 0), not the candidate's timeout (-1)
    hangs = "import time\ntime.sleep(3600)\n" + textwrap.dedent(TASK)
    result = judge(pool, HONEST, task=hangs, timeout_s=10.0, job_id="reference-hangs")
    assert result.status is EvalStatus.INFRA_ERROR, result.message + result.log[-2000:]
    assert "before any candidate code was loaded" in result.message, result.message
    # a candidate that hangs once loaded is its own timeout
    forward = "        return torch.relu("
    hung = HONEST.replace(forward, "        import time; time.sleep(3600)\n" + forward)
    assert hung != HONEST
    stuck = judge(pool, hung, job_id="candidate-hangs", timeout_s=10.0)
    assert stuck.status is EvalStatus.TIMEOUT, stuck.message + stuck.log[-2000:]


def test_a_patched_comparison_in_the_candidates_process_forges_nothing(pool: WorkerPool) -> None:
    result = judge(pool, FORGE_COMPARISON)
    assert result.status is EvalStatus.INCORRECT, result.message
    assert not result.violations  # every guard off: the verdict's own structure caught it


def test_the_reference_outputs_are_not_in_the_candidates_process(pool: WorkerPool) -> None:
    result = judge(pool, STEAL_REFERENCE)
    assert result.status is EvalStatus.INCORRECT, result.message


def test_a_forged_timing_claim_is_unverifiable(pool: WorkerPool) -> None:
    result = judge(pool, FORGE_TIMING, mode=EvalMode.PROFILE)
    assert result.status is EvalStatus.RULE_VIOLATION, result.message + result.log[-2000:]
    assert [v.guard for v in result.violations] == ["unverifiable_timing"]


def test_state_left_by_one_candidate_does_not_judge_the_next(pool: WorkerPool) -> None:
    first = judge(pool, POISON_NEXT, job_id="poisoner")
    assert first.status is EvalStatus.OK, first.message  # itself correct
    second = judge(pool, ZEROS, job_id="after")
    assert second.status is EvalStatus.INCORRECT, second.message


def test_failures_while_receiving_outputs_are_the_candidates(pool: WorkerPool) -> None:
    hostile = judge(pool, HOSTILE_OUTPUT)
    assert hostile.status is EvalStatus.INCORRECT, hostile.message
    assert "expected a tensor" in hostile.message
    exited = judge(pool, EXIT_IN_FORWARD)
    assert exited.status is EvalStatus.CRASHED, exited.message
    assert "candidate's process" in exited.message
    garbage = judge(pool, GARBAGE_ON_CHANNEL)
    assert garbage.status in (EvalStatus.CRASHED, EvalStatus.TIMEOUT), garbage.message
    assert garbage.status is not EvalStatus.INFRA_ERROR


def test_a_candidate_whose_process_dies_is_told_how(pool: WorkerPool) -> None:
    # the runner's channel closes as it dies; the message names the signal or the status, not just the lost channel
    crashed = judge(pool, SEGFAULT_IN_FORWARD, job_id="segfault")
    assert crashed.status is EvalStatus.CRASHED, crashed.message
    assert "SIGSEGV" in crashed.message, crashed.message
    exited = judge(pool, EXIT_3_IN_FORWARD, job_id="exit-3")
    assert exited.status is EvalStatus.CRASHED, exited.message
    assert "exited with status 3" in exited.message, exited.message


def test_writes_to_inputs_are_seen_by_the_trusted_side(pool: WorkerPool) -> None:
    result = judge(pool, WRITES_INPUT, guards=("input_mutation",))
    assert result.status is EvalStatus.RULE_VIOLATION, result.message
    assert {v.guard for v in result.violations} == {"input_mutation"}


def test_every_job_gets_a_fresh_runner(pool: WorkerPool) -> None:
    marker = HONEST.replace("import torch.nn as nn", "import torch.nn as nn\nprint('left by an earlier job:', "
                            "hasattr(torch, '_split_marker'))\ntorch._split_marker = 1")
    for n in range(2):
        result = judge(pool, marker, job_id=f"fresh{n}")
        assert result.status is EvalStatus.OK, result.message
        assert "left by an earlier job: False" in result.log, result.log[-2000:]


def test_the_runner_has_the_raw_runtimes_cupy_imported_before_the_job(pool: WorkerPool) -> None:
    """A spare runner pays for CuPy's import while it waits (0.1-0.2 s that was in each raw job's load)."""
    probe = HONEST.replace("import torch.nn as nn", "import torch.nn as nn\nimport sys\nprint('cupy before the "
                           "candidate:', 'cupy' in sys.modules)")
    result = judge(pool, probe, job_id="cupy-warm")
    assert result.status is EvalStatus.OK, result.message
    assert "cupy before the candidate: True" in result.log, result.log[-2000:]


def test_answers_memorised_for_the_published_seeds_are_named_hard_coding_through_the_split(pool: WorkerPool) -> None:
    # the trusted side's guards are sided wrappers: hard_coding must still ask before the failed 4x set is the verdict
    answers = memorised()  # TASK is the CPU harness tests' LINEAR_TASK: the same inputs for the same seeds
    plain = judge(pool, answers, job_id="memorised-plain", scaled_inputs=(4.0,))
    assert plain.status is EvalStatus.INCORRECT and "inputs scaled x4" in plain.message, plain.message
    result = judge(pool, answers, job_id="memorised", guards=("hard_coding",), scaled_inputs=(4.0,))
    assert result.status is EvalStatus.RULE_VIOLATION, result.message
    assert {v.guard for v in result.violations} == {"hard_coding"}
