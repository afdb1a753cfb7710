"""The raw-format runtime, side by side: the hand-written driver layer (``cudagym.runtime``) against CuPy.

Issue 21 decides from these figures whether the raw runtime and its NVRTC path sit on CuPy
(:mod:`cudagym.runtime_cupy`, ``CUDAGYM_RAW_RUNTIME=cupy``). One run on the GPU host::

    pytest benchmarks/bench_raw_runtime.py --benchmark-only -s --benchmark-columns=min,median,max,rounds

1. **Compile feedback** of a fresh ``kernels/relu.cu`` (a never-seen comment per round: no cache hit), p50:
   ``build`` is the judge's build stage (the confined NVRTC server: what an agent waits for); ``nvrtc-ctypes``
   and ``nvrtc-cupy`` compile the same source with the same flags in this process through our ctypes binding
   and through CuPy's (``cupy_backends.cuda.libs.nvrtc``): the part CuPy could replace; ``cupy-rawmodule`` is
   CuPy's own way, ``RawModule(code=...)`` compiled and loaded (its options; it needs a GPU).
2. **Launch overhead** per ``kernels.relu(grid=, block=, args=(x, y, n))`` call as model_new.py makes it,
   host time over 1,000 launches of a 4-block kernel (the GPU is never the bottleneck): ``driver`` and
   ``cupy`` backends, and for scale ``cupy-direct`` (a ``RawKernel`` called with ready NumPy arguments: CuPy's
   floor, none of our checks) and ``torch-op`` (``torch.relu``).
3. **Full evaluation** p50: ``LocalJudge`` PROFILE of a raw Swish solution (build and baselines cached), one
   judge per backend; the solution raises unless ``runtime.load`` returned the backend under test.

What each needs on a CPU-only host (the build stage compiles without a GPU): the driver backend needs
nothing to import and libcuda only to launch; the build needs nvcc or a libnvrtc (toolkit or
``nvidia-cuda-nvrtc``). CuPy (``cupy-cuda13x``, a 70 MB wheel) imports without a GPU, and its low-level
NVRTC binding compiles without one given a libnvrtc, but its ``compile_using_nvrtc`` and ``RawModule``
query the device and fail there (``cudaErrorInsufficientDriver``): a CuPy build stage could use only the
low-level binding. The figures are printed as one table at the end (``-s``).
"""

from __future__ import annotations

import contextlib
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


@contextlib.contextmanager
def backend(name: str) -> Iterator[None]:
    """``CUDAGYM_RAW_RUNTIME`` set to ``name`` inside the block (for this process and the workers it starts)."""
    before = os.environ.get(runtime.RUNTIME_ENV)
    os.environ[runtime.RUNTIME_ENV] = name
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(runtime.RUNTIME_ENV, None)
        else:
            os.environ[runtime.RUNTIME_ENV] = before


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> BuildCache:
    return BuildCache(os.environ.get("CUDAGYM_BENCH_CACHE") or tmp_path_factory.mktemp("bench-raw-runtime"))


# --- 1. compile feedback ---------------------------------------------------------------------------------------

def _compile_round(variant: str, cache: BuildCache) -> None:
    source = fresh(RAW["kernels/relu.cu"])
    options = [*NVRTC_FLAGS, "-arch=sm_90"]
    if variant == "build":
        result = build(TASK, Solution("raw", {**RAW, "kernels/relu.cu": source}), PROTOCOL, cache)
        assert result.ok and not result.cached, result.message
    elif variant == "nvrtc-ctypes":
        assert nvrtc.compile_source(nvrtc.find_nvrtc(), source, "relu.cu", options).ok
    elif variant == "nvrtc-cupy":
        from cupy_backends.cuda.libs import nvrtc as cupy_nvrtc

        prog = cupy_nvrtc.createProgram(source, "relu.cu", [], [])
        try:
            cupy_nvrtc.compileProgram(prog, options)
            assert cupy_nvrtc.getCUBIN(prog)[:4] == b"\x7fELF"
        finally:
            cupy_nvrtc.destroyProgram(prog)
    else:  # cupy-rawmodule: CuPy's own compile (its options and on-disk cache) and module load
        import cupy

        cupy.RawModule(code=source, options=("-std=c++17",)).get_function("relu")


@pytest.mark.parametrize("variant", ["build", "nvrtc-ctypes", "nvrtc-cupy", "cupy-rawmodule"])
def test_compile_feedback(benchmark: Any, variant: str, cache: BuildCache, monkeypatch: pytest.MonkeyPatch) -> None:
    if variant != "build" and not nvrtc.find_nvrtc():
        pytest.skip("libnvrtc not found")
    if variant in ("nvrtc-cupy", "cupy-rawmodule"):
        pytest.importorskip("cupy")
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
    with backend("cupy" if variant.startswith("cupy") else "driver"):
        runtime.use_manifest(manifest)
        try:
            kernels = runtime.load("kernels/relu.cu")
        finally:
            runtime.use_manifest(None)
    if variant != "cupy-direct":
        return lambda: kernels.relu(grid=(4,), block=(256,), args=(x, y, n))
    import cupy
    import numpy as np

    from cudagym.runtime_cupy import CupyKernelModule

    assert isinstance(kernels, CupyKernelModule)
    fn = kernels.raw_function(torch.cuda.current_device(), "relu")
    args = (np.uint64(x.data_ptr()), np.uint64(y.data_ptr()), np.int64(n))
    stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream, torch.cuda.current_device())

    def direct() -> None:
        with stream:
            fn((4,), (256,), args)

    return direct


@needs_gpu
@pytest.mark.parametrize("variant", ["driver", "cupy", "cupy-direct", "torch-op"])
def test_launch_overhead_per_call(benchmark: Any, variant: str, relu_manifest: str) -> None:
    if variant.startswith("cupy"):
        pytest.importorskip("cupy")
    launch = _launcher(variant, relu_manifest)

    def thousand() -> None:
        for _ in range(LAUNCHES):
            launch()
        torch.cuda.synchronize()  # the GPU has long finished: 1,000 tiny kernels take less than their launches

    thousand()
    benchmark.pedantic(thousand, rounds=20, iterations=1, warmup_rounds=2)
    record(benchmark, "launch overhead per call", variant, 1e6 / LAUNCHES, "us")


# --- 3. full evaluation --------------------------------------------------------------------------------------

def _swish_solution(name: str) -> Solution:
    from cudagym.integrations.kernel_families import get_family
    from cudagym.integrations.launch_params import LaunchParams

    files = get_family("bundled/L1/01_Swish").files(LaunchParams(256, 1, 4))
    expected = "CupyKernelModule" if name == "cupy" else "KernelModule"
    probe = (f"if type(kernels).__name__ != {expected!r}:  # the backend under test, or no figure\n"
             f"    raise RuntimeError(f'runtime.load gave {{type(kernels).__name__}}, expected {expected}')\n")
    model = files["model_new.py"].replace("BLOCK, PER_BLOCK", probe + "BLOCK, PER_BLOCK", 1)
    return Solution("raw", {**files, "model_new.py": model})


@pytest.fixture(scope="module")
def judges() -> Iterator[dict[str, Any]]:
    made: dict[str, Any] = {}
    yield made
    for judge in made.values():
        judge.close()


@needs_gpu
@pytest.mark.parametrize("name", ["driver", "cupy"])
def test_full_evaluation(benchmark: Any, name: str, judges: dict[str, Any]) -> None:
    from cudagym.judge import EvalMode
    from cudagym.judge.local import LocalJudge
    from cudagym.sources.bundled import BundledSource

    if name == "cupy":
        pytest.importorskip("cupy")
    task, solution = BundledSource().get("bundled/L1/01_Swish"), _swish_solution(name)
    # The judge's processes inherit CUDAGYM_RAW_RUNTIME: its worker, and each job's runner, which the pool
    # starts ahead of the job (so the variable stays set for every round, not just the first).
    with backend(name):
        judge = judges[name] = LocalJudge()
        first = judge.evaluate(task, solution, EvalMode.PROFILE)  # worker start, build, baselines
        assert first.correct, first.message
        result = benchmark.pedantic(judge.evaluate, args=(task, solution, EvalMode.PROFILE), rounds=8,
                                    iterations=1)
    assert result.correct, result.message
    benchmark.extra_info.update(candidate_median_us=result.candidate.median_us,
                                speedup_vs_eager=result.speedup_vs_eager)
    record(benchmark, "full evaluation p50", name, 1e3, "ms")
    FIGURES.setdefault("Swish candidate median (us)", {})[name] = result.candidate.median_us
