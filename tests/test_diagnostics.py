"""Diagnostics parsing on real compiler output captured from nvcc 13.0, g++ 12, ptxas and NVRTC 13.0."""

from __future__ import annotations

import shutil
import tempfile

import pytest

from cudagym.judge.build.diagnostics import (
    PathMap,
    Segment,
    demangle,
    has_errors,
    parse_diagnostics,
    parse_ptxas_resources,
)
from cudagym.judge.records import Severity

NVCC_ERROR = """\
kernels/bad.cu(5): error: identifier "foo" is undefined
    if (i < n) x[i] = foo(x[i]);
                      ^

1 error detected in the compilation of "kernels/bad.cu".
"""

NVCC_WARNING_AND_PTXAS = """\
kernels/warn.cu(6): warning #177-D: variable "unused" was declared but never referenced
    int unused = 3;
        ^

Remark: The warnings can be suppressed with "-diag-suppress <warning-number>"

ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'relu' for 'sm_90'
ptxas info    : Function properties for relu
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 0 barriers
ptxas info    : Compile time = 3.613 ms
ptxas info    : Compiling entry function '_Z3bigPfi' for 'sm_90'
ptxas info    : Function properties for _Z3bigPfi
    256 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 1 barriers, 256 bytes cumulative stack size, 4096 bytes smem
ptxas info    : Compile time = 8.886 ms
ptxas info    : Function properties for _Z6helperf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
"""

PTXAS_SPILL = """\
ptxas info    : Overriding maximum register limit 256 for 'spill' with  32 of maxrregcount option
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'spill' for 'sm_90'
ptxas info    : Function properties for spill
    168 bytes stack frame, 168 bytes spill stores, 168 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 168 bytes cumulative stack size
ptxas info    : Compile time = 20.418 ms
"""

PTXAS_ERROR = """\
ptxas error   : Entry function '_Z6toobigPf' uses too much shared data (0x3a980 bytes, 0xc000 max)
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z6toobigPf' for 'sm_90'
ptxas info    : Function properties for _Z6toobigPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 1 barriers, 240000 bytes smem
"""

# NVRTC 13.0 with --ptxas-options=-v: ptxas lines carry a "ptxas         ." prefix on continuation lines
NVRTC_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'relu' for 'sm_90'
ptxas info    : Function properties for relu
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 0 barriers
"""

# older ptxas versions also print constant banks
PTXAS_CMEM = "ptxas info    : Compiling entry function 'k' for 'sm_80'\n" \
             "ptxas info    : Used 14 registers, 352 bytes cmem[0], 16 bytes cmem[2]\n"

GXX_OUTPUT = """\
In file included from kernels/relu_binding.cpp:1:
kernels/helper.h: In function 'int helper(int)':
kernels/helper.h:2:39: error: 'undefined_thing' was not declared in this scope
    2 | inline int helper(int x) { return x + undefined_thing; }
      |                                       ^~~~~~~~~~~~~~~
kernels/relu_binding.cpp: In function 'int f(int)':
kernels/relu_binding.cpp:4:22: error: 'missing_fn' was not declared in this scope
    4 |   return helper(a) + missing_fn(a);
      |                      ^~~~~~~~~~
kernels/relu_binding.cpp:3:7: warning: unused variable 'unused' [-Wunused-variable]
    3 |   int unused;
      |       ^~~~~~
"""

NVCC_MISSING_INCLUDE = """\
kernels/inc.cu:1:10: fatal error: kernels/nothere.cuh: No such file or directory
    1 | #include "kernels/nothere.cuh"
      |          ^~~~~~~~~~~~~~~~~~~~~
compilation terminated.
"""

LD_OUTPUT = """\
/usr/bin/ld: /tmp/cco6vjnL.o: in function `f(int)':
l.cpp:(.text+0x11): undefined reference to `launch_relu'
collect2: error: ld returned 1 exit status
"""


def test_nvcc_error_located_with_column() -> None:
    (diag,) = parse_diagnostics(NVCC_ERROR, tool="nvcc")
    assert diag.severity is Severity.ERROR
    assert (diag.file, diag.line, diag.column) == ("kernels/bad.cu", 5, 21)
    assert diag.message == 'identifier "foo" is undefined'
    assert diag.tool == "nvcc"


def test_nvcc_warning_keeps_its_number() -> None:
    diags = parse_diagnostics(NVCC_WARNING_AND_PTXAS, tool="nvcc")
    assert len(diags) == 1
    assert diags[0].severity is Severity.WARNING
    assert diags[0].file == "kernels/warn.cu" and diags[0].line == 6
    assert diags[0].message.startswith("#177-D: variable \"unused\"")
    assert not has_errors(diags)


def test_gxx_errors_and_warnings_in_order_with_columns() -> None:
    diags = parse_diagnostics(GXX_OUTPUT, tool="c++")
    assert [(d.severity, d.file, d.line, d.column) for d in diags] == [
        (Severity.ERROR, "kernels/helper.h", 2, 39),
        (Severity.ERROR, "kernels/relu_binding.cpp", 4, 22),
        (Severity.WARNING, "kernels/relu_binding.cpp", 3, 7),
    ]
    assert "missing_fn" in diags[1].message


def test_missing_include_is_an_error() -> None:
    (diag,) = parse_diagnostics(NVCC_MISSING_INCLUDE, tool="nvcc")
    assert diag.severity is Severity.ERROR and diag.file == "kernels/inc.cu" and diag.line == 1


def test_ptxas_error_and_linker_errors() -> None:
    (ptxas,) = parse_diagnostics(PTXAS_ERROR, tool="nvcc")
    assert ptxas.tool == "ptxas" and ptxas.severity is Severity.ERROR and "too much shared data" in ptxas.message
    (undef,) = parse_diagnostics(LD_OUTPUT, tool="c++")
    assert undef.tool == "ld" and "launch_relu" in undef.message


def test_build_dirs_are_stripped_and_generated_lines_mapped() -> None:
    paths = PathMap(prefixes=("/cache/tmp/stage-x",),
                    generated={"inline/0_relu/cuda.cu": (Segment(first=4, last=20, file="model_new.py", file_line=7),)})
    text = "/cache/tmp/stage-x/inline/0_relu/cuda.cu(6): error: expected a \";\"\n"
    (diag,) = parse_diagnostics(text, tool="nvcc", paths=paths)
    assert (diag.file, diag.line) == ("model_new.py", 9)
    outside = "/cache/tmp/stage-x/inline/0_relu/cuda.cu(2): error: boom\n"
    (diag,) = parse_diagnostics(outside, tool="nvcc", paths=paths)
    assert (diag.file, diag.line) == ("inline/0_relu/cuda.cu", 2)
    assert paths.scrub("In file included from /cache/tmp/stage-x/kernels/a.cu:1") == \
        "In file included from kernels/a.cu:1"


def test_a_path_holding_a_known_prefix_twice_is_scrubbed_once_by_its_longest_prefix() -> None:
    from cudagym.judge import hostpaths
    from cudagym.judge.build.cache import default_cache_root

    tmp, cache = tempfile.gettempdir(), str(default_cache_root())
    text = (f"{tmp}/cudagym-tool-6danr9nz{tmp}/ccRLCoJj.s: Assembler messages:\n"
            f"ld: {cache}/build{tmp}/obj-r9r2_31j/bomb.cu.o: error\n-I{tmp}/x '{cache}/build/obj/ab/k/a.o'")
    assert hostpaths.scrub(text) == ("<tmp>/cudagym-tool-6danr9nz/tmp/ccRLCoJj.s: Assembler messages:\n"
                                     "ld: <cache>/build/tmp/obj-r9r2_31j/bomb.cu.o: error\n"
                                     "-I<tmp>/x '<cache>/build/obj/ab/k/a.o'")
    paths = PathMap(prefixes=(f"{cache}/build/tmp/stage-x",), names={f"{cache}/build/obj/ab/k/a.o": "kernels/a.cu"})
    assert paths.scrub(f"{cache}/build/tmp/stage-x/kernels/a.cu:3: error; {cache}/build/obj/ab/k/a.o: x") == \
        "kernels/a.cu:3: error; kernels/a.cu: x"


def test_linker_multiple_definition_names_both_sources() -> None:
    paths = PathMap(names={"/c/obj/1/dup2.cu.o": "kernels/dup2.cu", "/c/obj/2/dup.cu.o": "kernels/dup.cu"})
    text = ("/usr/bin/ld: /c/obj/1/dup2.cu.o:(.data+0x0): multiple definition of `x'; "
            "/c/obj/2/dup.cu.o:(.data+0x0): first defined here\ncollect2: error: ld returned 1 exit status\n")
    (diag,) = parse_diagnostics(text, tool="ld", paths=paths)
    assert diag.severity is Severity.ERROR and diag.file == "kernels/dup2.cu"
    assert diag.message == "multiple definition of `x' (first defined in kernels/dup.cu)"


def test_ptxas_resources_per_entry_function() -> None:
    res = parse_ptxas_resources(NVCC_WARNING_AND_PTXAS)
    assert [r.kernel for r in res] == ["relu", "_Z3bigPfi"]  # helper is a device function, not an entry
    relu, big = res
    assert relu.registers == 10 and relu.shared_mem_bytes == 0
    assert big.registers == 32 and big.shared_mem_bytes == 4096 and big.stack_frame_bytes == 256


def test_ptxas_spills_and_constant_banks() -> None:
    (spill,) = parse_ptxas_resources(PTXAS_SPILL)
    assert (spill.registers, spill.spill_stores_bytes, spill.spill_loads_bytes) == (32, 168, 168)
    (k,) = parse_ptxas_resources(PTXAS_CMEM)
    assert k.registers == 14 and k.constant_mem_bytes == 368


def test_nvrtc_ptxas_log_format() -> None:
    (relu,) = parse_ptxas_resources(NVRTC_LOG)
    assert relu.kernel == "relu" and relu.registers == 10 and relu.stack_frame_bytes == 0


@pytest.mark.skipif(shutil.which("c++filt") is None, reason="c++filt not installed")
def test_demangled_names() -> None:
    res = parse_ptxas_resources(NVCC_WARNING_AND_PTXAS, cxxfilt=shutil.which("c++filt") or "")
    assert [r.kernel for r in res] == ["relu", "big(float*, int)"]
    assert demangle(["_Z6helperf", "plain"], cxxfilt=shutil.which("c++filt") or "") == ["helper(float)", "plain"]


def test_demangle_without_cxxfilt_keeps_names() -> None:
    assert demangle(["_Z6helperf"], cxxfilt="") == ["_Z6helperf"]
