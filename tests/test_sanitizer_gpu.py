"""The compute-sanitizer gates on the H200, through LocalJudge: the real tool, worker, runners and sandbox.

Two candidates are the bundled Swish extension with one memory bug each, otherwise correct (their outputs
match, so every other check passes): thread 0 of each block reads one float of a small scratch tensor,
either past its end (memcheck's) or never written (initcheck's), and flips a sign only if it holds a value
it never does. The bundled Swish passes both gates. All three SUBMITs go in at once, so their builds overlap.
"""

from __future__ import annotations

from concurrent.futures import Future

import pytest

from cudagym.judge.interface import EvalMode
from cudagym.judge.local import LocalJudge, probe_gpus
from cudagym.judge.pipeline import PipelineJudge
from cudagym.judge.protocol import DEFAULT_PROTOCOL
from cudagym.judge.records import EvalResult, EvalStatus
from cudagym.solution import Solution

pytestmark = pytest.mark.gpu

TASK_ID = "bundled/L1/01_Swish"
GATED = DEFAULT_PROTOCOL.with_changes(id="cudagym-v2-sanitized", sanitizer=("memcheck", "initcheck"))


def _with_scratch_read(reference: Solution, pad_floats: int, index: str) -> Solution:
    """Swish whose kernel also reads ``pad[index]`` (thread 0 of each block) from a ``pad_floats``-float tensor."""
    files = dict(reference.files)
    kernel, binding = files["kernels/swish.cu"], files["kernels/swish_binding.cpp"]
    edits = [
        ("float* __restrict__ y,\n", "float* __restrict__ y, const float* __restrict__ pad,\n"),
        ("  const long long n4 = n / 4;\n",
         f"  const float p = threadIdx.x == 0 ? pad[{index}] : 0.0f;  // the bug\n  const long long n4 = n / 4;\n"),
        ("    v.x = swish(v.x);\n", "    v.x = swish(v.x);\n    if (p == 12345.0f) v.x = -v.x;\n"),
        ('extern "C" int launch_swish(const float* x, float* y, long long n, cudaStream_t stream) {',
         'extern "C" int launch_swish(const float* x, float* y, const float* pad, long long n, cudaStream_t stream) {'),
        ("(x, y, n);", "(x, y, pad, n);"),
    ]
    for old, new in edits:
        assert old in kernel, old
        kernel = kernel.replace(old, new)
    for old, new in [
        ("float* y, long long n, cudaStream_t stream);",
         "float* y, const float* pad, long long n, cudaStream_t stream);"),
        ("  auto y = torch::empty_like(x);\n",
         f"  auto y = torch::empty_like(x);\n  auto pad = torch::empty({{{pad_floats}}}, x.options());\n"),
        ("y.data_ptr<float>(), x.numel(),", "y.data_ptr<float>(), pad.data_ptr<float>(), x.numel(),"),
    ]:
        assert old in binding, old
        binding = binding.replace(old, new)
    files["kernels/swish.cu"], files["kernels/swish_binding.cpp"] = kernel, binding
    return Solution("extension", files)


@pytest.fixture(scope="module")
def swish():
    from cudagym.sources.bundled import BundledSource

    source = BundledSource()
    return source.get(TASK_ID), source.solution(TASK_ID)


@pytest.fixture(scope="module")
def candidates(swish) -> dict[str, Solution]:
    _, reference = swish
    return {
        "bundled": reference,
        # 1000 floats (4000 bytes): the caching allocator's block is 4096, so without the tool nothing faults
        "out_of_bounds": _with_scratch_read(reference, 1000, "1000 + (blockIdx.x & 15)"),
        "uninitialised": _with_scratch_read(reference, 1024, "blockIdx.x & 1023"),
    }


@pytest.fixture(scope="module")
def judges():
    devices = list(probe_gpus("auto").device_ids[:1])
    with LocalJudge(GATED, devices=devices) as gated, PipelineJudge(DEFAULT_PROTOCOL, gated.pipeline) as plain:
        yield gated, plain


@pytest.fixture(scope="module")
def submitted(swish, candidates, judges) -> dict[str, Future[EvalResult]]:
    task, _ = swish
    gated, _ = judges
    return {name: gated.submit(task, solution, EvalMode.SUBMIT) for name, solution in candidates.items()}


def _show(name: str, result: EvalResult) -> None:
    print(f"\n{name}: {result.status.value}, {result.wall_time_s:.1f} s: {result.message[:1500]}")
    print("\n".join(n for n in result.notes if "compute-sanitizer" in n))


def test_the_bundled_swish_passes_both_gates(submitted) -> None:
    result = submitted["bundled"].result()
    _show("bundled", result)
    assert result.status is EvalStatus.OK and not result.violations, result.message + result.log[-3000:]
    for tool in ("memcheck", "initcheck"):
        assert any(n.startswith(f"compute-sanitizer {tool}: no errors") for n in result.notes), result.notes


def test_an_out_of_bounds_read_is_rejected_by_memcheck(swish, candidates, submitted, judges) -> None:
    task, _ = swish
    result = submitted["out_of_bounds"].result()
    _show("out_of_bounds", result)
    assert result.status is EvalStatus.RULE_VIOLATION, result.message + result.log[-3000:]
    assert "sanitizer_memcheck" in {v.guard for v in result.violations}, result.violations
    message = next(v.message for v in result.violations if v.guard == "sanitizer_memcheck")
    assert "Invalid __global__ read of size 4 bytes" in message and "out of bounds" in message
    ungated = judges[1].evaluate(task, candidates["out_of_bounds"], EvalMode.VERIFY)
    assert ungated.status is EvalStatus.OK, ungated.message  # otherwise correct: only the tool sees it


def test_an_uninitialised_read_is_rejected_by_initcheck(swish, candidates, submitted, judges) -> None:
    task, _ = swish
    result = submitted["uninitialised"].result()
    _show("uninitialised", result)
    assert result.status is EvalStatus.RULE_VIOLATION, result.message + result.log[-3000:]
    assert [v.guard for v in result.violations] == ["sanitizer_initcheck"], result.violations
    assert "Uninitialized __global__ memory read" in result.violations[0].message
    ungated = judges[1].evaluate(task, candidates["uninitialised"], EvalMode.VERIFY)
    assert ungated.status is EvalStatus.OK, ungated.message
