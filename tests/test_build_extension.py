"""The extension builder on CPU with the real nvcc and g++ against torch's headers (sm_90, no GPU needed).

The first build of a session compiles the torch PCH and the protected binding module (minutes on two
cores); every later build reuses them from the session's cache, so these tests share one cache.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from cudagym.judge.build import BuildCache, build, torch_ext
from cudagym.judge.build import extension as extension_builder
from cudagym.judge.build.extension import load_extension
from cudagym.judge.protocol import DEFAULT_PROTOCOL
from cudagym.judge.records import BuildResult, BuildStatus, Severity, from_dict, to_dict
from cudagym.solution import Solution, get_format
from cudagym.templates import example_task

pytestmark = pytest.mark.skipif(
    shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(), reason="nvcc not installed")

TASK = example_task("test")

EXAMPLE = get_format("extension").example_files()
# a second kernel pair, so that editing one .cu can be shown to recompile only that object
SCALE_CU = """#include <cuda_runtime.h>
__global__ void scale_kernel(float* y, float a, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] *= a;
}
extern "C" int launch_scale(float* y, float a, long long n, cudaStream_t stream) {
  scale_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(y, a, n);
  return (int)cudaGetLastError();
}
"""
# CPU-only glue: loads and runs on this GPU-less host (no c10_cuda symbols), exercising link and load
HOST_CU = """#include <cuda_runtime.h>
__global__ void unused_kernel(float* x) { x[threadIdx.x] = 0.f; }
extern "C" void host_add(const float* x, float* y, long long n, float v) {
  for (long long i = 0; i < n; ++i) y[i] = x[i] + v;
}
"""
HOST_BINDING = """#include "binding_registry.h"
extern "C" void host_add(const float* x, float* y, long long n, float v);
namespace {
torch::Tensor add_on_host(const torch::Tensor& x, double v) {
  TORCH_CHECK(!x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32, "cpu float32 only");
  auto y = torch::empty_like(x);
  host_add(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), static_cast<float>(v));
  return y;
}
}  // namespace
REGISTER_BINDING(add_on_host, add_on_host);
"""


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> BuildCache:
    return BuildCache(tmp_path_factory.getbasetemp() / "cudagym-build-cache")


@pytest.fixture(scope="module")
def example_build(cache: BuildCache) -> BuildResult:
    return build(TASK, Solution("extension", EXAMPLE), DEFAULT_PROTOCOL.with_changes(id="t", build_timeout_s=1800),
                 cache)


def toolchain(cache: BuildCache) -> torch_ext.ExtToolchain:
    return torch_ext.host_toolchain(cache)


def ext(**files: str) -> Solution:
    return Solution("extension", {"model_new.py": EXAMPLE["model_new.py"], **files})


def dynamic_symbols(so: str) -> set[str]:
    out = subprocess.run(["readelf", "--dyn-syms", "-W", so], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if "FUNC" in line and "GLOBAL" in line and "UND" not in line}


def test_example_builds_a_loadable_module(example_build: BuildResult) -> None:
    result = example_build
    assert result.status is BuildStatus.OK, result.message + result.log[-3000:]
    so = Path(result.artifact_path)
    assert so.suffix == ".so" and so.is_file()
    module = f"cudagym_ext_{result.artifact_key[:16]}"
    assert so.stem == module and module in result.message
    assert f"PyInit_{module}" in dynamic_symbols(str(so))
    manifest = json.loads((so.parent / "manifest.json").read_text())
    assert manifest["module"] == module and manifest["torch"] == torch.__version__ and manifest["arch"] == "sm_90"
    assert from_dict(BuildResult, json.loads(json.dumps(to_dict(result)))) == result


def test_example_reports_ptxas_resources(example_build: BuildResult) -> None:
    (res,) = example_build.kernels
    assert "relu_kernel" in res.kernel and res.registers > 0


def test_identical_build_is_cached(example_build: BuildResult, cache: BuildCache) -> None:
    again = build(TASK, Solution("extension", EXAMPLE), DEFAULT_PROTOCOL, cache)
    assert again.ok and again.cached and again.artifact_path == example_build.artifact_path
    assert "objects: 0 compiled, 3 cached" in again.message  # relu.cu, relu_binding.cpp, binding.cpp
    # model_new.py is loaded, not compiled
    tweaked = Solution("extension", {**EXAMPLE, "model_new.py": EXAMPLE["model_new.py"] + "\n# note\n"})
    assert build(TASK, tweaked, DEFAULT_PROTOCOL, cache).artifact_path == example_build.artifact_path


def test_editing_one_cu_recompiles_one_object(example_build: BuildResult, cache: BuildCache) -> None:
    two = {**EXAMPLE, "kernels/scale.cu": SCALE_CU}
    first = build(TASK, Solution("extension", two), DEFAULT_PROTOCOL, cache)
    assert first.ok, first.message + first.log[-2000:]
    cache.reset_stats()
    edited = {**two, "kernels/scale.cu": SCALE_CU.replace("y[i] *= a;", "y[i] = y[i] * a;")}
    second = build(TASK, Solution("extension", edited), DEFAULT_PROTOCOL, cache)
    assert second.ok and not second.cached
    assert "objects: 1 compiled, 3 cached" in second.message  # scale.cu; relu.cu, relu_binding.cpp, binding.cpp
    assert cache.stats("obj").misses == 1
    assert second.artifact_path != first.artifact_path and Path(second.artifact_path).is_file()


def test_without_a_pch_a_build_parses_torch_itself_and_starts_the_pch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[BuildCache] = []
    monkeypatch.setattr(torch_ext, "pch_in_background", lambda tc, cache: started.append(cache))
    empty = BuildCache(tmp_path / "empty")
    prelude = torch_ext.torch_prelude(toolchain(empty), empty, tmp_path / "scratch")
    assert not prelude.precompiled and started == [empty]
    assert prelude.header.read_text() == torch_ext.PCH_TEXT and not prelude.header.with_suffix(".h.gch").exists()
    assert prelude.flags() == ("-include", str(prelude.header))


def test_objects_compiled_before_the_pch_are_reused_after_it(
        example_build: BuildResult, cache: BuildCache, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert torch_ext.wait_for_pch(cache).ok
    warm = torch_ext.torch_prelude(toolchain(cache), cache, tmp_path / "scratch")
    assert warm.precompiled and "-Winvalid-pch" in warm.flags()
    binding = EXAMPLE["kernels/relu_binding.cpp"] + "\n// compiled while the PCH was still being built\n"
    files = {**EXAMPLE, "kernels/relu_binding.cpp": binding}

    def still_building(tc: torch_ext.ExtToolchain, cache: BuildCache, scratch: Path) -> torch_ext.Prelude:
        scratch.mkdir(parents=True)
        (scratch / torch_ext.PCH_HEADER).write_text(torch_ext.PCH_TEXT)
        return torch_ext.Prelude(scratch / torch_ext.PCH_HEADER, precompiled=False)

    with monkeypatch.context() as patch:
        patch.setattr(extension_builder, "torch_prelude", still_building)
        cold = build(TASK, Solution("extension", files), DEFAULT_PROTOCOL, cache)
    assert cold.ok and "objects: 1 compiled, 2 cached" in cold.message, cold.message + cold.log[-2000:]
    again = build(TASK, Solution("extension", files), DEFAULT_PROTOCOL, cache)
    assert again.cached and again.artifact_path == cold.artifact_path


def test_header_edit_recompiles_every_object(example_build: BuildResult, cache: BuildCache) -> None:
    files = {**EXAMPLE, "kernels/common.cuh": "#pragma once\n#define THREADS 256\n"}
    build(TASK, Solution("extension", files), DEFAULT_PROTOCOL, cache)
    edited = {**files, "kernels/common.cuh": "#pragma once\n#define THREADS 128\n"}
    result = build(TASK, Solution("extension", edited), DEFAULT_PROTOCOL, cache)
    assert result.ok and "objects: 2 compiled" in result.message


def test_cu_syntax_error_is_located(example_build: BuildResult, cache: BuildCache) -> None:
    bad = EXAMPLE["kernels/relu.cu"].replace("fmaxf(x[i], 0.0f);", "fmaxf(x[i], 0.0f)")
    line = next(i for i, t in enumerate(bad.splitlines(), 1) if "fmaxf" in t)
    result = build(TASK, Solution("extension", {**EXAMPLE, "kernels/relu.cu": bad}), DEFAULT_PROTOCOL, cache)
    assert result.status is BuildStatus.COMPILE_ERROR
    err = next(d for d in result.diagnostics if d.severity is Severity.ERROR)
    assert err.file == "kernels/relu.cu" and err.line in (line, line + 1) and err.tool == "nvcc"
    assert str(cache.root) not in result.log


def test_cu_warning_is_captured(example_build: BuildResult, cache: BuildCache) -> None:
    src = EXAMPLE["kernels/relu.cu"].replace("if (i < n)", "int unused_here = 1;\n  if (i < n)")
    result = build(TASK, Solution("extension", {**EXAMPLE, "kernels/relu.cu": src}), DEFAULT_PROTOCOL, cache)
    assert result.ok
    assert any(d.severity is Severity.WARNING and d.file == "kernels/relu.cu" and "unused_here" in d.message
               for d in result.diagnostics)


def test_binding_error_is_located(example_build: BuildResult, cache: BuildCache) -> None:
    bad = EXAMPLE["kernels/relu_binding.cpp"].replace("auto y = torch::empty_like(x);", "auto y = nope(x);")
    line = next(i for i, t in enumerate(bad.splitlines(), 1) if "nope(x)" in t)
    result = build(TASK, Solution("extension", {**EXAMPLE, "kernels/relu_binding.cpp": bad}), DEFAULT_PROTOCOL, cache)
    assert result.status is BuildStatus.COMPILE_ERROR
    err = next(d for d in result.diagnostics if d.severity is Severity.ERROR)
    assert (err.file, err.line, err.tool) == ("kernels/relu_binding.cpp", line, "c++")


@pytest.mark.parametrize(("files", "message"), [
    ({"kernels/relu.cu": EXAMPLE["kernels/relu.cu"]}, "model_new.py is missing"),
    ({"model_new.py": EXAMPLE["model_new.py"]}, "no kernels"),
    ({"model_new.py": EXAMPLE["model_new.py"], "kernels/relu.cu": EXAMPLE["kernels/relu.cu"]},
     "no kernels/<op>_binding.cpp"),
    ({"model_new.py": EXAMPLE["model_new.py"], "kernels/gelu_binding.cpp": EXAMPLE["kernels/relu_binding.cpp"],
      "kernels/relu.cu": EXAMPLE["kernels/relu.cu"]}, "kernels/gelu_binding.cpp has no sources"),
])
def test_invalid_layouts(files: dict[str, str], message: str, tmp_path: Path) -> None:
    result = build(TASK, Solution("extension", files), DEFAULT_PROTOCOL, BuildCache(tmp_path))
    assert result.status is BuildStatus.INVALID and message in result.message


def test_cpu_only_extension_loads_and_runs_here(example_build: BuildResult, cache: BuildCache) -> None:
    result = build(TASK, ext(**{"kernels/add.cu": HOST_CU, "kernels/add_binding.cpp": HOST_BINDING}),
                   DEFAULT_PROTOCOL, cache)
    assert result.ok, result.message + result.log[-3000:]
    script = textwrap.dedent("""
        import json, sys, torch
        from cudagym.judge.build.extension import load_extension
        from cudagym.judge.records import BuildResult, from_dict
        result = from_dict(BuildResult, json.loads(sys.stdin.read()))
        mod = load_extension(result)
        import cuda_extension
        assert cuda_extension is mod
        y = cuda_extension.add_on_host(torch.arange(4, dtype=torch.float32), 0.5)
        print(y.tolist(), mod.__name__)
    """)
    proc = subprocess.run([sys.executable, "-c", script], input=json.dumps(to_dict(result)), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    values, name = proc.stdout.strip().rsplit(" ", 1)
    assert values == "[0.5, 1.5, 2.5, 3.5]" and name == f"cudagym_ext_{result.artifact_key[:16]}"


def test_load_refuses_a_failed_build(tmp_path: Path) -> None:
    from cudagym.errors import BuildToolError

    with pytest.raises(BuildToolError, match="expected an OK extension build"):
        load_extension(BuildResult(BuildStatus.COMPILE_ERROR, "extension"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_example_extension_runs(example_build: BuildResult) -> None:
    assert example_build.ok, example_build.message
    script = textwrap.dedent("""
        import json, sys, torch
        from cudagym.judge.build.extension import load_extension
        from cudagym.judge.records import BuildResult, from_dict
        load_extension(from_dict(BuildResult, json.loads(sys.stdin.read())))
        import cuda_extension
        x = torch.randn(1 << 20, device="cuda")
        y = cuda_extension.relu_forward(x)
        torch.cuda.synchronize()
        assert torch.equal(y, torch.relu(x))
        try:
            cuda_extension.relu_forward(x.cpu())
        except RuntimeError as exc:
            assert "expected a CUDA tensor" in str(exc)
        else:
            raise AssertionError("the binding's check did not fire")
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", script], input=json.dumps(to_dict(example_build)),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
