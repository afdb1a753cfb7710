"""Series of calls back to back under attack and on unusual tasks, through the real worker and sandboxed runner.

Where a candidate's claims are too short for one call's clock (every call under 20 ms on the CPU path), the
trusted side asks the runner for three series of calls back to back (``harness.runner._series_check``), each
call on an input set of its own, and compares outputs of the series with the reference's. Here a white-box
attacker patches the runner from inside (its ``_Server`` in ``__main__``) to skip work, send malformed replies,
fail or change torch's switches in a series only, and a demanding user brings tasks with trees of outputs, plain
arguments, integer outputs, a reference that writes its inputs, and input sets too large for a series. What each
must get: a forged or skipping series is the candidate's failure (reward -1: INCORRECT, RUNTIME_ERROR, CRASHED,
TIMEOUT or RULE_VIOLATION), a malformed reply never the judge's (INFRA_ERROR) nor a traceback out of the pool,
and an honest candidate on any such task ``ok``. Every guard is off unless a test names one.

Two rules a timed round is held to did not hold a series (the runner can tell the two apart): a forward that
wrote over its inputs in series only, and one that computed in fp16 in series only, were judged ``ok``.
"""

from __future__ import annotations

import re
import textwrap

import pytest
from split_pools import cpu_split_pool
from test_series_claims import FORGED_SHORT, HONEST_SLOW
from test_split import TASK

from cudagym.judge.harness.claims import SERIES_NOTE
from cudagym.judge.interface import EvalMode
from cudagym.judge.job import Job, KnownBaselines
from cudagym.judge.protocol import CUDAGYM_V0
from cudagym.judge.records import BuildResult, BuildStatus, EvalResult, EvalStatus, TimingStats
from cudagym.judge.split.remote import SERIES_ARENA_BYTES
from cudagym.judge.worker import WorkerPool
from cudagym.solution import Solution
from cudagym.task import make_task

pool = pytest.fixture(scope="module", name="pool")(cpu_split_pool)

# PROFILE looks the baselines up instead of timing them again (no torch.compile in the worker: a shorter job)
CACHED = KnownBaselines(TimingStats(median_us=1000.0, mean_us=1000.0, min_us=990.0, max_us=1010.0, runs=20),
                        TimingStats(median_us=900.0, mean_us=900.0, min_us=890.0, max_us=910.0, runs=20))

# 150 us of work a call: well over a series' per-call allowance (31 us), so a series floors claims forged to 1 us;
# the attacks on the series itself start from honest claims, which no check of one call can fault on a busy host
# (forged claims on 400 us of work were seen 1.3 ms beyond an empty call's cost there, past its allowance).
HONEST = HONEST_SLOW.replace("time.sleep(0.0004)", "time.sleep(0.00015)")
FORGED = FORGED_SHORT.replace("time.sleep(0.0004)", "time.sleep(0.00015)")


NOISE_RETRIES = 2  # a job judged unverifiable_timing by one call's clock goes again, at most this many times


def judge(pool: WorkerPool, candidate: str, job_id: str, mode: EvalMode = EvalMode.PROFILE, task: str = TASK,
          guards: tuple[str, ...] = (), timeout_s: float = 300.0) -> EvalResult:
    """One timed job of ``task`` with ``candidate`` through the pool (a small protocol: 2 checks, 9 timed rounds).

    These tests are about the series, judged after the timed calls; the check of one call's claim against its
    request's clock comes first and, on two cores shared with a starting spare runner (and whatever else runs),
    has faulted honest claims (572 us claimed, 6 ms beyond an empty call in both of the two calls PROFILE
    checked). Its verdict (``unverifiable_timing``) hides the series', so such a job is judged again.
    """
    for attempt in range(NOISE_RETRIES + 1):
        result = _judge_once(pool, candidate, f"{job_id}_{attempt}", mode, task, guards, timeout_s)
        if result.status is not EvalStatus.RULE_VIOLATION or "unverifiable_timing" not in result.message:
            break
    return result


def _judge_once(pool: WorkerPool, candidate: str, job_id: str, mode: EvalMode, task: str, guards: tuple[str, ...],
                timeout_s: float) -> EvalResult:
    job = Job(
        job_id=job_id,
        task=make_task(textwrap.dedent(task), id=f"test/series_robust_{job_id}", suite="test", level=1,
                       name="series_robust", origin="test"),
        solution=Solution("inline", {"model_new.py": textwrap.dedent(candidate)}),
        build=BuildResult(BuildStatus.OK, "inline"),
        mode=mode,
        protocol=CUDAGYM_V0.with_changes(id="test-series-robust", guards=guards, num_inputs=2, warmup_runs=1,
                                         warmup_ms=0.0, min_runs=9, max_runs=9, target_ci_pct=0.0,
                                         runner_reference_runs=0, eval_timeout_s=timeout_s),
        baselines=CACHED if mode is EvalMode.PROFILE else KnownBaselines(),
    )
    return pool.submit(job).result(timeout=timeout_s + 120)


def job_id(request: pytest.FixtureRequest) -> str:
    """A job id from the test's name (its parameters' id included)."""
    return re.sub(r"\W+", "_", request.node.name)


def series_notes(result: EvalResult) -> list[str]:
    """The series check's notes (one where it read its series)."""
    return [n for n in result.notes if n.startswith(SERIES_NOTE)]


def why(result: EvalResult) -> str:
    """The verdict, its message and the log's end, for an assertion's message."""
    return f"{result.status.value}: {result.message[:1500]}\n{result.log[-3000:]}"


# --------------------------------------------------------------------------------- the attacker's tools

# The runner's module (``python -m cudagym.judge.split.runner`` runs it as ``__main__``) and a test for whether
# the candidate is being called from inside a series (the request handler's frame on the stack).
RUNNER = '''
import sys as _sys

_R = next(m for m in (_sys.modules.get("__main__"), _sys.modules.get("cudagym.judge.split.runner"))
          if m is not None and hasattr(m, "_Server"))

def _in_series():
    frame = _sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_series":
            return True
        frame = frame.f_back
    return False
'''


def patched(attack: str, base: str = HONEST) -> str:
    """The candidate (150 us of work a call, honest claims by default) with ``attack`` run at its import."""
    return textwrap.dedent(RUNNER) + textwrap.dedent(attack) + textwrap.dedent(base)


def in_forward(code: str, base: str = HONEST) -> str:
    """The candidate with ``code`` run first in its forward (``x`` and ``self`` in scope)."""
    lines = textwrap.indent(textwrap.dedent(code), " " * 8)
    return textwrap.dedent(RUNNER) + base.replace("    def forward(self, x):\n", "    def forward(self, x):\n" + lines)


# --------------------------------------------------------------------------------- the runner patched

# EXPLOIT: the runner answers a series at once, each call claimed at 1 us, without calling the candidate.
ANSWERS_AT_ONCE = patched('''
def _series(self, model, request, flags, call):
    return {"kind": "series_timed", "problem": "", "times_us": [1.0] * len(request["sets"]), "flag_changes": []}

_R._Server._series = _series
''')

# EXPLOIT: the calls run, but their outputs are not copied into the arena while a series is served.
SKIPS_THE_COPY = patched('''
_real_queue = _R._Server._queue_outputs

def _queue_outputs(self, request, outputs, *rest, **named):
    return "" if _in_series() else _real_queue(self, request, outputs, *rest, **named)

_R._Server._queue_outputs = _queue_outputs
''')

# EXPLOIT: every call of a series gets the first call's set, and the forward answers a set it has seen from memory.
FIRST_SET_FOR_ALL = patched('''
_real_series = _R._Server._series

def _series(self, model, request, flags, call):
    sets = request["sets"]
    request = {**request, "sets": [{"args": sets[0]["args"], "outputs": s["outputs"]} for s in sets]}
    return _real_series(self, model, request, flags, call)

_R._Server._series = _series
''', HONEST.replace('''        time.sleep(0.00015)
''', '''        key = (x.data_ptr(), float(x.sum()))
        if getattr(self, "_memo", (None,))[0] == key:
            return self._memo[1].clone()
        time.sleep(0.00015)
        out = torch.relu(torch.addmm(self.lin.bias, x, self.lin.weight.t()))
        self._memo = (key, out.clone())
'''))


def test_a_runner_that_answers_a_series_without_calling_is_incorrect(pool: WorkerPool) -> None:
    result = judge(pool, ANSWERS_AT_ONCE, "answers_at_once")
    assert result.status is EvalStatus.INCORRECT, why(result)
    assert "back to back" in result.message, result.message


def test_a_runner_that_skips_the_output_copy_in_a_series_is_incorrect(pool: WorkerPool) -> None:
    result = judge(pool, SKIPS_THE_COPY, "skips_copy")
    assert result.status is EvalStatus.INCORRECT, why(result)
    assert "back to back" in result.message, result.message


def test_a_runner_that_hands_every_call_the_first_set_is_incorrect(pool: WorkerPool) -> None:
    result = judge(pool, FIRST_SET_FOR_ALL, "first_set")
    assert result.status is EvalStatus.INCORRECT, why(result)
    assert "back to back" in result.message, result.message


# --------------------------------------------------------------------------------- malformed replies

def _reply_patch(change: str, base: str = HONEST) -> str:
    """A candidate whose runner runs each series for real, then changes its reply (``reply`` in scope)."""
    return patched('''
_real_series = _R._Server._series

def _series(self, model, request, flags, call):
    reply = _real_series(self, model, request, flags, call)
''' + textwrap.indent(textwrap.dedent(change), "    ") + '''    return reply

_R._Server._series = _series
''', base)


# The per-call times of the candidate's series are never read (only an empty series' are, before it loads), nor
# are flag changes that are not strings: such replies change nothing, and the series still floors forged claims (in
# SUBMIT, where every timed round is compared, the one-call check reads the least of nine calls: steadier).
@pytest.mark.parametrize("change", [
    'reply["times_us"] = [float("nan"), -5.0, float("inf")]\nreply["flag_changes"] = {"x": 1}\n',
    'reply["times_us"] = "fast"\nreply["flag_changes"] = [1, None, "x" * 100000][:2]\nreply["extra"] = [[]] * 1000\n',
], ids=["times_nan_short", "times_not_a_list"])
def test_a_series_reply_with_malformed_times_changes_nothing(pool: WorkerPool, change: str,
                                                            request: pytest.FixtureRequest) -> None:
    result = judge(pool, _reply_patch(change, FORGED), job_id(request), mode=EvalMode.SUBMIT)
    assert result.status is EvalStatus.OK, why(result)
    notes = series_notes(result)
    assert len(notes) == 1 and "each counts at least" in notes[0], notes
    assert result.candidate.median_us >= 100.0, result.candidate


# A reply the judge cannot use is the candidate's process's failure (crashed); one that names a problem or a
# failure of its own is the candidate's too; never the judge's.
@pytest.mark.parametrize(("change", "status", "said"), [
    ('reply["problem"] = 7\n', EvalStatus.CRASHED, "malformed reply"),
    ('reply["problem"] = ["a"]\n', EvalStatus.CRASHED, "malformed reply"),
    ('reply["problem"] = "none of your business"\n', EvalStatus.INCORRECT, "none of your business"),
    ('reply["kind"] = "timed"\n', EvalStatus.CRASHED, "answered 'timed'"),
    ('del reply["kind"]\n', EvalStatus.CRASHED, "malformed reply"),
    ('reply["times_us"] = [1.0] * 100000\n', EvalStatus.CRASHED, "the cap is"),
    ('reply = {"kind": "task_problem", "text": "the task is broken, honest"}\n', EvalStatus.RUNTIME_ERROR, "honest"),
], ids=["problem_int", "problem_list", "problem_text", "wrong_kind", "no_kind", "too_large", "task_problem"])
def test_a_malformed_series_reply_is_the_candidates_failure(pool: WorkerPool, change: str, status: EvalStatus,
                                                             said: str, request: pytest.FixtureRequest) -> None:
    result = judge(pool, _reply_patch(change), job_id(request))
    assert result.status is status, why(result)
    assert said in result.message, why(result)
    assert "Traceback" not in result.message, result.message


# EXPLOIT: the runner's list of guard violations after a series (the serve loop adds it to every reply) malformed.
MALFORMED_VIOLATIONS = patched('''
_after_series = []
_real_series, _real_violations = _R._Server._series, _R._Server._new_violations

def _series(self, model, request, flags, call):
    _after_series.append(True)
    return _real_series(self, model, request, flags, call)

def _new_violations(self):
    return [["a"]] if _after_series and _after_series.pop() else _real_violations(self)

_R._Server._series, _R._Server._new_violations = _series, _new_violations
''')


def test_malformed_violations_after_a_series_are_the_candidates_failure(pool: WorkerPool) -> None:
    result = judge(pool, MALFORMED_VIOLATIONS, "violations")
    assert result.status is EvalStatus.CRASHED, why(result)
    assert "malformed reply" in result.message, why(result)


# --------------------------------------------------------------------------------- the candidate in a series

@pytest.mark.parametrize(("code", "status", "said"), [
    ('if _in_series():\n    raise RuntimeError("only in a series")\n', EvalStatus.RUNTIME_ERROR, "only in a series"),
    ('if _in_series():\n    raise SystemExit(3)\n', EvalStatus.RUNTIME_ERROR, "SystemExit"),
    ('if _in_series():\n    raise KeyboardInterrupt\n', EvalStatus.CRASHED, "closed its channel"),
    ('if _in_series():\n    import os\n    os._exit(3)\n', EvalStatus.CRASHED, "closed its channel"),
], ids=["raises", "exits", "interrupts", "dies"])
def test_a_candidate_that_fails_only_in_a_series_is_blamed(pool: WorkerPool, code: str, status: EvalStatus,
                                                           said: str, request: pytest.FixtureRequest) -> None:
    result = judge(pool, in_forward(code), job_id(request))
    assert result.status is status, why(result)
    assert said in result.message, why(result)


def test_a_candidate_that_hangs_in_a_series_times_out(pool: WorkerPool) -> None:
    result = judge(pool, in_forward("if _in_series():\n    time.sleep(3600)\n"), "hangs", timeout_s=20.0)
    assert result.status is EvalStatus.TIMEOUT, why(result)


# EXPLOIT: three calls in four of every series answer zeros at once; PROFILE compares four calls drawn after each
# series, so all four land on the one honest call in four with odds of 70 in 35,960 a series (about 7e-9 for all
# three).
THREE_IN_FOUR_WRONG = in_forward('''
if _in_series():
    self._n = getattr(self, "_n", -1) + 1
    if self._n % 4:
        return torch.zeros(x.shape[0], self.lin.out_features)
''')

# EXPLOIT: one call a series, at a place of the candidate's choosing, answers zeros: SUBMIT compares them all.
ONE_A_SERIES_WRONG = in_forward('''
if _in_series():
    import random
    self._n = getattr(self, "_n", -1) + 1
    if self._n % 32 == 0:
        self._pick = random.randrange(32)
    if self._n % 32 == self._pick:
        return torch.zeros(x.shape[0], self.lin.out_features)
''')


def test_wrong_outputs_in_most_calls_of_a_series_are_found_in_profile(pool: WorkerPool) -> None:
    result = judge(pool, THREE_IN_FOUR_WRONG, "three_in_four")
    assert result.status is EvalStatus.INCORRECT, why(result)
    assert "back to back" in result.message, result.message


def test_one_wrong_call_a_series_is_found_in_submit(pool: WorkerPool) -> None:
    result = judge(pool, ONE_A_SERIES_WRONG, "one_a_series", mode=EvalMode.SUBMIT)
    assert result.status is EvalStatus.INCORRECT, why(result)
    assert "back to back" in result.message, result.message


# EXPLOIT: the series' first call switches torch's default dtype to float64 and leaves it; every call outside a
# series answers in the default dtype, so if the runner left the switch as the series did, the calls after it
# would deliver float64 (a structure mismatch).
FLAGS_IN_SERIES = in_forward('''
if _in_series():
    torch.set_default_dtype(torch.float64)
    return torch.relu(torch.addmm(self.lin.bias, x, self.lin.weight.t()))
return torch.relu(torch.addmm(self.lin.bias, x, self.lin.weight.t())).to(torch.get_default_dtype())
''')


def test_torch_switches_a_series_changed_are_restored_after_it(pool: WorkerPool) -> None:
    result = judge(pool, FLAGS_IN_SERIES, "flags")
    assert result.status is EvalStatus.OK, why(result)
    assert series_notes(result), why(result)


def test_torch_switches_a_series_changed_are_the_precision_rule(pool: WorkerPool) -> None:
    result = judge(pool, FLAGS_IN_SERIES, "flags_guarded", guards=("precision",))
    assert result.status is EvalStatus.RULE_VIOLATION, why(result)
    assert "precision" in result.message and "default_dtype" in result.message, why(result)


# A long dot product of all-positive inputs (KernelBench's torch.rand): operands rounded to fp16 (TF32's mantissa)
# stay within atol=rtol=1e-4 there, and only the float64 precision rule tells them from fp32.
DOT_TASK = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, a, b):
        return a @ b

def get_inputs():
    return [torch.rand(16, 2048), torch.rand(2048, 32)]

def get_init_inputs():
    return []
'''

# EXPLOIT: fp32 wherever the timed rounds and the precision probes look, operands rounded in series only. On a GPU
# TF32 tensor cores there make the series' reading, which floors forged claims, TF32's time (up to 7x less).
ROUNDS_IN_SERIES = textwrap.dedent(RUNNER) + '''
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, a, b):
        if _in_series():
            return a.half().float() @ b.half().float()
        return a @ b
'''


def test_arithmetic_below_the_protocols_precision_in_a_series_is_the_precision_rule(pool: WorkerPool) -> None:
    result = judge(pool, ROUNDS_IN_SERIES, "rounds_in_series", task=DOT_TASK, guards=("precision",))
    assert result.status is EvalStatus.RULE_VIOLATION, why(result)
    assert "(precision)" in result.message and "back to back" in result.message, why(result)


# EXPLOIT: the series' calls write over their own input set (scratch space the timed calls may not use).
WRITES_ITS_INPUTS_IN_SERIES = in_forward('''
if _in_series():
    out = torch.relu(torch.addmm(self.lin.bias, x, self.lin.weight.t()))
    x.zero_()
    return out
''')


def test_a_candidate_that_writes_its_inputs_in_a_series_is_incorrect(pool: WorkerPool) -> None:
    result = judge(pool, WRITES_ITS_INPUTS_IN_SERIES, "writes_inputs")
    assert result.status is EvalStatus.INCORRECT, why(result)
    assert "back to back" in result.message and "changed its inputs" in result.message, result.message


# --------------------------------------------------------------------------------- modes

def test_verify_runs_no_series(pool: WorkerPool) -> None:
    result = judge(pool, in_forward('if _in_series():\n    raise RuntimeError("a series in VERIFY")\n',
                                    HONEST_SLOW), "verify", mode=EvalMode.VERIFY)
    assert result.status is EvalStatus.OK, why(result)
    assert not series_notes(result), series_notes(result)


# --------------------------------------------------------------------------------- unusual tasks

# Trees of outputs (a dict holding a tuple and a list), plain arguments of every kind the split carries (int,
# float, str, None), integer and bool outputs, a 0-d output, an output that is one of the inputs, and a reference
# that writes to an input (in place, before it computes from it).
TREE_TASK = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x, idx, k, scale, mode, nothing):
        assert isinstance(k, int) and isinstance(scale, float) and mode == "sum" and nothing is None
        x.mul_(scale)
        y = torch.relu(self.lin(x))
        return {"y": y, "pair": (idx, torch.argmax(x, dim=1) + k),
                "counts": [idx.sum(dim=0), (x > 0).sum(), x > 0, y.mean()]}

def get_inputs():
    return [torch.randn(8, 32), torch.randint(0, 10, (8, 4)), 3, 0.5, "sum", None]

def get_init_inputs():
    return [32]
'''

TREE_HONEST = '''
import time
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x, idx, k, scale, mode, nothing):
        time.sleep(0.00015)
        x.mul_(scale)
        y = torch.relu(self.lin(x))
        return {"counts": [idx.sum(dim=0), (x > 0).sum(), x > 0, y.mean()],
                "pair": (idx, torch.argmax(x, dim=1) + k), "y": y}
'''

TREE_FORGED = FORGED.split("import time")[0] + TREE_HONEST

# EXPLOIT: forged claims, and in a series the integer outputs answered at once with zeros.
TREE_SKIPS = TREE_FORGED.replace("        time.sleep(0.00015)\n", '''        import sys
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_name != "_series":
            frame = frame.f_back
        if frame is not None:
            x.mul_(scale)
            y = torch.relu(self.lin(x))
            return {"counts": [torch.zeros(4, dtype=torch.int64), (x > 0).sum(), x > 0, y.mean()],
                    "pair": (idx, torch.argmax(x, dim=1) + k), "y": y}
        time.sleep(0.00015)
''')


def test_an_honest_candidate_on_a_tree_task_with_plain_arguments_is_ok(pool: WorkerPool) -> None:
    # the precision rule on: its float64 runs take the plain arguments, and hold the tree's float outputs to it
    result = judge(pool, TREE_HONEST, "tree_honest", task=TREE_TASK, guards=("precision",))
    assert result.status is EvalStatus.OK, why(result)
    notes = series_notes(result)
    assert len(notes) == 1 and "3 series of 32" in notes[0], notes


def test_forged_claims_on_a_tree_task_are_floored_in_submit(pool: WorkerPool) -> None:
    result = judge(pool, TREE_FORGED, "tree_forged", mode=EvalMode.SUBMIT, task=TREE_TASK)
    assert result.status is EvalStatus.OK, why(result)
    notes = series_notes(result)
    assert len(notes) == 1 and "each counts at least" in notes[0], notes
    assert result.candidate.median_us >= 100.0, result.candidate


def test_integer_outputs_skipped_in_a_series_are_incorrect(pool: WorkerPool) -> None:
    result = judge(pool, TREE_SKIPS, "tree_skips", task=TREE_TASK)
    assert result.status is EvalStatus.INCORRECT, why(result)
    assert "back to back" in result.message, result.message


# A reference that writes to its input and returns it; the honest candidate does the same.
WRITES_AND_RETURNS_TASK = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x.mul_(2.0)

def get_inputs():
    return [torch.randn(8, 32)]

def get_init_inputs():
    return []
'''

WRITES_AND_RETURNS = '''
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        return x.mul_(2.0)
'''


# (The profiled forwards kept the first call's outputs, which the two calls after it wrote again: 4x the reference's.)
def test_an_honest_candidate_that_writes_and_returns_its_input_is_ok(pool: WorkerPool) -> None:
    result = judge(pool, WRITES_AND_RETURNS, "writes_returns", task=WRITES_AND_RETURNS_TASK)
    assert result.status is EvalStatus.OK, why(result)
    assert series_notes(result), why(result)


# One input set of 288 MiB: two sets pass the series' 512 MiB, so no series is read (and nothing breaks).
LARGE_TASK = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, big, x):
        return big[:4, :8] + x

def get_inputs():
    return [torch.zeros(72 * 1024, 1024), torch.randn(4, 8)]

def get_init_inputs():
    return []
'''

LARGE_HONEST = '''
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, big, x):
        return big[:4, :8] + x
'''


def test_input_sets_too_large_for_a_series_read_none(pool: WorkerPool) -> None:
    result = judge(pool, LARGE_HONEST, "large", task=LARGE_TASK)
    assert result.status is EvalStatus.OK, why(result)
    assert not series_notes(result), series_notes(result)


def test_input_sets_near_the_cap_make_shorter_series(pool: WorkerPool) -> None:
    # one set of 20 MiB and 256 bytes in (each tensor's slot aligned to 256 bytes), 256 bytes out: 25 fit in 512 MiB
    task = LARGE_TASK.replace("torch.zeros(72 * 1024, 1024)", "torch.zeros(5 * 1024, 1024)")
    calls = SERIES_ARENA_BYTES // ((20 << 20) + 256 + 256)
    assert calls == 25
    result = judge(pool, LARGE_HONEST, "near_cap", task=task)
    assert result.status is EvalStatus.OK, why(result)
    notes = series_notes(result)
    assert len(notes) == 1 and f"3 series of {calls}," in notes[0], notes
