"""The build host's tools: nvcc, the host C++ compiler, CUDA and torch headers, the target arch.

Found once per process and cached. Nothing here needs a GPU: nvcc compiles for ``sm_90`` on a CPU
machine. The target arch comes from ``CUDAGYM_CUDA_ARCH`` (``sm_90``, ``90``, ``9.0``, ``sm_90a``), else
from the GPU when this process has imported torch and it sees one, else ``sm_90`` (the H200 the judge runs on).
Missing tools raise :class:`~cudagym.errors.BuildToolError`; builders turn that into
``BuildStatus.TOOL_ERROR``, since it is never the candidate's fault.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from cudagym.errors import BuildToolError

ARCH_ENV = "CUDAGYM_CUDA_ARCH"
DEFAULT_ARCH = "sm_90"
# -O3 for device code as the issue fixes it; host glue only checks tensors and launches (-O1 compiles
# it ~1.5x faster than -O2 against torch's headers, and it is not hot).
NVCC_FLAGS = ("-O3", "-std=c++17", "-Xptxas", "-v", "-Xcompiler", "-fPIC", "-lineinfo")
HOST_FLAGS = ("-O1", "-fPIC", "-fvisibility=hidden")
# torch.utils.cpp_extension adds these to every .cu it builds; load_inline sources rely on them.
TORCH_NVCC_DEFINES = (
    "-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__", "--expt-relaxed-constexpr",
)


@dataclass(frozen=True)
class CudaTools:
    """The CUDA compiler and toolkit.

    Attributes:
        nvcc: Path of nvcc.
        cuda_home: Toolkit root (holds ``include/cuda_runtime.h``).
        version: ``13.0.88``-style release.
        cxx: Host C++ compiler (also nvcc's ``-ccbin``).
        cxx_version: First line of ``cxx --version``.
        cxxfilt: ``c++filt`` path, or ``""`` when absent (kernel names stay mangled).
    """

    nvcc: str
    cuda_home: str
    version: str
    cxx: str
    cxx_version: str
    cxxfilt: str

    @property
    def include_dir(self) -> str:
        """The toolkit's include directory."""
        return str(Path(self.cuda_home) / "include")

    @property
    def lib_dir(self) -> str:
        """The toolkit's library directory (``lib64`` or ``lib``)."""
        for name in ("lib64", "lib"):
            if (Path(self.cuda_home) / name).is_dir():
                return str(Path(self.cuda_home) / name)
        return str(Path(self.cuda_home) / "lib64")

    @property
    def major(self) -> int:
        """CUDA major version."""
        return int(self.version.split(".")[0])

    def fingerprint(self) -> dict[str, str]:
        """What of the tools changes an object file (part of every cache key)."""
        return {"nvcc": self.version, "cxx": self.cxx_version}


@dataclass(frozen=True)
class TorchTools:
    """What an extension needs from the installed torch.

    Attributes:
        version: torch's version string.
        include_dirs: torch's header directories.
        lib_dir: Directory of libtorch*.so and libc10*.so.
        python_include: Python.h's directory.
        cxx11_abi: torch's ``_GLIBCXX_USE_CXX11_ABI``.
        cxx_std: The C++ standard torch's headers need (``c++20`` from torch 2.13 on, else ``c++17``).
        cuda_libs: ``c10_cuda``/``torch_cuda`` when this torch has them (CUDA wheel), else empty.
    """

    version: str
    include_dirs: tuple[str, ...]
    lib_dir: str
    python_include: str
    cxx11_abi: bool
    cxx_std: str
    cuda_libs: tuple[str, ...]

    def fingerprint(self) -> dict[str, str]:
        """What of torch changes an object file (part of extension cache keys)."""
        return {"torch": self.version, "abi": str(int(self.cxx11_abi)), "std": self.cxx_std,
                "python": sysconfig.get_python_version()}


@functools.lru_cache(maxsize=1)
def cuda_tools() -> CudaTools:
    """Find nvcc, the CUDA toolkit, the host compiler and c++filt.

    Raises:
        BuildToolError: nvcc, the CUDA headers or a C++ compiler is missing.
    """
    nvcc = _find_nvcc()
    cuda_home = _find_cuda_home(nvcc)
    version = _nvcc_version(nvcc)
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or ""
    if not cxx:
        raise BuildToolError("expected a host C++ compiler (c++ or g++ on PATH, or $CXX), found none; "
                             "install g++ (apt-get install g++)")
    cxx_version = _first_line([cxx, "--version"])
    return CudaTools(nvcc=nvcc, cuda_home=cuda_home, version=version, cxx=cxx, cxx_version=cxx_version,
                     cxxfilt=shutil.which("c++filt") or "")


@functools.lru_cache(maxsize=1)
def torch_tools() -> TorchTools:
    """Find torch's headers and libraries (imports torch once; only extension builds need this).

    Raises:
        BuildToolError: torch or its headers are missing.
    """
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        raise BuildToolError("expected torch to be installed for extension builds, found none; pip install torch")
    root = Path(spec.origin).parent
    include = root / "include"
    if not (include / "torch" / "extension.h").is_file():
        raise BuildToolError(f"expected torch's C++ headers under {include}, found none; reinstall torch")
    import torch  # deferred: heavy, and only extension builds need the ABI flag

    version = str(torch.__version__)  # with the local part (2.11.0+cu130): CPU and CUDA wheels differ
    lib_dir = root / "lib"
    cuda_libs = tuple(n for n in ("c10_cuda", "torch_cuda") if (lib_dir / f"lib{n}.so").exists())
    return TorchTools(
        version=version,
        include_dirs=(str(include), str(include / "torch" / "csrc" / "api" / "include")),
        lib_dir=str(lib_dir),
        python_include=sysconfig.get_paths()["include"],
        cxx11_abi=bool(torch._C._GLIBCXX_USE_CXX11_ABI),
        cxx_std=torch_cxx_std(version),
        cuda_libs=cuda_libs,
    )


def torch_cxx_std(version: str) -> str:
    """The C++ standard torch ``version``'s headers need: torch 2.13 made C++20 the minimum."""
    match = re.match(r"(\d+)\.(\d+)", version)
    major, minor = (int(match.group(1)), int(match.group(2))) if match else (2, 13)
    return "c++20" if (major, minor) >= (2, 13) else "c++17"


@functools.lru_cache(maxsize=1)
def target_arch() -> str:
    """The SM the judge compiles for, e.g. ``sm_90`` (see the module docstring for the order).

    Raises:
        BuildToolError: ``CUDAGYM_CUDA_ARCH`` is set to something that is not an arch.
    """
    raw = os.environ.get(ARCH_ENV, "").strip()
    if raw:
        return normalize_arch(raw)
    # only a torch this process already imported is asked: importing it costs seconds, and a build
    # worker on a CPU host has no GPU to ask anyway
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return f"sm_{major}{minor}"
    return DEFAULT_ARCH


def normalize_arch(raw: str) -> str:
    """``sm_90``, ``90``, ``9.0``, ``compute_90`` or ``sm_90a`` -> ``sm_90`` / ``sm_90a``.

    Raises:
        BuildToolError: Not an arch.
    """
    text = raw.strip().lower().removeprefix("sm_").removeprefix("compute_")
    match = re.fullmatch(r"(\d+)\.?(\d)([af]?)", text)
    if not match:
        raise BuildToolError(f"expected {ARCH_ENV} like sm_90, 90, 9.0 or sm_90a, got {raw!r}")
    return f"sm_{match.group(1)}{match.group(2)}{match.group(3)}"


def _find_nvcc() -> str:
    explicit = os.environ.get("CUDAGYM_NVCC", "")
    if explicit:  # an explicit choice is never silently replaced by another nvcc
        if os.path.isfile(explicit) and os.access(explicit, os.X_OK):
            return explicit
        raise BuildToolError(f"expected CUDAGYM_NVCC to name an executable nvcc, got {explicit!r}; fix or unset it")
    candidates = []
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            candidates.append(str(Path(os.environ[env]) / "bin" / "nvcc"))
    candidates += [shutil.which("nvcc") or "", "/usr/local/cuda/bin/nvcc"]
    for cand in candidates:
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    raise BuildToolError("expected nvcc (CUDA toolkit) on PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin, "
                         "found none; install the CUDA toolkit or set CUDA_HOME")


def _find_cuda_home(nvcc: str) -> str:
    # nvcc may be a wrapper script outside the toolkit (as /usr/local/bin/nvcc is here), so check
    # each candidate for the runtime header instead of trusting the binary's location
    candidates = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""),
                  str(Path(os.path.realpath(nvcc)).parent.parent), "/usr/local/cuda"]
    for cand in candidates:
        if cand and (Path(cand) / "include" / "cuda_runtime.h").is_file():
            return cand
    raise BuildToolError(f"expected the CUDA headers (include/cuda_runtime.h) next to {nvcc} or in "
                         "/usr/local/cuda, found none; set CUDA_HOME to the toolkit root")


def _nvcc_version(nvcc: str) -> str:
    text = _first_line([nvcc, "--version"], all_lines=True)
    match = re.search(r"V(\d+\.\d+\.\d+)", text) or re.search(r"release (\d+\.\d+)", text)
    if not match:
        raise BuildToolError(f"expected `{nvcc} --version` to name a CUDA release, got {text[:200]!r}")
    return match.group(1)


def _first_line(argv: list[str], all_lines: bool = False) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildToolError(f"expected `{' '.join(argv)}` to run, got {exc}; check the installation") from None
    return out if all_lines else (out.splitlines() or [""])[0]
