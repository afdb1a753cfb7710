"""The raw-format runtime on CuPy, measured against CuPy's own floor and a torch op.

Issue 21 moved the raw runtime (:mod:`cudagym.runtime`) and its NVRTC path onto CuPy, by the figures of the
side-by-side this file made then (CuPy against the former ctypes driver layer). One run on the GPU host::

    pytest benchmarks/bench_raw_runtime.py --benchmark-only -s --benchmark-columns=min,median,max,rounds

1. **Compile feedback** of a fresh ``kernels/relu.cu`` (a never-seen comment per round: no cache hit), p50:
   ``build`` is the judge's build stage (the confined NVRTC server on CuPy's binding: what an agent waits
   for); ``nvrtc-cupy`` compiles the same source with the same flags in this process through CuPy's binding
   (``cupy_backends.cuda.libs.nvrtc``, no GPU needed); ``cupy-rawmodule`` is CuPy's own way,
   ``RawModule(code=...)`` compiled and loaded (its options; it needs a GPU).
2. **Launch overhead** per ``kernels.relu(grid=, block=, args=(x, y, n))`` call as model_new.py makes it,
   host time over 1,000 launches of a 4-block kernel (the GPU is never the bottleneck): ``runtime`` (our
   checks and marshalling, then CuPy), and for scale ``cupy-direct`` (the same ``RawKernel`` called with
   ready NumPy arguments: CuPy's floor, none of our checks) and ``torch-op`` (``torch.relu``).
3. **Full evaluation** p50: ``LocalJudge`` PROFILE of a raw Swish solution (build and baselines cached), each
   round after a pause for a spare runner to start (``CUDAGYM_BENCH_ROUND_GAP_S``, default 6 s).

On a CPU-only host the build stage needs nvcc, or CuPy with a libnvrtc it can load (an ``nvidia-cuda-nvrtc``
wheel or a toolkit's); CuPy imports without a GPU and its low-level NVRTC binding compiles without one, but
its ``compile_using_nvrtc`` and ``RawModule`` query the device and fail there (``cudaErrorInsufficientDriver``).
The figures are printed as one table at the end (``-s``).
"""

from __future__ import annotations

import itertools
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cudagym import runtime
from cudagym.judge.build import BuildCache, build, nvrtc
from cudagym.judge.build.raw import NVRTC_FLAGS
from cudagym.judge.protocol import DEFAULT_PROTOCOL
from cudagym.solution import Solution, get_format
from cudagym.templates import example_task

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(
    shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(), reason="nvcc not installed")
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

TASK = example_task("bench")
PROTOCOL = DEFAULT_PROTOCOL.with_changes(id="bench-raw-runtime", build_timeout_s=600)
RAW = get_format("raw").example_files()
COUNTER = itertools.count()
LAUNCHES = 1000
FIGURES: dict[str, dict[str, float]] = {}  # measurement -> variant -> p50 (ms, or us per launch)


def fresh(text: str) -> str:
    """``text`` with a never-seen comment, so no cache entry matches it."""
    return f"{text}\n// round {next(COUNTER)} {time.time_ns()}\n"


def record(benchmark: Any, measurement: str, variant: str, scale: float, unit: str) -> None:
    """Keep the round median (seconds x ``scale``) for the closing table and in ``extra_info``."""
    value = benchmark.stats.stats.median * scale
    FIGURES.setdefault(f"{measurement} ({unit})", {})[variant] = value
    benchmark.extra_info[f"p50_{unit.replace(' ', '_')}"] = value


@pytest.fixture(scope="module", autouse=True)
def closing_table() -> Iterator[None]:
    yield
    print("\n| measurement | variant | p50 |\n|---|---|---:|")
    for name, row in FIGURES.items():
        for variant, value in row.items():
            print(f"| {name} | {variant} | {value:.4g} |")


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> BuildCache:
    return BuildCache(os.environ.get("CUDAGYM_BENCH_CACHE") or tmp_path_factory.mktemp("bench-raw-runtime"))


# --- 1. compile feedback ---------------------------------------------------------------------------------------

def _compile_round(variant: str, cache: BuildCache) -> None:
    source = fresh(RAW["kernels/relu.cu"])
    if variant == "build":
        result = build(TASK, Solution("raw", {**RAW, "kernels/relu.cu": source}), PROTOCOL, cache)
        assert result.ok and not result.cached, result.message
    elif variant == "nvrtc-cupy":
        assert nvrtc.compile_source(source, "relu.cu", [*NVRTC_FLAGS, "--gpu-architecture=sm_90"]).ok
    else:  # cupy-rawmodule: CuPy's own compile (its options and on-disk cache) and module load
        import cupy

        cupy.RawModule(code=source, options=("-std=c++17",)).get_function("relu")


@pytest.mark.parametrize("variant", ["build", "nvrtc-cupy", "cupy-rawmodule"])
def test_compile_feedback(benchmark: Any, variant: str, cache: BuildCache, monkeypatch: pytest.MonkeyPatch) -> None:
    if variant != "build" and not nvrtc.find_nvrtc():
        pytest.skip("libnvrtc not found")
    if variant == "cupy-rawmodule" and not torch.cuda.is_available():
        pytest.skip("CuPy's RawModule queries the device: no GPU here")
    monkeypatch.setenv("CUDAGYM_RAW_BACKEND", "nvrtc" if nvrtc.find_nvrtc() else "nvcc")
    monkeypatch.setenv("CUPY_CACHE_DIR", str(cache.root / "cupy"))
    _compile_round(variant, cache)  # library load, NVRTC child start
    benchmark.pedantic(_compile_round, args=(variant, cache), rounds=15, iterations=1)
    record(benchmark, "compile feedback p50", variant, 1e3, "ms")


# --- 2. launch overhead --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def relu_manifest(cache: BuildCache) -> str:
    result = build(TASK, Solution("raw", RAW), PROTOCOL, cache)
    assert result.ok, result.message
    return result.artifact_path


def _launcher(variant: str, manifest: str) -> Any:
    """A function making one launch of relu over 1,024 floats, as ``variant`` does it."""
    x = torch.randn(1024, device="cuda")
    y = torch.empty_like(x)
    n = x.numel()
    if variant == "torch-op":
        return lambda: torch.relu(x)
    runtime.use_manifest(manifest)
    try:
        kernels = runtime.load("kernels/relu.cu")
    finally:
        runtime.use_manifest(None)
    if variant == "runtime":
        return lambda: kernels.relu(grid=(4,), block=(256,), args=(x, y, n))
    import cupy
    import numpy as np

    fn = kernels.raw_function(torch.cuda.current_device(), "relu")
    args = (np.uint64(x.data_ptr()), np.uint64(y.data_ptr()), np.int64(n))
    stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream, torch.cuda.current_device())

    def direct() -> None:
        with stream:
            fn((4,), (256,), args)

    return direct


@needs_gpu
@pytest.mark.parametrize("variant", ["runtime", "cupy-direct", "torch-op"])
def test_launch_overhead_per_call(benchmark: Any, variant: str, relu_manifest: str) -> None:
    launch = _launcher(variant, relu_manifest)

    def thousand() -> None:
        for _ in range(LAUNCHES):
            launch()
        torch.cuda.synchronize()  # the GPU has long finished: 1,000 tiny kernels take less than their launches

    thousand()
    benchmark.pedantic(thousand, rounds=20, iterations=1, warmup_rounds=2)
    record(benchmark, "launch overhead per call", variant, 1e6 / LAUNCHES, "us")


# --- 3. full evaluation --------------------------------------------------------------------------------------

def _swish_solution() -> Solution:
    from cudagym.integrations.kernel_families import get_family
    from cudagym.integrations.launch_params import LaunchParams

    return Solution("raw", get_family("bundled/L1/01_Swish").files(LaunchParams(256, 1, 4)))


ROUND_GAP_S = float(os.environ.get("CUDAGYM_BENCH_ROUND_GAP_S", "6"))


def _runners_started() -> None:
    """Before each timed evaluation: time for the pool's next spare runner to start (about 5 s on the H200
    host), so the figure is one evaluation's latency, not how fast the pool starts runners (bench_vec.py
    measures that throughput)."""
    time.sleep(ROUND_GAP_S)


@needs_gpu
def test_full_evaluation(benchmark: Any) -> None:
    from cudagym.judge import EvalMode
    from cudagym.judge.local import LocalJudge
    from cudagym.sources.bundled import BundledSource

    task, solution = BundledSource().get("bundled/L1/01_Swish"), _swish_solution()
    judge = LocalJudge()
    try:
        first = judge.evaluate(task, solution, EvalMode.PROFILE)  # worker start, build, baselines
        assert first.correct, first.message
        result = benchmark.pedantic(judge.evaluate, args=(task, solution, EvalMode.PROFILE), rounds=8,
                                    setup=_runners_started, iterations=1)
    finally:
        judge.close()
    assert result.correct, result.message
    benchmark.extra_info.update(candidate_median_us=result.candidate.median_us,
                                speedup_vs_eager=result.speedup_vs_eager)
    record(benchmark, "full evaluation p50", "runtime", 1e3, "ms")
    FIGURES.setdefault("Swish candidate median (us)", {})["runtime"] = result.candidate.median_us
