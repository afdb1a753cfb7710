"""cudagym.runtime: kernel signatures, cubin lookup, argument marshalling (CPU) and launches (GPU)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from cudagym import runtime
from cudagym.judge.build import BuildCache, build, nvrtc
from cudagym.judge.build.kernel_signature import parse_kernels
from cudagym.judge.records import BuildStatus
from cudagym.solution import Solution, get_format
from cudagym.templates import example_task

HAS_NVCC = shutil.which("nvcc") is not None or Path("/usr/local/cuda/bin/nvcc").exists()
HAS_COMPILER = HAS_NVCC or bool(nvrtc.find_nvrtc())  # standalone runtime.load uses either
needs_nvcc = pytest.mark.skipif(not HAS_NVCC, reason="nvcc not installed")
gpu = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

TYPES_CU = r'''
// every supported scalar width, echoed into out so the test can read back what arrived
extern "C" __global__ void echo(long long* out, int a, unsigned b, long long c, float d, double e, bool f,
                                short g, unsigned char h, size_t i) {
  out[0] = a; out[1] = b; out[2] = c; out[3] = (long long)(d * 1000.0f); out[4] = (long long)(e * 1000.0);
  out[5] = f ? 1 : 0; out[6] = g; out[7] = h; out[8] = (long long)i;
}
extern "C" __global__ void big_smem(float* out) {
  extern __shared__ float buf[];
  buf[threadIdx.x] = (float)threadIdx.x;
  __syncthreads();
  out[threadIdx.x] = buf[blockDim.x - 1 - threadIdx.x];
}
extern "C" __global__ void column(const float* /*strided*/ x, float* y, int n, int stride) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[(long long)i * stride];
}
'''


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> BuildCache:
    return BuildCache(tmp_path_factory.getbasetemp() / "cudagym-build-cache")


@pytest.fixture(scope="module", autouse=True)
def private_cache_dir(tmp_path_factory: pytest.TempPathFactory):
    # standalone runtime.load() compiles into the default cache: keep it inside the test's temp dir
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CUDAGYM_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cudagym-build-cache"))
        yield


@pytest.fixture(autouse=True)
def no_manifest(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(runtime.MANIFEST_ENV, raising=False)
    runtime.use_manifest(None)
    yield
    runtime.use_manifest(None)  # a test that pointed the runtime at a manifest must not leak it


# --- signatures ---------------------------------------------------------------------------------------

def test_signature_parsing_covers_widths_and_markers() -> None:
    (echo, big, column) = parse_kernels(TYPES_CU)
    assert [p.kind for p in echo.params] == ["ptr", "i32", "u32", "i64", "f32", "f64", "bool", "i16", "u8", "u64"]
    assert [p.name for p in echo.params][:3] == ["out", "a", "b"]
    assert big.params[0].kind == "ptr" and not big.params[0].strided
    assert column.params[0].strided and not column.params[1].strided


def test_signature_parsing_ignores_non_extern_c_and_handles_blocks() -> None:
    src = '''
    #include <cuda_runtime.h>
    __global__ void mangled(float* x) {}            // not extern "C": not launchable by name
    // extern "C" __global__ void commented(int x) {}
    extern "C" {
    __global__ void __launch_bounds__(256) a(const float* __restrict__ x, int n) {}
    __global__ void b(uint32_t k, int64_t m, Params p) {}
    }
    extern "C" __global__ void c(void) {}
    '''
    sigs = {s.name: s for s in parse_kernels(src)}
    assert set(sigs) == {"a", "b", "c"}
    assert [p.kind for p in sigs["a"].params] == ["ptr", "i32"]
    assert [p.kind for p in sigs["b"].params] == ["u32", "i64", "unsupported"]
    assert sigs["c"].params == ()


# --- lookup through a judge manifest --------------------------------------------------------------------

@needs_nvcc
def test_load_through_manifest_and_stale_source(cache: BuildCache, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    example = get_format("raw").example_files()
    result = build(example_task("test"), Solution("raw", example), None, cache)
    assert result.status is BuildStatus.OK, result.message
    for rel, text in example.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(runtime.MANIFEST_ENV, result.artifact_path)
    kernels = runtime.load("kernels/relu.cu")
    assert kernels.names == ("relu",)
    assert [p.kind for p in kernels.relu.signature.params] == ["ptr", "ptr", "i64"]
    with pytest.raises(AttributeError, match="has no extern"):
        kernels.gelu  # noqa: B018
    with pytest.raises(RuntimeError, match="was not built by the judge"):
        runtime.load("kernels/other.cu")
    (tmp_path / "kernels/relu.cu").write_text(example["kernels/relu.cu"] + "\n// edited\n")
    with pytest.raises(RuntimeError, match="changed since the judge built it"):
        runtime.load("kernels/relu.cu")


# --- standalone compile and argument checks (no GPU needed up to the launch) ---------------------------

@pytest.fixture(scope="module")
def echo_kernels(tmp_path_factory: pytest.TempPathFactory) -> runtime.KernelModule:
    if not HAS_COMPILER:
        pytest.skip("neither nvcc nor libnvrtc is installed")
    root = tmp_path_factory.mktemp("standalone")
    (root / "types.cu").write_text(TYPES_CU)
    # module-scoped: set up before the function-scoped no_manifest fixture, so clear the manifest here too
    runtime.use_manifest(None)
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(runtime.MANIFEST_ENV, raising=False)
        return runtime.load(str(root / "types.cu"))


def test_standalone_load_compiles(echo_kernels: runtime.KernelModule) -> None:
    assert set(echo_kernels.names) == {"echo", "big_smem", "column"}
    assert "long long* out" in repr(echo_kernels.echo)


def test_standalone_compile_error_shows_compiler_messages(tmp_path: Path) -> None:
    if not HAS_COMPILER:
        pytest.skip("neither nvcc nor libnvrtc is installed")
    (tmp_path / "bad.cu").write_text('extern "C" __global__ void k(float* x) { x[0] = nope; }\n')
    with pytest.raises(runtime.KernelCompileError, match="identifier \"nope\" is undefined"):
        runtime.load(str(tmp_path / "bad.cu"))


def test_argument_count_and_types_are_checked(echo_kernels: runtime.KernelModule) -> None:
    echo = echo_kernels.echo
    with pytest.raises(TypeError, match=r"kernel echo\(.*\) takes 10 argument\(s\), got 2"):
        echo(grid=1, block=1, args=(None, 1))
    good = [None, 1, 2, 3, 1.5, 2.5, True, 4, 5, 6]
    cases = {
        1: (2**31, "does not fit"),           # int is 32-bit: never silently widened
        2: (-1, "does not fit"),              # unsigned
        8: (300, "does not fit"),             # unsigned char
        3: (1.5, "expected an int"),          # a float for an integer parameter
        4: ("x", "expected a float"),
        6: (None, "expected a bool"),
        0: (5, "expected a CUDA torch.Tensor"),
    }
    for index, (value, message) in cases.items():
        args: list[object] = list(good)
        args[index] = value
        with pytest.raises(TypeError, match=f"kernel echo: parameter {echo.signature.params[index].name}.*{message}"):
            echo(grid=1, block=1, args=args)
    with pytest.raises(TypeError, match="expected a CUDA tensor"):
        echo(grid=1, block=1, args=[torch.zeros(9, dtype=torch.int64), *good[1:]])
    with pytest.raises(TypeError, match="expected a Python scalar"):
        echo(grid=1, block=1, args=[None, torch.tensor(1), *good[2:]])
    with pytest.raises(ValueError, match="grid dimension >= 1"):
        echo(grid=(0,), block=1, args=good)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without a GPU")
def test_launch_without_a_gpu_says_so(echo_kernels: runtime.KernelModule) -> None:
    with pytest.raises(RuntimeError, match=r"needs an NVIDIA GPU and its driver \(libcuda.so.1\)"):
        echo_kernels.echo(grid=1, block=1, args=[None, 1, 2, 3, 1.5, 2.5, True, 4, 5, 6])


def test_import_runtime_does_not_import_torch() -> None:
    code = "import sys, cudagym.runtime; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# --- GPU: real launches -----------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["nvcc", "nvrtc"])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_example_model_runs_through_manifest(backend: str, cache: BuildCache, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    if backend == "nvrtc" and not nvrtc.find_nvrtc():
        pytest.skip("libnvrtc not found")
    if backend == "nvcc" and not HAS_NVCC:
        pytest.skip("nvcc not installed")
    monkeypatch.setenv("CUDAGYM_RAW_BACKEND", backend)
    example = get_format("raw").example_files()
    result = build(example_task("test"), Solution("raw", example), None, cache)
    assert result.status is BuildStatus.OK, result.message
    assert backend in result.message and result.kernels and result.kernels[0].registers > 0
    for rel, text in example.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    runtime.use_manifest(result.artifact_path)
    sys.modules.pop("model_new", None)
    import model_new  # type: ignore[import-not-found]

    x = torch.randn(1_000_003, device="cuda")
    y = model_new.ModelNew()(x)
    torch.cuda.synchronize()
    assert torch.equal(y, torch.relu(x))
    sys.modules.pop("model_new", None)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_scalar_widths_arrive_intact(echo_kernels: runtime.KernelModule) -> None:
    out = torch.zeros(9, dtype=torch.int64, device="cuda")
    echo_kernels.echo(grid=1, block=1, args=(out, -7, 2**32 - 1, -(2**40), 1.5, 2.25, True, -3, 255, 2**40))
    torch.cuda.synchronize()
    assert out.tolist() == [-7, 2**32 - 1, -(2**40), 1500, 2250, 1, -3, 255, 2**40]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_dynamic_smem_above_48k_and_strided_and_stream(echo_kernels: runtime.KernelModule) -> None:
    threads = 1024
    out = torch.empty(threads, device="cuda")
    echo_kernels.big_smem(grid=1, block=threads, args=(out,), shared_mem=64 * 1024)
    torch.cuda.synchronize()
    assert out.tolist() == [float(threads - 1 - i) for i in range(threads)]
    matrix = torch.randn(64, 8, device="cuda")
    col = matrix[:, 3]  # not contiguous: allowed only because the parameter is marked /*strided*/
    y = torch.empty(64, device="cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        echo_kernels.column(grid=1, block=64, args=(matrix[:, 3:], y, 64, 8))
    stream.synchronize()
    assert torch.equal(y, col)
    with pytest.raises(TypeError, match="expected a contiguous tensor"):
        echo_kernels.column(grid=1, block=64, args=(matrix, col, 64, 8))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_launch_error_names_the_cuda_error(echo_kernels: runtime.KernelModule) -> None:
    out = torch.empty(4096, device="cuda")
    with pytest.raises(RuntimeError, match="kernel big_smem: launch failed: CUDA_ERROR_INVALID_VALUE"):
        echo_kernels.big_smem(grid=1, block=4096, args=(out,))  # more than 1024 threads per block


def test_manifest_json_is_what_the_runtime_reads(cache: BuildCache) -> None:
    if not HAS_NVCC:
        pytest.skip("nvcc not installed")
    result = build(example_task("test"), Solution("raw", get_format("raw").example_files()), None, cache)
    data = json.loads(Path(result.artifact_path).read_text())
    unit = data["units"]["kernels/relu.cu"]
    assert (Path(result.artifact_path).parent / unit["cubin"]).read_bytes()[:4] == b"\x7fELF"
    assert data["arch"] == "sm_90" and data["backend"] in ("nvcc", "nvrtc")
