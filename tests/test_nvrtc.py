"""NVRTC through CuPy's binding: compiles without a GPU, logs as NVRTC writes them, and the library lookup."""

from __future__ import annotations

from pathlib import Path

import pytest

from cudagym.judge.build import nvrtc
from cudagym.judge.build.raw import NVRTC_FLAGS

needs_nvrtc = pytest.mark.skipif(not nvrtc.find_nvrtc(), reason="no libnvrtc for CuPy (pip install 'cudagym[nvrtc]')")
OPTIONS = ["--gpu-architecture=sm_90", *NVRTC_FLAGS]


@needs_nvrtc
def test_a_kernel_compiles_to_an_sm90_cubin_with_ptxas_lines() -> None:
    out = nvrtc.compile_source('extern "C" __global__ void k(float* x) { x[threadIdx.x] = 1.0f; }', "k.cu", OPTIONS)
    assert out.ok and out.cubin[:4] == b"\x7fELF"
    assert "Compiling entry function 'k' for 'sm_90'" in out.log and "registers" in out.log
    assert not out.log.endswith("\x00")


@needs_nvrtc
def test_a_compile_error_is_the_log_not_an_exception() -> None:
    out = nvrtc.compile_source('extern "C" __global__ void k(float* x) { x[0] = nope; }', "kernels/k.cu", OPTIONS)
    assert not out.ok and out.cubin == b""
    assert 'kernels/k.cu(1): error: identifier "nope" is undefined' in out.log


@needs_nvrtc
def test_a_bad_option_is_reported() -> None:
    out = nvrtc.compile_source('extern "C" __global__ void k() {}', "k.cu", ["--no-such-option"])
    assert not out.ok and out.log


@needs_nvrtc
def test_the_version_is_cupys_library() -> None:
    major, _, minor = nvrtc.nvrtc_version().partition(".")
    assert int(major) >= 12 and minor.isdigit()


def test_a_named_library_that_does_not_load_is_no_library(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "libnvrtc.so.13").write_bytes(b"not an ELF file")
    monkeypatch.setenv(nvrtc.NVRTC_LIB_ENV, str(tmp_path / "libnvrtc.so.13"))
    assert nvrtc.find_nvrtc() == ""
