"""Wrong answers judged correct (and right ones judged wrong) through the output comparison, on the CPU path.

Each candidate runs as an agent's ``model_new.py`` would, through the real worker and a fresh sandboxed runner
(:func:`split_pools.cpu_split_pool`): the runner checks the outputs' structure and copies their bytes into the
output arena, the trusted worker rebuilds them and compares them with its own reference's. What is attacked:

- integer outputs (an argmax's indices, int64 values) compared with a tolerance that grows with ``|ref|`` and in
  float64, where an index off by one or an int64 off by a few units passed;
- outputs beyond a flat tuple or list (a nested tuple, a dict, a dict in another key order): the split carried
  flat sequences only, so a right answer was judged wrong (and a dict's tensors would go where the candidate's key
  order put them);
- outputs the runner could not copy (a meta or sparse tensor): the candidate's failure with a message of its own,
  not a traceback of the judge's runner;
- the precision guard's rounding signature, which ran only on a repeat of the first correctness input (and that
  input with its signs flipped): a candidate that answers those in fp32 and every other input in fp16 passed it,
  and on KernelBench's all-positive matmuls fp16's error stays under the magnitude rule the timed round applies.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

import pytest
from split_pools import cpu_split_pool

from cudagym.judge.interface import EvalMode
from cudagym.judge.job import Job, KnownBaselines
from cudagym.judge.protocol import CUDAGYM_V0
from cudagym.judge.records import BuildResult, BuildStatus, EvalResult, EvalStatus
from cudagym.judge.worker import WorkerPool
from cudagym.solution import Solution
from cudagym.task import make_task

pool = pytest.fixture(scope="module", name="pool")(cpu_split_pool)


def task_source(forward: str, inputs: str = "[torch.randn(8, 32)]", args: str = "x") -> str:
    """A task without weights: ``forward(args)`` returns ``forward`` (a body), on ``inputs``."""
    body = textwrap.indent(textwrap.dedent(forward).strip(), " " * 8)
    return (f"import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
            f"    def forward(self, {args}):\n{body}\n\n\n"
            f"def get_inputs():\n    return {inputs}\n\n\ndef get_init_inputs():\n    return []\n")


def candidate_source(forward: str, args: str = "x", prelude: str = "") -> str:
    """A ``ModelNew`` without weights whose forward body is ``forward``; ``prelude`` is module-level code."""
    body = textwrap.indent(textwrap.dedent(forward).strip(), " " * 8)
    return (f"import torch\nimport torch.nn as nn\n{textwrap.dedent(prelude)}\n\nclass ModelNew(nn.Module):\n"
            f"    def forward(self, {args}):\n{body}\n")


def judge(pool: WorkerPool, task: str, code: str, *, mode: EvalMode = EvalMode.VERIFY, guards: Sequence[str] = (),
          tolerance: float = 1e-4, job_id: str = "comparison") -> EvalResult:
    """One job through the pool: ``task`` and the candidate ``code``, two correctness inputs, three timed rounds."""
    job = Job(
        job_id=job_id,
        task=make_task(task, id="test/comparison", suite="test", level=1, name="comparison", origin="test"),
        solution=Solution("inline", {"model_new.py": code}),
        build=BuildResult(BuildStatus.OK, "inline"),
        mode=mode,
        protocol=CUDAGYM_V0.with_changes(id="test-comparison", guards=tuple(guards), num_inputs=2, atol=tolerance,
                                         rtol=tolerance, warmup_runs=1, warmup_ms=0.0, min_runs=3, max_runs=3,
                                         target_ci_pct=0.0),
        baselines=KnownBaselines(),
    )
    return pool.submit(job).result(timeout=300)


def detail(result: EvalResult) -> str:
    """The verdict and its log, for an assertion's message."""
    return f"{result.status.value}: {result.message}\n{result.log[-3000:]}"


# ---------------------------------------------------------------------------------------------- integer outputs

ARGMAX = task_source("return torch.argmax(x, dim=1)", "[torch.randn(16, 4096)]")


def test_an_argmax_off_by_one_is_wrong_whatever_the_tolerance(pool: WorkerPool) -> None:
    """Indices at 1e-2: ``|out - ref| <= 0.01 + 0.01 * ref`` passed any index of 100 or more off by one."""
    honest = judge(pool, ARGMAX, candidate_source("return torch.argmax(x, dim=1)"), tolerance=1e-2)
    assert honest.status is EvalStatus.OK, detail(honest)
    off = "i = torch.argmax(x, dim=1)\nreturn torch.where(i >= 200, i + 1, i)"  # wrong on ~95% of the rows
    wrong = judge(pool, ARGMAX, candidate_source(off), tolerance=1e-2)
    assert wrong.status is EvalStatus.INCORRECT, detail(wrong)
    assert "int64 must be equal" in wrong.message


def test_int64_outputs_beyond_two_to_the_53_are_compared_exactly(pool: WorkerPool) -> None:
    """int64 compared as float64 (and with rtol): 2**60 + 1 and 2**60 + 7 were the same number."""
    task = task_source("return x + 1", "[torch.randint(1 << 60, 1 << 61, (64,))]")
    wrong = judge(pool, task, candidate_source("return x + 7"))
    assert wrong.status is EvalStatus.INCORRECT, detail(wrong)
    assert "must be equal" in wrong.message


# ----------------------------------------------------------------------------------- outputs beyond a flat tuple

def test_a_nested_tuple_of_tensors_is_judged_by_its_values(pool: WorkerPool) -> None:
    """A reference returning ``(a, (b, c))``: the split expected 3 items at the top, so the right answer failed."""
    task = task_source("return x + 1, (x * 2, x - 1)")
    honest = judge(pool, task, candidate_source("return x + 1, (x * 2, x - 1)"))
    assert honest.status is EvalStatus.OK, detail(honest)
    wrong = judge(pool, task, candidate_source("return x + 1, (x * 2, x + 1)"))
    assert wrong.status is EvalStatus.INCORRECT and "output[1][1]" in wrong.message, detail(wrong)
    flat = judge(pool, task, candidate_source("return x + 1, x * 2, x - 1"))
    assert flat.status is EvalStatus.INCORRECT and "expected a tuple of 2 items" in flat.message, detail(flat)


def test_a_nested_output_is_timed_with_its_copy_out_calibrated(pool: WorkerPool) -> None:
    """The empty calls that calibrate a job's timing return the reference's structure, a nested tree too: an empty
    call that could not deliver its outputs would cost less than a real one by their copy (and is the judge's bug)."""
    task = task_source('return x + 1, {"b": (x * 2, x - 1)}')
    honest = judge(pool, task, candidate_source('return x + 1, {"b": (x * 2, x - 1)}'), mode=EvalMode.PROFILE)
    assert honest.status is EvalStatus.OK and honest.candidate.measured, detail(honest)


def test_a_dict_of_tensors_is_judged_key_by_key(pool: WorkerPool) -> None:
    """A reference returning a dict: a right answer was judged wrong; each tensor must reach its own key's slot."""
    task = task_source('return {"a": x + 1, "b": x * 2}')
    honest = judge(pool, task, candidate_source('return {"b": x * 2, "a": x + 1}'))  # another key order
    assert honest.status is EvalStatus.OK, detail(honest)
    swapped = judge(pool, task, candidate_source('return {"b": x + 1, "a": x * 2}'))
    assert swapped.status is EvalStatus.INCORRECT and "output['a']" in swapped.message, detail(swapped)
    extra = judge(pool, task, candidate_source('return {"a": x + 1, "b": x * 2, "c": x}'))
    assert extra.status is EvalStatus.INCORRECT and "expected a dict with keys" in extra.message, detail(extra)


@pytest.mark.parametrize(("output", "named"), [
    ('torch.empty(8, 32, device="meta")', "a meta tensor"),
    ("(x + 1).to_sparse()", "layout sparse_coo"),
])
def test_an_output_with_no_dense_values_is_the_candidates_clear_failure(pool: WorkerPool, output: str,
                                                                       named: str) -> None:
    """A meta or sparse output made the runner's own copy raise: reward -1, but a traceback of the judge's code."""
    result = judge(pool, task_source("return x + 1"), candidate_source(f"return {output}"))
    assert result.status is EvalStatus.INCORRECT, detail(result)
    assert named in result.message and "Traceback" not in result.message, detail(result)


# ----------------------------------------------------------------------------------------------------- precision

# KernelBench's matmuls draw all-positive inputs: fp16 operands (fp32 accumulation, what tensor cores do) err
# ~70x fp32's there, under the magnitude rule's limit of 64x + 64 ulps (~110x), and well within atol=rtol=1e-4.
MATMUL = task_source("return a @ b", "[torch.rand(64, 1024), torch.rand(1024, 64)]", "a, b")

# The float64 probes after the correctness runs draw an input set of their own (an unpublished seed), but they are
# still the calls after the correctness runs: the first four calls (two correctness inputs, two probes) get fp32,
# every later one fp16.
RECOGNISES_THE_PROBES = '''
_calls = [0]
'''
FP16_BUT_PROBES = '''
_calls[0] += 1
if _calls[0] <= 4:
    return a @ b
return a.half().float() @ b.half().float()
'''


def test_fp16_that_answers_the_probes_in_fp32_is_caught_in_a_timed_round(pool: WorkerPool) -> None:
    """The signature ran on the probes only; the timed round drawn for the float64 rule now runs it too."""
    plain = judge(pool, MATMUL, candidate_source("return a.half().float() @ b.half().float()", "a, b"),
                  guards=("precision",))
    assert plain.status is EvalStatus.RULE_VIOLATION and "precision" in plain.message, detail(plain)
    hidden = judge(pool, MATMUL, candidate_source(FP16_BUT_PROBES, "a, b", RECOGNISES_THE_PROBES),
                   mode=EvalMode.PROFILE, guards=("precision",))
    assert hidden.status is EvalStatus.RULE_VIOLATION, detail(hidden)
    assert "[precision] output 0 on inputs of timed round" in hidden.message, detail(hidden)
    assert "rounding" in hidden.message, detail(hidden)
    honest = judge(pool, MATMUL, candidate_source("return a @ b", "a, b"), mode=EvalMode.PROFILE,
                   guards=("precision",))
    assert "[precision]" not in honest.message, detail(honest)  # (its timing is judged by rules of its own)


# ------------------------------------------------------------------------------------------ the reference's own answer


def test_a_reference_that_is_not_a_function_of_its_inputs_is_the_tasks_problem_not_the_agents(
        pool: WorkerPool) -> None:
    """A reference with ``torch.rand_like`` in its forward fails every candidate, itself included: reward 0 (the
    task is invalid), not -1. A wrong answer on a deterministic task stays the candidate's -1."""
    noisy = task_source("return x + torch.rand_like(x)")
    itself = judge(pool, noisy, candidate_source("return x + torch.rand_like(x)"))
    assert itself.status is EvalStatus.INFRA_ERROR, detail(itself)
    assert "the reference gave other outputs on the same input set" in itself.message, detail(itself)
    wrong = judge(pool, task_source("return x + 1"), candidate_source("return x + 2"))
    assert wrong.status is EvalStatus.INCORRECT, detail(wrong)


def test_a_reference_that_returns_a_number_beside_its_tensors_is_the_tasks_problem(pool: WorkerPool) -> None:
    """``(y, 3)``: the number would be the candidate's process's word, so no candidate can be judged on it; the
    right answer was judged incorrect (-1), which is the task's doing, not the agent's (reward 0)."""
    task = task_source("return x + 1, 3")
    result = judge(pool, task, candidate_source("return x + 1, 3"))
    assert result.status is EvalStatus.INFRA_ERROR, detail(result)
    assert "returns a value of type int beside its tensors" in result.message, detail(result)

