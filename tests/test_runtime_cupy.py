"""The CuPy backend of the raw runtime (CUDAGYM_RAW_RUNTIME=cupy): selection and checks (CPU), launches (GPU)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from test_runtime import TYPES_CU

from cudagym import runtime
from cudagym.judge.build import BuildCache, build, nvrtc
from cudagym.judge.records import BuildStatus
from cudagym.solution import Solution, get_format
from cudagym.templates import example_task

HAS_COMPILER = shutil.which("nvcc") is not None or Path("/usr/local/cuda/bin/nvcc").exists() \
    or bool(nvrtc.find_nvrtc())
needs_compiler = pytest.mark.skipif(not HAS_COMPILER, reason="neither nvcc nor libnvrtc is installed")
gpu = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

KERNELS_CU = TYPES_CU  # the driver backend's kernels: the same launches on both backends


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    monkeypatch.delenv(runtime.MANIFEST_ENV, raising=False)
    monkeypatch.setenv("CUDAGYM_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cudagym-build-cache"))
    runtime.use_manifest(None)
    yield
    runtime.use_manifest(None)


def load_as(backend: str, root: Path, monkeypatch: pytest.MonkeyPatch) -> runtime.KernelModule:
    monkeypatch.setenv(runtime.RUNTIME_ENV, backend)
    source = root / "kernels.cu"
    if not source.exists():
        source.write_text(KERNELS_CU)
    return runtime.load(str(source))


@pytest.fixture
def cupy_kernels(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> runtime.KernelModule:
    pytest.importorskip("cupy")
    if not HAS_COMPILER:
        pytest.skip("neither nvcc nor libnvrtc is installed")
    return load_as("cupy", tmp_path_factory.getbasetemp(), monkeypatch)


@needs_compiler
def test_the_environment_picks_the_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    driver = load_as("driver", tmp_path, monkeypatch)
    assert type(driver) is runtime.KernelModule and type(driver.echo) is runtime.Kernel
    monkeypatch.delenv(runtime.RUNTIME_ENV)
    assert type(runtime.load(str(tmp_path / "kernels.cu"))) is runtime.KernelModule  # the default
    with pytest.raises(ValueError, match="CUDAGYM_RAW_RUNTIME to be one of driver, cupy, got 'cuda'"):
        load_as("cuda", tmp_path, monkeypatch)
    pytest.importorskip("cupy")
    from cudagym.runtime_cupy import CupyKernel, CupyKernelModule

    kernels = load_as("cupy", tmp_path, monkeypatch)
    assert isinstance(kernels, CupyKernelModule) and isinstance(kernels.echo, CupyKernel)
    assert set(kernels.names) == {"echo", "big_smem", "column"} and "long long* out" in repr(kernels.echo)
    with pytest.raises(AttributeError, match="has no extern"):
        kernels.gelu  # noqa: B018


def test_cupy_backend_checks_arguments_as_the_driver_does(cupy_kernels: runtime.KernelModule) -> None:
    echo = cupy_kernels.echo
    with pytest.raises(TypeError, match=r"kernel echo\(.*\) takes 10 argument\(s\), got 2"):
        echo(grid=1, block=1, args=(None, 1))
    good: list[object] = [None, 1, 2, 3, 1.5, 2.5, True, 4, 5, 6]
    cases = {1: (2**31, "does not fit"), 8: (300, "does not fit"), 3: (1.5, "expected an int"),
             4: ("x", "expected a float"), 6: (None, "expected a bool"), 0: (5, "expected a CUDA torch.Tensor")}
    for index, (value, message) in cases.items():
        args = list(good)
        args[index] = value
        with pytest.raises(TypeError, match=f"parameter {echo.signature.params[index].name}.*{message}"):
            echo(grid=1, block=1, args=args)
    with pytest.raises(TypeError, match="expected a CUDA tensor"):
        echo(grid=1, block=1, args=[torch.zeros(9, dtype=torch.int64), *good[1:]])
    with pytest.raises(ValueError, match="grid dimension >= 1"):
        echo(grid=(0,), block=1, args=good)


@needs_compiler
def test_a_missing_cupy_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)  # what an environment without CuPy imports
    with pytest.raises(RuntimeError, match=r"needs CuPy for CUDA 13: pip install 'cudagym\[cupy\]'"):
        load_as("cupy", tmp_path, monkeypatch)


def test_importing_the_backend_imports_neither_cupy_nor_torch() -> None:
    code = "import sys, cudagym.runtime_cupy; print('cupy' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


@needs_compiler
def test_pointing_at_a_manifest_loads_the_chosen_backend_first(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("cupy")
    cache = BuildCache(tmp_path / "cache")
    result = build(example_task("test"), Solution("raw", get_format("raw").example_files()), None, cache)
    assert result.status is BuildStatus.OK, result.message
    monkeypatch.setenv(runtime.RUNTIME_ENV, "cupy")
    monkeypatch.delitem(sys.modules, "cudagym.runtime_cupy", raising=False)
    runtime.use_manifest(result.artifact_path)  # the GPU worker does this before the candidate's code runs
    assert "cudagym.runtime_cupy" in sys.modules and "cupy" in sys.modules


# --- GPU: the same launches on both backends -----------------------------------------------------------------

@pytest.mark.parametrize("backend", ["driver", "cupy"])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_example_model_gives_the_same_output_on_both(backend: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    if backend == "cupy":
        pytest.importorskip("cupy")
    monkeypatch.setenv(runtime.RUNTIME_ENV, backend)
    example = get_format("raw").example_files()
    result = build(example_task("test"), Solution("raw", example), None, BuildCache(tmp_path / "cache"))
    assert result.status is BuildStatus.OK, result.message
    for rel, text in example.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    runtime.use_manifest(result.artifact_path)
    sys.modules.pop("model_new", None)
    try:
        import model_new

        assert type(model_new.kernels).__name__ == ("CupyKernelModule" if backend == "cupy" else "KernelModule")
        x = torch.randn(1_000_003, device="cuda")
        y = model_new.ModelNew()(x)
        torch.cuda.synchronize()
        assert torch.equal(y, torch.relu(x))
    finally:
        sys.modules.pop("model_new", None)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_cupy_scalar_widths_smem_strided_stream_and_errors(cupy_kernels: runtime.KernelModule) -> None:
    out = torch.zeros(9, dtype=torch.int64, device="cuda")
    cupy_kernels.echo(grid=1, block=1, args=(out, -7, 2**32 - 1, -(2**40), 1.5, 2.25, True, -3, 255, 2**40))
    torch.cuda.synchronize()
    assert out.tolist() == [-7, 2**32 - 1, -(2**40), 1500, 2250, 1, -3, 255, 2**40]
    threads = 1024
    smem = torch.empty(threads, device="cuda")
    cupy_kernels.big_smem(grid=1, block=threads, args=(smem,), shared_mem=64 * 1024)  # opted in above 48 KiB
    torch.cuda.synchronize()
    assert smem.tolist() == [float(threads - 1 - i) for i in range(threads)]
    matrix = torch.randn(64, 8, device="cuda")
    y = torch.empty(64, device="cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):  # launched on torch's current stream, not CuPy's
        cupy_kernels.column(grid=1, block=64, args=(matrix[:, 3:], y, 64, 8))
    stream.synchronize()
    assert torch.equal(y, matrix[:, 3])
    with pytest.raises(RuntimeError, match="kernel big_smem: launch failed: CUDA_ERROR_INVALID_VALUE"):
        cupy_kernels.big_smem(grid=1, block=4096, args=(smem,))  # more than 1024 threads per block
