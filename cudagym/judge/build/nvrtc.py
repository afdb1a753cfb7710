"""NVRTC through ctypes: CUDA source to cubin in a fraction of nvcc's time, no CuPy needed.

``libnvrtc`` is looked up in ``CUDAGYM_NVRTC_LIB`` (a file), the CUDA toolkit's ``lib64``, the
``nvidia-cuda-nvrtc`` pip package's directories, then ``ctypes.util.find_library``. A compile runs in a
child process (``python -m cudagym.judge.build.nvrtc REQUEST.json``) so that the build's deadline and
output cap can kill it: a compile bomb inside NVRTC would otherwise hang the builder itself. The child
runs this file as a script (stdlib only) and stays up between compiles with the library loaded
(:mod:`cudagym.judge.build.nvrtc_server` drives it), so a compile costs NVRTC's time and nothing more.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import json
import os
import site
import sys
from dataclasses import dataclass
from pathlib import Path

NVRTC_LIB_ENV = "CUDAGYM_NVRTC_LIB"
_SONAMES = ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so")


@dataclass(frozen=True)
class NvrtcOutput:
    """One NVRTC compile.

    Attributes:
        ok: True when a cubin was produced.
        log: The program log (errors, warnings, ptxas ``-v`` lines when supported).
        cubin: The cubin bytes (empty on failure).
    """

    ok: bool
    log: str
    cubin: bytes


def find_nvrtc(cuda_home: str = "") -> str:
    """Path of a loadable libnvrtc, or ``""`` when there is none."""
    for path in _candidates(cuda_home):
        try:
            _lib(path)
        except OSError:
            continue
        return path
    return ""


def _candidates(cuda_home: str) -> list[str]:
    out = [os.environ.get(NVRTC_LIB_ENV, "")]
    homes = [cuda_home, os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"]
    for home in filter(None, homes):
        for sub in ("lib64", "lib"):
            out += [str(Path(home) / sub / name) for name in _SONAMES]
    roots = list(site.getsitepackages()) + [site.getusersitepackages()] + sys.path
    for root in filter(None, roots):
        for pattern in ("nvidia/cu13/lib/libnvrtc.so*", "nvidia/cuda_nvrtc/lib/libnvrtc.so*"):
            out += sorted(p for p in glob.glob(os.path.join(root, pattern)) if "builtins" not in p)
    found = ctypes.util.find_library("nvrtc")
    if found:
        out.append(found)
    return [p for p in dict.fromkeys(out) if p and (os.path.isabs(p) and os.path.exists(p) or p == found)]


@functools.lru_cache(maxsize=4)
def _lib(path: str) -> ctypes.CDLL:
    # libnvrtc dlopens libnvrtc-builtins by soname; outside the toolkit (pip wheels) nothing puts its
    # directory on the search path, so load the sibling first (the loader then matches it by soname)
    for builtins in sorted(glob.glob(os.path.join(os.path.dirname(path), "libnvrtc-builtins.so.*"))):
        if ".alt." not in builtins:
            ctypes.CDLL(builtins, mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(path)
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p
    return lib


def nvrtc_version(path: str) -> str:
    """``major.minor`` of the NVRTC at ``path``."""
    major, minor = ctypes.c_int(), ctypes.c_int()
    _lib(path).nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return f"{major.value}.{minor.value}"


def compile_source(path: str, source: str, name: str, options: list[str]) -> NvrtcOutput:
    """Compile one CUDA source to cubin with the NVRTC library at ``path`` (in this process)."""
    lib = _lib(path)
    prog = ctypes.c_void_p()
    _check(lib, lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None))
    try:
        opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
        status = lib.nvrtcCompileProgram(prog, len(options), opts)
        size = ctypes.c_size_t()
        _check(lib, lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)))
        buf = ctypes.create_string_buffer(size.value)
        _check(lib, lib.nvrtcGetProgramLog(prog, buf))
        log = buf.value.decode("utf-8", errors="replace")
        if status != 0:
            message = lib.nvrtcGetErrorString(status).decode()
            return NvrtcOutput(False, log or message, b"")
        _check(lib, lib.nvrtcGetCUBINSize(prog, ctypes.byref(size)))
        cubin = ctypes.create_string_buffer(size.value)
        _check(lib, lib.nvrtcGetCUBIN(prog, cubin))
        return NvrtcOutput(True, log, cubin.raw)
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def _check(lib: ctypes.CDLL, status: int) -> None:
    if status != 0:
        raise RuntimeError(f"NVRTC call failed: {lib.nvrtcGetErrorString(status).decode()}")


def _serve(lib: str) -> int:
    """Child-process loop: one JSON request per stdin line, one JSON reply per stdout line.

    Request: ``{"cwd", "source", "name", "out", "options", "max_output_bytes"}`` (``source``/``out`` may
    be relative to ``cwd``, as include options are). Reply: ``{"ok", "log", "overflow"}``; the cubin is
    written to ``out`` only when ``ok``. The library is loaded once, so a compile costs only NVRTC.
    """
    _lib(lib)
    for line in sys.stdin:
        request = json.loads(line)
        os.chdir(request["cwd"])
        text = Path(request["source"]).read_text(encoding="utf-8", errors="replace")
        out = compile_source(lib, text, request["name"], request["options"])
        cap = int(request["max_output_bytes"])
        overflow = len(out.log.encode("utf-8", errors="replace")) > cap
        if out.ok and not overflow:
            Path(request["out"]).write_bytes(out.cubin)
        reply = {"ok": out.ok and not overflow, "log": out.log[:cap], "overflow": overflow}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(_serve(sys.argv[1]))
