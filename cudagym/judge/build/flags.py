"""The compiler and linker flags an agent may pass (the ``inline`` format's ``extra_*`` arguments).

Every flag reaches g++, nvcc or ld, and many of them run programs or read files (``-wrapper``, ``-B``,
``-specs=``, ``-fplugin=``, ``@file``, ``-Xlinker --script``), so the judge accepts a short allow-list and
refuses anything else, naming the flag. No flag widens what a compiler sees: the sandbox binds only the
folders the judge chose (:func:`cudagym.judge.build.process.run_tool`), so a path in a ``-D`` value names
nothing the compiler can open.

- both compilers: ``-O0``..``-O3``/``-Os``, ``-std=c++14|17|20``, ``-D``/``-U`` macros, warnings (``-w``,
  ``-Wall``, ``-Wextra``, ``-Wno-*``), ``-g``, ``-fPIC``, ``-fopenmp``, ``-I`` folders inside the workspace
  (relative; never ``-I=dir``, gcc's sysroot form);
- nvcc also: ``-lineinfo``, ``-Xptxas -v``/``-O3`` (``--ptxas-options=``), ``--maxrregcount=N``,
  ``--expt-relaxed-constexpr``, ``--extended-lambda``, ``--resource-usage``, ``-Xcompiler`` with an allowed
  host flag, the arch flags (replaced by the judge's target arch anyway); ``--use_fast_math`` and the
  precision switches (``-ftz``, ``-prec-div``, ``-prec-sqrt``, ``-fmad``) only where the protocol allows
  fast math (``Protocol.extra["allow_fast_math"]``);
- the linker: ``-l`` of the CUDA libraries (cuBLAS, cuBLASLt, cuDNN, cuRAND, cuFFT, cuSPARSE, cuSOLVER, the
  driver, the runtime, NVTX); no ``-L``, ``-Wl,`` or library paths (the toolchain's are already there).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence

_COMMON = re.compile(
    r"-O[0-3s]|-std=c\+\+(14|17|20)|--std=c\+\+(14|17|20)|-[DU][A-Za-z_][A-Za-z0-9_]*(=[^\s]*)?|-w|-Wall|-Wextra"
    r"|-Wno-[a-z0-9-]+|-g|-fPIC|-fopenmp|-DNDEBUG")
_NVCC = re.compile(
    r"-lineinfo|--maxrregcount=\d+|-maxrregcount=\d+|--expt-relaxed-constexpr|--expt-extended-lambda"
    r"|--extended-lambda|--resource-usage|-res-usage|--ptxas-options=(-v|-O[0-3])|-Xptxas=(-v|-O[0-3])"
    r"|(-arch|--gpu-architecture|-code|--gpu-code)(=\S+)?|-gencode(=\S+)?|--generate-code(=\S+)?")
_FAST_MATH = re.compile(r"--use_fast_math|-use_fast_math|-ffast-math|-ftz=(true|false)|-prec-div=(true|false)"
                        r"|-prec-sqrt=(true|false)|-fmad=(true|false)")
_PTXAS_VALUES = {"-v", "-O0", "-O1", "-O2", "-O3"}
_TAKES_VALUE = {"-Xptxas", "-Xcompiler", "--compiler-options", "-arch", "--gpu-architecture", "-gencode",
                "--generate-code", "-code", "--gpu-code", "-maxrregcount"}
_LIBS = {"cublas", "cublasLt", "cudnn", "curand", "cufft", "cusparse", "cusolver", "cuda", "cudart", "nvToolsExt",
         "c10", "torch", "torch_cpu", "torch_cuda", "c10_cuda"}


def refused_flag(field: str, flags: Sequence[str], *, allow_fast_math: bool = False) -> str:
    """Why one of ``flags`` (a ``load_inline`` argument named ``field``) is refused, or ``""`` if all pass.

    Args:
        field: ``extra_cflags``, ``extra_cuda_cflags``, ``extra_ldflags`` or ``extra_include_paths``.
        flags: The values the agent passed.
        allow_fast_math: The protocol allows ``--use_fast_math`` and its precision switches.
    """
    checks = {"extra_cflags": _host_flag, "extra_cuda_cflags": _nvcc_flag, "extra_ldflags": _link_flag,
              "extra_include_paths": _include_path}
    check = checks[field]
    values = list(flags)
    i = 0
    while i < len(values):
        flag = values[i].strip()
        if field == "extra_cuda_cflags" and flag in _TAKES_VALUE:
            nxt = values[i + 1].strip() if i + 1 < len(values) else ""
            problem = _nvcc_pair(flag, nxt, allow_fast_math)
            i += 2
        else:
            problem = check(flag, allow_fast_math)
            i += 1
        if problem:
            return f"{field}: {problem}"
    return ""


def _why(flag: str) -> str:
    if flag.startswith("@"):
        return f"{flag!r} is refused: response files are not allowed"
    return f"{flag!r} is not an allowed flag (see the task's rules: optimisation, -std, -D/-U, warnings, " \
           "-lineinfo, -Xptxas -v, --maxrregcount, -I inside the workspace)"


def _host_flag(flag: str, allow_fast_math: bool) -> str:
    if _COMMON.fullmatch(flag) or (allow_fast_math and flag == "-ffast-math"):
        return ""
    if flag.startswith("-I"):
        return _include_path(flag[2:], allow_fast_math)
    if _FAST_MATH.fullmatch(flag):
        return f"{flag!r} changes floating-point results and this protocol does not allow fast math"
    return _why(flag)


def _nvcc_flag(flag: str, allow_fast_math: bool) -> str:
    if _COMMON.fullmatch(flag) or _NVCC.fullmatch(flag):
        return ""
    if flag.startswith("-I"):
        return _include_path(flag[2:], allow_fast_math)
    if _FAST_MATH.fullmatch(flag):
        return "" if allow_fast_math else (f"{flag!r} changes floating-point results and this protocol does not "
                                           "allow fast math")
    if flag.startswith(("-Xcompiler=", "--compiler-options=")):
        return _host_list(flag.split("=", 1)[1], allow_fast_math)
    return _why(flag)


def _nvcc_pair(flag: str, value: str, allow_fast_math: bool) -> str:
    if flag == "-Xptxas":
        return "" if value in _PTXAS_VALUES else f"'-Xptxas {value}' is refused: only -v and -O0..-O3 pass to ptxas"
    if flag in ("-Xcompiler", "--compiler-options"):
        return _host_list(value, allow_fast_math)
    if flag == "-maxrregcount":
        return "" if value.isdigit() else f"'-maxrregcount {value}' needs a number"
    return "" if re.fullmatch(r"[A-Za-z0-9_.,=\[\]]+", value) else _why(f"{flag} {value}")


def _host_list(value: str, allow_fast_math: bool) -> str:
    for part in filter(None, value.split(",")):
        problem = _host_flag(part.strip(), allow_fast_math)
        if problem:
            return f"-Xcompiler {problem}"
    return ""


def _link_flag(flag: str, _allow_fast_math: bool) -> str:
    if flag.startswith("-l") and flag[2:] in _LIBS:
        return ""
    if flag.startswith("-l"):
        return f"{flag!r} is refused: only the CUDA libraries link ({', '.join(sorted(_LIBS))})"
    return f"{flag!r} is refused: the linker accepts only -l<CUDA library>; no paths, scripts or -Wl options"


# an include folder is a plain relative path: gcc reads a leading "=" or "$SYSROOT" as the sysroot's, and
# anything else (quotes, "~", spaces, control characters) has no business in a folder of the workspace
_INCLUDE_PATH = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+/-]*")


def _include_path(path: str, _allow_fast_math: bool) -> str:
    value = path.strip()
    if not value:
        return "'-I' without a folder is refused: write the folder in the same string ('-Iinc')"
    norm = posixpath.normpath(value)
    if not _INCLUDE_PATH.fullmatch(value) or norm == ".." or norm.startswith("../"):
        return (f"include folder {path!r} is refused: only folders inside the workspace, as relative paths of "
                "letters, digits and _ . + - / (no absolute, '=' sysroot, '$SYSROOT' or '..' paths)")
    return ""
