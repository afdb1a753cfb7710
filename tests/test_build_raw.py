"""The raw builder on CPU with the real nvcc (and NVRTC where libnvrtc is installed)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from cudagym.judge.build import BuildCache, build, nvrtc
from cudagym.judge.build import toolchain as toolchain_mod
from cudagym.judge.protocol import DEFAULT_PROTOCOL
from cudagym.judge.records import BuildStatus, Severity
from cudagym.solution import Solution, get_format
from cudagym.templates import example_task

pytestmark = pytest.mark.skipif(
    shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(), reason="nvcc not installed")

TASK = example_task("test")

MODEL_NEW = get_format("raw").example_files()["model_new.py"]
RELU = get_format("raw").example_files()["kernels/relu.cu"]

# 2**22 distinct template instantiations: minutes of front-end work, killed by the timeout
TEMPLATE_BOMB = """
template <int N, unsigned long long M> struct A {
  static constexpr unsigned long long v = A<N - 1, 2 * M>::v + A<N - 1, 2 * M + 1>::v;
};
template <unsigned long long M> struct A<0, M> { static constexpr unsigned long long v = M; };
extern "C" __global__ void boom(unsigned long long* out) { *out = A<22, 1>::v; }
"""


@pytest.fixture(autouse=True)
def nvcc_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDAGYM_RAW_BACKEND", "nvcc")


@pytest.fixture
def cache(tmp_path: Path) -> BuildCache:
    return BuildCache(tmp_path / "cache")


def raw(files: dict[str, str]) -> Solution:
    return Solution("raw", {"model_new.py": MODEL_NEW, **files})


def test_example_builds_to_cubin_with_resources_then_hits_the_cache(cache: BuildCache) -> None:
    first = build(TASK, Solution("raw", get_format("raw").example_files()), DEFAULT_PROTOCOL, cache)
    assert first.status is BuildStatus.OK, first.message + first.log
    assert not first.cached and "nvcc" in first.message
    manifest = Path(first.artifact_path)
    assert manifest.name == "manifest.json" and manifest.is_file()
    (res,) = first.kernels
    assert res.kernel == "relu" and res.registers > 0
    second = build(TASK, Solution("raw", get_format("raw").example_files()), DEFAULT_PROTOCOL, cache)
    assert second.ok and second.cached and second.artifact_path == first.artifact_path
    assert second.kernels == first.kernels  # resources come back from the cached compiler output
    # model_new.py is not compiled: editing it alone reuses the cubin
    tweaked = Solution("raw", {"model_new.py": MODEL_NEW + "\n# tweak\n", "kernels/relu.cu": RELU})
    third = build(TASK, tweaked, DEFAULT_PROTOCOL, cache)
    assert third.ok and third.cached


def test_syntax_error_is_located(cache: BuildCache) -> None:
    bad = RELU.replace("fmaxf(x[i], 0.0f)", "fmaxf(x[i], 0.0f) +")
    line = next(i for i, text in enumerate(bad.splitlines(), 1) if "fmaxf" in text)
    result = build(TASK, raw({"kernels/relu.cu": bad}), DEFAULT_PROTOCOL, cache)
    assert result.status is BuildStatus.COMPILE_ERROR
    errors = [d for d in result.diagnostics if d.severity is Severity.ERROR]
    assert errors and errors[0].file == "kernels/relu.cu" and errors[0].line in (line, line + 1)
    assert "kernels/relu.cu" in result.log and str(cache.root) not in result.log
    again = build(TASK, raw({"kernels/relu.cu": bad}), DEFAULT_PROTOCOL, cache)
    assert again.status is BuildStatus.COMPILE_ERROR and again.diagnostics == result.diagnostics


def test_warning_is_captured_on_a_good_build(cache: BuildCache) -> None:
    src = RELU.replace("if (i < n)", "int unused_var = 3;\n  if (i < n)")
    result = build(TASK, raw({"kernels/relu.cu": src}), DEFAULT_PROTOCOL, cache)
    assert result.ok
    (warn,) = [d for d in result.diagnostics if d.severity is Severity.WARNING]
    assert warn.file == "kernels/relu.cu" and "unused_var" in warn.message and warn.line > 0


def test_headers_are_part_of_the_key(cache: BuildCache) -> None:
    src = '#include "scale.cuh"\nextern "C" __global__ void k(float* x) { x[0] = SCALE; }\n'
    a = build(TASK, raw({"kernels/k.cu": src, "kernels/scale.cuh": "#define SCALE 2.0f\n"}), DEFAULT_PROTOCOL, cache)
    b = build(TASK, raw({"kernels/k.cu": src, "kernels/scale.cuh": "#define SCALE 3.0f\n"}), DEFAULT_PROTOCOL, cache)
    assert a.ok and b.ok and not b.cached and a.artifact_path != b.artifact_path


@pytest.mark.parametrize(("files", "message"), [
    ({"kernels/relu.cu": RELU}, "model_new.py is missing"),
    ({"model_new.py": MODEL_NEW}, "no kernels"),
    ({"model_new.py": MODEL_NEW, "kernels/k.cu": "__global__ void k(float* x) {}\n"}, 'extern "C" __global__'),
])
def test_invalid_layouts(files: dict[str, str], message: str, cache: BuildCache) -> None:
    result = build(TASK, Solution("raw", files), DEFAULT_PROTOCOL, cache)
    assert result.status is BuildStatus.INVALID and message in result.message


def test_unsupported_parameter_type_is_a_warning(cache: BuildCache) -> None:
    src = 'struct P { int a; };\nextern "C" __global__ void k(P p, float* x) { x[0] = p.a; }\n'
    result = build(TASK, raw({"kernels/k.cu": src}), DEFAULT_PROTOCOL, cache)
    assert result.ok
    assert any("cannot pass" in d.message and d.file == "kernels/k.cu" for d in result.diagnostics)


def test_timeout_kills_the_compiler(cache: BuildCache) -> None:
    protocol = DEFAULT_PROTOCOL.with_changes(id="test-timeout", build_timeout_s=1.5)
    result = build(TASK, raw({"kernels/boom.cu": TEMPLATE_BOMB}), protocol, cache)
    assert result.status is BuildStatus.TIMEOUT and "kernels/boom.cu" in result.message
    assert result.wall_time_s < 15
    assert not _running_in(cache.root), "nvcc's children outlived the timeout"


def test_output_cap(cache: BuildCache) -> None:
    noisy = "".join(f"int f{i}() {{ return undefined_{i}; }}\n" for i in range(400))
    protocol = DEFAULT_PROTOCOL.with_changes(id="test-cap", extra={"build_max_output_bytes": 4096})
    result = build(TASK, raw({"kernels/relu.cu": RELU + noisy}), protocol, cache)
    assert result.status is BuildStatus.OUTPUT_LIMIT and "4096" in result.message
    assert len(result.log) <= 4096


def test_artifact_cap(cache: BuildCache) -> None:
    protocol = DEFAULT_PROTOCOL.with_changes(id="test-artifact", extra={"build_max_artifact_bytes": 512})
    result = build(TASK, raw({"kernels/relu.cu": RELU}), protocol, cache)
    assert result.status is BuildStatus.OUTPUT_LIMIT and "512 bytes" in result.message


def test_missing_nvcc_is_a_tool_error(cache: BuildCache, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDAGYM_NVCC", "/nonexistent/nvcc")
    toolchain_mod.cuda_tools.cache_clear()
    try:
        result = build(TASK, raw({"kernels/relu.cu": RELU}), DEFAULT_PROTOCOL, cache)
    finally:
        monkeypatch.delenv("CUDAGYM_NVCC")
        toolchain_mod.cuda_tools.cache_clear()
    assert result.status is BuildStatus.TOOL_ERROR and "CUDAGYM_NVCC" in result.message


def test_forced_nvrtc_without_library_is_a_tool_error(cache: BuildCache, monkeypatch: pytest.MonkeyPatch) -> None:
    # a host where CuPy finds no libnvrtc (CI has the nvrtc extra's, so that host is made, not waited for)
    monkeypatch.setattr(nvrtc, "find_nvrtc", lambda: "")
    monkeypatch.setenv("CUDAGYM_RAW_BACKEND", "nvrtc")
    result = build(TASK, raw({"kernels/relu.cu": RELU}), DEFAULT_PROTOCOL, cache)
    assert result.status is BuildStatus.TOOL_ERROR and "libnvrtc" in result.message


def test_nvrtc_backend(cache: BuildCache, monkeypatch: pytest.MonkeyPatch) -> None:
    if not nvrtc.find_nvrtc():
        pytest.skip("libnvrtc not installed (set CUDAGYM_NVRTC_LIB, or pip install nvidia-cuda-nvrtc)")
    monkeypatch.setenv("CUDAGYM_RAW_BACKEND", "nvrtc")
    ok = build(TASK, Solution("raw", get_format("raw").example_files()), DEFAULT_PROTOCOL, cache)
    assert ok.ok and "nvrtc" in ok.message and ok.kernels[0].registers > 0
    bad = build(TASK, raw({"kernels/relu.cu": RELU.replace("fmaxf", "fmaxff")}), DEFAULT_PROTOCOL, cache)
    assert bad.status is BuildStatus.COMPILE_ERROR
    assert bad.diagnostics[0].file == "kernels/relu.cu" and bad.diagnostics[0].tool == "nvrtc"
    # the persistent NVRTC child obeys the build's limits, and a fresh one serves the next build
    quick = DEFAULT_PROTOCOL.with_changes(id="test-nvrtc-timeout", build_timeout_s=1.5)
    bomb = build(TASK, raw({"kernels/boom.cu": TEMPLATE_BOMB}), quick, cache)
    assert bomb.status is BuildStatus.TIMEOUT and bomb.wall_time_s < 15
    noisy = "".join(f"__device__ int f{i}() {{ return undefined_{i}; }}\n" for i in range(400))
    capped = DEFAULT_PROTOCOL.with_changes(id="test-nvrtc-cap", extra={"build_max_output_bytes": 4096})
    assert build(TASK, raw({"kernels/relu.cu": RELU + noisy}), capped, cache).status is BuildStatus.OUTPUT_LIMIT
    after = build(TASK, raw({"kernels/relu.cu": RELU + "\n// after\n"}), DEFAULT_PROTOCOL, cache)
    assert after.ok and not after.cached


def _running_in(root: Path) -> bool:
    """True while any process has its working directory under ``root`` (compilers run in the stage)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or proc.name == str(os.getpid()):
            continue
        try:
            cwd = os.readlink(proc / "cwd")
        except OSError:
            continue
        if cwd.startswith(str(root)):
            return True
    return False
