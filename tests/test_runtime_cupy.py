"""The raw runtime sits on CuPy: CuPy loads lazily and its absence is a clear error (CPU); CuPy objects do the
launches on torch's streams, and the judge's PTX loads through them (GPU)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from test_runtime import HAS_COMPILER, TYPES_CU

from cudagym import runtime
from cudagym.judge.build import BuildCache, build
from cudagym.judge.records import BuildStatus
from cudagym.solution import Solution, get_format
from cudagym.templates import example_task

needs_compiler = pytest.mark.skipif(not HAS_COMPILER, reason="neither nvcc nor libnvrtc is installed")
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    monkeypatch.delenv(runtime.MANIFEST_ENV, raising=False)
    monkeypatch.setenv("CUDAGYM_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cudagym-build-cache"))
    runtime.use_manifest(None)
    yield
    runtime.use_manifest(None)


@pytest.fixture
def kernels(tmp_path_factory: pytest.TempPathFactory) -> runtime.KernelModule:
    if not HAS_COMPILER:
        pytest.skip("neither nvcc nor libnvrtc is installed")
    source = tmp_path_factory.getbasetemp() / "kernels.cu"
    if not source.exists():
        source.write_text(TYPES_CU)
    return runtime.load(str(source))


@needs_compiler
def test_a_missing_cupy_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "kernels.cu").write_text(TYPES_CU)
    monkeypatch.setitem(sys.modules, "cupy", None)  # what an environment without CuPy imports
    with pytest.raises(RuntimeError, match="CuPy for CUDA 13, which is not installed: pip install cupy-cuda13x"):
        runtime.load(str(tmp_path / "kernels.cu"))
    with pytest.raises(RuntimeError, match="pip install cupy-cuda13x"):
        runtime.use_manifest(tmp_path / "manifest.json")


def test_importing_the_runtime_imports_neither_cupy_nor_torch() -> None:
    code = "import sys, cudagym.runtime; print('cupy' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


@needs_compiler
def test_pointing_at_a_manifest_imports_cupy_before_the_candidate_runs(tmp_path: Path) -> None:
    cache = BuildCache(tmp_path / "cache")
    result = build(example_task("test"), Solution("raw", get_format("raw").example_files()), None, cache)
    assert result.status is BuildStatus.OK, result.message
    code = ("import sys; from cudagym import runtime; runtime.use_manifest(sys.argv[1]); "
            "print('cupy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, result.artifact_path], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "True"


def test_one_backend_only(kernels: runtime.KernelModule) -> None:
    assert not hasattr(runtime, "RUNTIME_ENV") and not hasattr(runtime, "_driver")
    assert type(kernels) is runtime.KernelModule and type(kernels.echo) is runtime.Kernel
    assert kernels.cupy is sys.modules["cupy"]


# --- GPU: CuPy's objects on torch's streams --------------------------------------------------------------------

@pytest.mark.gpu
@needs_gpu
def test_gpu_launches_are_cupy_raw_kernels_on_torchs_current_stream(kernels: runtime.KernelModule) -> None:
    import cupy

    matrix = torch.randn(4096, 8, device="cuda")
    y = torch.empty(4096, device="cuda")
    kernels.column(grid=16, block=256, args=(matrix[:, 5:], y, 4096, 8))  # the module loads here, untimed
    torch.cuda.synchronize()
    assert isinstance(kernels.column._raw[torch.cuda.current_device()], cupy.RawKernel)
    y.zero_()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # the launch below queues behind this on the side stream, not on CuPy's
        kernels.column(grid=16, block=256, args=(matrix[:, 5:], y, 4096, 8))
        done = torch.cuda.Event()
        done.record()
    assert not done.query()  # still behind the sleep: launched on the side stream, asynchronously
    done.synchronize()
    assert torch.equal(y, matrix[:, 5])
    assert cupy.cuda.get_current_stream().ptr != side.cuda_stream  # CuPy's current stream is left as it was


@pytest.mark.gpu
@needs_gpu
def test_gpu_the_launch_cover_ptx_loads_and_spins() -> None:
    from cudagym.judge.harness.cover import DECLARATION, KERNEL, PTX_FILE

    spin = runtime.load_image(PTX_FILE, DECLARATION)[KERNEL]
    spin(grid=1, block=32, args=(1000,))  # the driver compiles the PTX here
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    spin(grid=1, block=32, args=(2_000_000,))  # two million cycles: about a millisecond at H200 clocks
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) > 0.2
    with pytest.raises(TypeError, match="cycles.*does not fit"):
        spin(grid=1, block=32, args=(2**63,))


@pytest.mark.gpu
@needs_gpu
def test_gpu_repeated_launches_reuse_one_external_stream(kernels: runtime.KernelModule) -> None:
    out = torch.zeros(9, dtype=torch.int64, device="cuda")
    for i in range(100):
        kernels.echo(grid=1, block=1, args=(out, i, 2, 3, 0.5, 0.25, False, 4, 5, 6))
    torch.cuda.synchronize()
    assert out.tolist() == [99, 2, 3, 500, 250, 0, 4, 5, 6]
    assert list(kernels.echo._streams) == [(torch.cuda.current_stream().cuda_stream, torch.cuda.current_device())]
