"""Every solution format on a real GPU: correct, wrong, slow, crashing and non-compiling candidates on the
bundled Swish task end in the status and tier they should.

Run on the GPU host::

    pytest -m gpu tests/test_formats_gpu.py -v -s

The ``extension`` candidates are the bundled reference solution and edits of it; the ``raw`` and ``inline``
ones are tests/formats/swish_raw and tests/formats/swish_inline (the same kernel). Wrong, slow and crashing
variants change only model_new.py's constants (a slope, the grid, the element count), so each format's
kernel is compiled once. Correct and slow candidates are judged under SUBMIT with eager and torch.compile
timed in the same run; their tiers come from :func:`cudagym.reward.tier_of`, as the env computes them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from gpu_jobs import edited, judge, judge_in_child, make_job, stage_build

from cudagym.judge.harness import is_context_poisoned
from cudagym.judge.interface import EvalMode
from cudagym.judge.job import KnownBaselines
from cudagym.judge.protocol import DEFAULT_PROTOCOL
from cudagym.judge.records import EvalResult, EvalStatus
from cudagym.reward import tier_of
from cudagym.solution import Solution

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parent
TASK = "bundled/L1/01_Swish"
FOLDERS = {
    "extension": ROOT.parent / "envs/bundled/solutions/L1/01_Swish",
    "raw": ROOT / "formats/swish_raw",
    "inline": ROOT / "formats/swish_inline",
}
KERNEL_FILE = {"extension": "kernels/swish.cu", "raw": "kernels/swish.cu", "inline": "model_new.py"}
# (file, old, new) per format and variant
EDITS = {
    "extension": {
        "wrong": ("kernels/swish.cu", "return v / (1.0f + expf(-v));", "return v / (1.0f + expf(v));"),
        "slow": ("kernels/swish.cu", "if (blocks > cap) blocks = cap;", "blocks = 1;  // one block for it all"),
        "crash": ("kernels/swish.cu", "y4[i] = v;", "y4[i + (1LL << 40)] = v;  // far outside the allocation"),
        "broken": ("kernels/swish.cu", "const long long n4 = n / 4;", "const long long n4 = n / 4"),
    },
    **{fmt: {
        "wrong": ("model_new.py", "BETA = 1.0", "BETA = 2.0"),
        "slow": ("model_new.py", "MAX_BLOCKS = 132 * 16", "MAX_BLOCKS = 2"),
        "crash": ("model_new.py", "n = x.numel()", "n = x.numel() * 4096  # walks far past the tensors"),
        "broken": (KERNEL_FILE[fmt], "const float v = x[i];", "const float v = x[i]"),
    } for fmt in ("raw", "inline")},
}
SLOW = DEFAULT_PROTOCOL.with_changes(id="cudagym-v1-slow-candidates", max_runs=40)


@pytest.fixture(scope="module")
def build():
    return stage_build()


def candidate(fmt: str, variant: str = "") -> Solution:
    solution = Solution.from_dir(FOLDERS[fmt], fmt)
    return edited(solution, *EDITS[fmt][variant]) if variant else solution


def tier(result: EvalResult) -> int:
    if not result.correct:
        return -1
    threshold = DEFAULT_PROTOCOL.threshold
    return tier_of(result.candidate.median_us, result.eager.median_us, result.compiled.median_us,
                   threshold_vs_eager=threshold, threshold_vs_compile=threshold)


def submit(build, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, solution: Solution, protocol=DEFAULT_PROTOCOL):
    job = make_job(build, tmp_path, TASK, solution, protocol, EvalMode.SUBMIT, KnownBaselines())
    assert job.build.ok, job.build.message + "\n" + job.build.log[-3000:]
    return judge(job, monkeypatch)


@pytest.mark.parametrize("fmt", list(FOLDERS))
def test_correct_candidate_earns_tier_two_or_three(build, tmp_path, monkeypatch, fmt):
    result = submit(build, tmp_path, monkeypatch, candidate(fmt))
    assert result.status is EvalStatus.OK, result.message
    assert result.violations == () and result.compiled.measured
    print(f"{fmt}: {result.candidate.median_us:.1f} us, {result.speedup_vs_eager:.2f}x eager, "
          f"{result.speedup_vs_compile:.2f}x compile, tier {tier(result)}")
    assert tier(result) in (2, 3)


@pytest.mark.parametrize("fmt", list(FOLDERS))
def test_wrong_candidate_is_incorrect_with_tier_minus_one(build, tmp_path, monkeypatch, fmt):
    job = make_job(build, tmp_path, TASK, candidate(fmt, "wrong"), DEFAULT_PROTOCOL)
    assert job.build.ok, job.build.message
    result = judge(job, monkeypatch)
    assert result.status is EvalStatus.INCORRECT, result.message
    assert all(not c.passed and c.mismatch_count > 0 for c in result.checks)
    assert tier(result) == -1


@pytest.mark.parametrize("fmt", list(FOLDERS))
def test_slow_candidate_is_correct_with_tier_one(build, tmp_path, monkeypatch, fmt):
    result = submit(build, tmp_path, monkeypatch, candidate(fmt, "slow"), SLOW)
    assert result.status is EvalStatus.OK, result.message
    print(f"{fmt} slow: {result.speedup_vs_eager:.3f}x eager")
    assert 0 < result.speedup_vs_eager < 0.5
    assert tier(result) == 1


@pytest.mark.parametrize("fmt", list(FOLDERS))
def test_crashing_candidate_is_a_runtime_error_with_tier_minus_one(build, tmp_path, fmt):
    job = make_job(build, tmp_path, TASK, candidate(fmt, "crash"), DEFAULT_PROTOCOL)
    assert job.build.ok, job.build.message
    result = judge_in_child(job, tmp_path)  # an illegal address poisons the CUDA context of its process
    assert result.status is EvalStatus.RUNTIME_ERROR, result.message
    assert "illegal memory access" in result.message or "misaligned address" in result.message, result.message
    assert is_context_poisoned(result)
    assert tier(result) == -1


@pytest.mark.parametrize("fmt", list(FOLDERS))
def test_non_compiling_candidate_is_build_failed_with_the_line_named(build, tmp_path, monkeypatch, fmt):
    job = make_job(build, tmp_path, TASK, candidate(fmt, "broken"), DEFAULT_PROTOCOL)
    assert not job.build.ok
    errors = [d for d in job.build.diagnostics if d.severity.value == "error"]
    assert errors and errors[0].file.endswith(KERNEL_FILE[fmt]) and errors[0].line > 0, job.build.diagnostics
    result = judge(job, monkeypatch)
    assert result.status is EvalStatus.BUILD_FAILED
    assert tier(result) == -1
