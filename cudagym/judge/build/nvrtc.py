"""NVRTC through CuPy's binding (``cupy_backends.cuda.libs.nvrtc``): CUDA source to cubin, no GPU needed.

The binding compiles on a host without a GPU or driver (the build stage's case): only NVRTC's own calls
run, and the arch is always given (``--gpu-architecture=sm_90``). CuPy's higher-level
``cupy.cuda.compiler`` / ``RawModule(code=...)`` are not used: they query the device for its arch and fail
without one.

CuPy finds ``libnvrtc`` itself (through ``cuda.pathfinder``: an ``nvidia-cuda-nvrtc`` wheel in
site-packages, conda, the system loader, then ``CUDA_PATH`` / ``CUDA_HOME``); ``CUDAGYM_NVRTC_LIB`` names a
file to use instead (loaded first, CuPy then takes the library already loaded). A compile runs in a child
process so that the build's deadline and output cap can kill it: a compile bomb inside NVRTC would otherwise
hang the builder itself. The child runs this file as a script (stdlib and CuPy only; ``python -I FILE LIB
ROOTS``), loads the library the parent found, and stays up between compiles
(:mod:`cudagym.judge.build.nvrtc_server` drives it), so a compile costs NVRTC's time and nothing more.
"""

from __future__ import annotations

import ctypes
import glob
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NVRTC_LIB_ENV = "CUDAGYM_NVRTC_LIB"


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


def find_nvrtc() -> str:
    """Path of the libnvrtc CuPy compiles with (loading it into this process), or ``""`` when there is none.

    ``""`` also when CuPy is not installed, or ``CUDAGYM_NVRTC_LIB`` names a file that does not load.
    """
    override = os.environ.get(NVRTC_LIB_ENV, "")
    try:
        if override:
            preload(override)
        binding = _binding()
        binding.getVersion()  # CuPy looks the library up and loads it, or raises
        from cuda.pathfinder import load_nvidia_dynamic_lib  # CuPy's own lookup, cached: the same answer

        return str(load_nvidia_dynamic_lib("nvrtc").abs_path)
    except (ImportError, OSError, RuntimeError):  # pathfinder's not-found error is a RuntimeError
        return ""


def preload(path: str) -> None:
    """Load the libnvrtc at ``path`` (and its ``libnvrtc-builtins`` sibling) so that CuPy uses that one.

    Raises:
        OSError: ``path`` does not load.
    """
    # libnvrtc dlopens libnvrtc-builtins by soname; outside the toolkit (pip wheels) nothing puts its
    # directory on the search path, so load the sibling first (the loader then matches it by soname)
    for builtins in sorted(glob.glob(os.path.join(os.path.dirname(path), "libnvrtc-builtins.so.*"))):
        if ".alt." not in builtins:
            ctypes.CDLL(builtins, mode=ctypes.RTLD_GLOBAL)
    ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)


def _binding() -> Any:
    from cupy_backends.cuda.libs import nvrtc as binding

    return binding


def nvrtc_version() -> str:
    """``major.minor`` of the NVRTC CuPy loaded (call :func:`find_nvrtc` first)."""
    major, minor = _binding().getVersion()
    return f"{major}.{minor}"


def compile_source(source: str, name: str, options: list[str]) -> NvrtcOutput:
    """Compile one CUDA source to cubin with NVRTC, in this process (options must name a real ``sm_`` arch)."""
    binding = _binding()
    prog = binding.createProgram(source, name, [], [])
    try:
        try:
            binding.compileProgram(prog, options)
        except binding.NVRTCError as exc:
            log = _log(binding, prog)
            return NvrtcOutput(False, log or str(exc), b"")
        return NvrtcOutput(True, _log(binding, prog), bytes(binding.getCUBIN(prog)))
    finally:
        binding.destroyProgram(prog)


def _log(binding: Any, prog: Any) -> str:
    log = binding.getProgramLog(prog)
    text = log.decode("utf-8", errors="replace") if isinstance(log, bytes) else str(log)
    return text.rstrip("\x00")  # the binding keeps the C string's terminator


def _serve(lib: str) -> int:
    """Child-process loop: one JSON request per stdin line, one JSON reply per stdout line.

    Request: ``{"cwd", "source", "name", "out", "options", "max_output_bytes"}`` (``source``/``out`` may
    be relative to ``cwd``, as include options are). Reply: ``{"ok", "log", "overflow"}``; the cubin is
    written to ``out`` only when ``ok``. The library is loaded once, so a compile costs only NVRTC.
    """
    preload(lib)
    _binding().getVersion()
    for line in sys.stdin:
        request = json.loads(line)
        os.chdir(request["cwd"])
        text = Path(request["source"]).read_text(encoding="utf-8", errors="replace")
        out = compile_source(text, request["name"], request["options"])
        cap = int(request["max_output_bytes"])
        overflow = len(out.log.encode("utf-8", errors="replace")) > cap
        if out.ok and not overflow:
            Path(request["out"]).write_bytes(out.cubin)
        reply = {"ok": out.ok and not overflow, "log": out.log[:cap], "overflow": overflow}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    # run with -I (no environment hooks, no script folder on the path): the parent's import roots come after the
    # child's own, so CuPy imports from wherever the parent found it (PYTHONPATH, a user site) and shadows nothing
    sys.path += [root for root in json.loads(sys.argv[2]) if root not in sys.path]
    sys.exit(_serve(sys.argv[1]))
