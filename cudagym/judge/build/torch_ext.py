"""The fast torch-extension pipeline shared by the ``extension`` and ``inline`` formats.

``torch.utils.cpp_extension`` rebuilds everything, for every arch in ``TORCH_CUDA_ARCH_LIST``, with no
cache across build directories. This pipeline instead:

- compiles each translation unit once per content key (sources, headers, flags, arch, compiler and torch
  versions), so editing one ``.cu`` recompiles one object and relinks;
- compiles ``.cu`` files for the target arch only;
- precompiles ``<torch/extension.h>`` once per (torch, compiler, flags) into a ``.gch`` that host files
  pick up through ``-include``;
- compiles the heavy pybind11 module file once under a fixed init name and gives each linked library its
  unique module name with a linker alias (``--defsym=PyInit_<unique>=PyInit_<fixed>``), so a new module
  name costs no compile.

Linking: the build host may have the CPU-only torch wheel, which has no ``libc10_cuda``/``libtorch_cuda``
to link against. Those symbols are left undefined (``-shared`` allows it) and resolved at load time on
the GPU host, where :func:`load_torch_module` first makes the already-loaded torch libraries global.
``libcudart`` is linked dynamically, as torch's own extensions are: the GPU host's torch has already
loaded ``libcudart.so.<major>`` (from the ``nvidia`` wheels), and the loader reuses it by soname, so
the extension and torch share one runtime (one error state: a failed launch in the candidate's code is
seen by torch's ``C10_CUDA_KERNEL_LAUNCH_CHECK``). A static cudart would give the extension a second
runtime whose exported symbols torch's could interpose. The rpath to the build host's toolkit covers
loading without torch.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import sys
import types
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cudagym.errors import BuildToolError
from cudagym.judge.build.cache import BuildCache, content_key, write_atomic
from cudagym.judge.build.process import BuildLimits, Deadline, RunOutcome, ToolRun, run_tool
from cudagym.judge.build.toolchain import HOST_FLAGS, CudaTools, TorchTools
from cudagym.judge.build.units import OUT_TOKEN, CompileUnit, UnitResult, compile_unit
from cudagym.judge.records import BuildResult, BuildStatus
from cudagym.solution import get_format

MANIFEST = "manifest.json"
PCH_HEADER = "torch_ext.h"
PCH_TEXT = "// cudagym: precompiled once per torch/compiler/flags\n#include <torch/extension.h>\n"
BINDING_IMPL = "cudagym_binding_impl"  # PYBIND11_MODULE name of the protected binding.cpp object
INFRA_TIMEOUT_S = 1800.0  # budget of the once-per-toolchain units (a cold torch PCH takes minutes on 2 cores)


@dataclass(frozen=True)
class ExtToolchain:
    """Everything a torch extension build depends on besides its sources."""

    tools: CudaTools
    torch: TorchTools
    arch: str
    compat_include: str = ""  # stand-ins for headers the CPU-only torch wheel lacks (see make_toolchain)
    compat_key: str = ""  # the stand-ins' content key: what cache keys record instead of their path

    def fingerprint(self) -> dict[str, str]:
        """Part of every key: compiler, torch and arch identity (never a path inside the cache)."""
        return {**self.tools.fingerprint(), **self.torch.fingerprint(), "arch": self.arch, "compat": self.compat_key}

    def key_includes(self) -> tuple[str, ...]:
        """:meth:`host_includes` as cache keys record them: the cache's own location left out."""
        return tuple(f for f in self.host_includes() if not self.compat_include or self.compat_include not in f)

    def host_flags(self, extra: Sequence[str] = ()) -> tuple[str, ...]:
        """g++ flags for files that include torch headers (PCH-compatible when ``extra`` is empty)."""
        return (f"-std={self.torch.cxx_std}", *HOST_FLAGS, f"-D_GLIBCXX_USE_CXX11_ABI={int(self.torch.cxx11_abi)}",
                "-DTORCH_API_INCLUDE_EXTENSION_H", *extra)

    def host_includes(self) -> tuple[str, ...]:
        """Include flags for torch, Python and CUDA headers (absolute, so keys do not depend on a stage)."""
        dirs = (*self.torch.include_dirs, self.torch.python_include, self.tools.include_dir)
        # the stand-in directory goes last: any real header of the same name is found first
        return tuple(f"-I{d}" for d in (*dirs, *([self.compat_include] if self.compat_include else [])))

    def link_flags(self, extra: Sequence[str] = ()) -> tuple[str, ...]:
        """Linker flags of a torch extension (see the module docstring)."""
        torch_libs = ("c10", "torch", "torch_cpu", "torch_python", *self.torch.cuda_libs)
        return ("-shared", f"-L{self.torch.lib_dir}", *(f"-l{n}" for n in torch_libs),
                f"-L{self.tools.lib_dir}", "-lcudart", f"-Wl,-rpath,{self.tools.lib_dir}",
                "-Wl,-Bsymbolic-functions", *extra)


# The CPU-only torch wheel ships c10/cuda headers but not the generated c10/cuda/impl/cuda_cmake_macros.h
# they include; the CUDA wheels' copy only says that c10_cuda is a shared library. Searched after every
# real include directory, so a torch that has the file always wins.
_COMPAT_HEADERS = {
    "c10/cuda/impl/cuda_cmake_macros.h": "#pragma once\n// cudagym stand-in for the CPU-only torch wheel\n"
                                         "#define C10_CUDA_BUILD_SHARED_LIBS\n",
}


def make_toolchain(cache: BuildCache, tools: CudaTools, torch: TorchTools, arch: str) -> ExtToolchain:
    """The extension toolchain, with the compat include directory when this torch needs one."""
    missing = {rel: text for rel, text in _COMPAT_HEADERS.items()
               if not any((Path(d) / rel).is_file() for d in torch.include_dirs)}
    if not missing:
        return ExtToolchain(tools, torch, arch)
    key = content_key("compat-include", missing)
    entry = cache.lookup("compat", key)
    if entry is None:
        with cache.staging(prefix="compat-") as stage:
            for rel, text in missing.items():
                write_atomic(stage / rel, text.encode())
            entry = cache.commit("compat", key, stage)
    return ExtToolchain(tools, torch, arch, compat_include=str(entry), compat_key=key)


def module_name(prefix: str, key: str) -> str:
    """The Python module name of a linked extension: ``<prefix>_<first 16 hex digits of its key>``."""
    return f"{prefix}_{key[:16]}"


def ensure_pch(tc: ExtToolchain, cache: BuildCache, scratch: Path, deadline: Deadline,
               limits: BuildLimits) -> UnitResult:
    """The precompiled ``<torch/extension.h>`` (built once per toolchain); see :func:`pch_header`."""
    flags = tc.host_flags()
    key = content_key("pch", tc.fingerprint(), flags, tc.key_includes(), PCH_TEXT)
    header = scratch / PCH_HEADER
    write_atomic(header, PCH_TEXT.encode())
    unit = CompileUnit(source=f"<pch {PCH_HEADER}>", kind="pch", key=key, tool="c++",
                       artifact=f"{PCH_HEADER}.gch", trusted=True,
                       argv=(tc.tools.cxx, *flags, *tc.host_includes(), "-x", "c++-header", str(header),
                             "-o", OUT_TOKEN))
    result = compile_unit(unit, cache=cache, cwd=scratch, deadline=deadline, limits=limits)
    if result.path is not None and not (result.path.parent / PCH_HEADER).is_file():
        write_atomic(result.path.parent / PCH_HEADER, PCH_TEXT.encode())
    return result


def pch_header(pch: UnitResult) -> Path | None:
    """The ``-include`` header next to a built ``.gch`` (g++ picks the ``.gch`` up), or ``None``."""
    return pch.path.parent / PCH_HEADER if pch.path is not None else None


def infra_failure(result: UnitResult, fmt: str) -> BuildResult:
    """A TOOL_ERROR for a failed judge-owned unit (the PCH or the binding module): not the agent's fault."""
    return BuildResult(BuildStatus.TOOL_ERROR, fmt, message=f"the judge could not build {result.unit.source} "
                       f"({result.outcome.value}, exit status {result.returncode}); the torch/CUDA toolchain on "
                       "this host is broken", log=result.output[-8000:])


def pch_flags(pch_header: Path | None) -> tuple[str, ...]:
    """Flags that make g++ use the precompiled header (``-Winvalid-pch`` says so if it cannot)."""
    return ("-include", str(pch_header), "-Winvalid-pch") if pch_header else ()


def binding_unit(tc: ExtToolchain, pch: Path | None, scratch: Path) -> CompileUnit:
    """The package's protected ``binding.cpp`` (the pybind11 module), compiled once per toolchain."""
    templates = get_format("extension").template_files()
    for rel, text in templates.items():
        write_atomic(scratch / rel, text.encode())
    flags = (*tc.host_flags(), f"-DTORCH_EXTENSION_NAME={BINDING_IMPL}")
    key = content_key("binding-obj", tc.fingerprint(), flags, tc.key_includes(), templates, bool(pch))
    return CompileUnit(source="binding.cpp", kind="obj", key=key, tool="c++", artifact="binding.o", trusted=True,
                       argv=(tc.tools.cxx, *flags, *pch_flags(pch), f"-I{scratch}", *tc.host_includes(),
                             "-c", str(scratch / "binding.cpp"), "-o", OUT_TOKEN))


@dataclass(frozen=True)
class LinkResult:
    """A linked extension (or why it is not)."""

    run: ToolRun | None  # None for a cache hit
    path: Path | None
    module: str
    cached: bool
    too_large: bool = False


def link_extension(
    tc: ExtToolchain, objects: Sequence[UnitResult], *, prefix: str, impl: str, extra_ldflags: Sequence[str],
    cache: BuildCache, deadline: Deadline, limits: BuildLimits, kind: str = "ext",
) -> LinkResult:
    """Link compiled objects into ``<module>.so`` (cached by the objects' keys and the flags)."""
    flags = tc.link_flags(extra_ldflags)
    key = content_key("ext-link", tc.fingerprint(), flags, impl, [o.unit.key for o in objects])
    name = module_name(prefix, key)
    found = cache.lookup(kind, key)
    if found is not None:
        return LinkResult(None, found / f"{name}.so", name, cached=True)
    with cache.lock(key, deadline.remaining_s()) as locked:
        if not locked:
            return LinkResult(ToolRun((), RunOutcome.TIMEOUT, -1, "", 0.0), None, name, False)
        entry = cache.entry_dir(kind, key)
        if entry.is_dir():
            return LinkResult(None, entry / f"{name}.so", name, cached=True)
        with cache.staging(prefix="link-") as stage:
            out = stage / f"{name}.so"
            argv = [tc.tools.cxx, *[str(o.path) for o in objects], "-o", str(out), *flags,
                    f"-Wl,--defsym=PyInit_{name}=PyInit_{impl}"]
            run = run_tool(argv, cwd=stage, deadline=deadline, max_output_bytes=limits.max_output_bytes)
            if not run.ok or not out.is_file():
                return LinkResult(run, None, name, False)
            if out.stat().st_size > limits.max_artifact_bytes:
                return LinkResult(run, None, name, False, too_large=True)
            manifest = {"module": name, "so": out.name, "key": key, "torch": tc.torch.version,
                        "cuda": tc.tools.version, "arch": tc.arch, "cudart_major": tc.tools.major}
            write_atomic(stage / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True).encode())
            final = cache.commit(kind, key, stage)
            return LinkResult(run, final / out.name, name, cached=False)


# torch's libraries, in dependency order; promoted to RTLD_GLOBAL before an extension loads
_TORCH_LIBS = ("libc10.so", "libc10_cuda.so", "libtorch_cpu.so", "libtorch_cuda.so", "libtorch.so",
               "libtorch_python.so")
# libraries torch loads from the nvidia wheels that kernels/*.cpp may call (cuBLAS for GEMMs, cuDNN for
# convolutions): promoted by soname, so an extension needs no -l flag for them
_CUDA_LIB_SONAMES = ("libcublas.so.13", "libcublasLt.so.13", "libcudnn.so.9", "libcublas.so.12",
                     "libcublasLt.so.12")


def load_torch_module(so_path: str | Path, *, expect_torch: str = "") -> types.ModuleType:
    """Import a built extension (GPU worker side; also works for CPU-only extensions on a CPU host).

    Args:
        so_path: The ``<module>.so``; its module name is the file's stem.
        expect_torch: torch version it was built against; a different running torch is refused.

    Raises:
        BuildToolError: The running torch differs from the build's, or the library cannot be loaded.
    """
    import torch  # deferred: the worker has it loaded already; the extension needs it first

    path = Path(so_path)
    name = path.stem
    if name in sys.modules:
        return sys.modules[name]
    # compare public versions: the dist metadata says "2.11.0" where torch.__version__ says "2.11.0+cu130"
    if expect_torch and expect_torch.split("+")[0] != torch.__version__.split("+")[0]:
        raise BuildToolError(f"expected torch {expect_torch} (the build's) in the worker, got {torch.__version__}; "
                             "build and load on hosts with the same torch")
    _promote_torch_libs(Path(torch.__file__).parent / "lib")
    spec = importlib.util.spec_from_file_location(name, str(path))
    if spec is None or spec.loader is None:
        raise BuildToolError(f"expected a loadable extension at {path}, found none; rebuild it")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ImportError as exc:
        raise BuildToolError(f"cannot load extension {path}: {exc}; check that the build host's CUDA major "
                             "version matches torch's on this host") from None
    sys.modules[name] = module
    return module


def _promote_torch_libs(lib_dir: Path) -> None:
    # torch._C is imported RTLD_LOCAL, so libc10_cuda's symbols are invisible to a library loaded later
    # unless it links them; re-opening an already-loaded library with RTLD_NOLOAD|RTLD_GLOBAL makes its
    # symbols global without loading anything new (dlopen(3))
    mode = os.RTLD_GLOBAL | getattr(os, "RTLD_NOLOAD", 0) | os.RTLD_NOW
    names = [str(lib_dir / n) for n in _TORCH_LIBS if (lib_dir / n).exists()] + list(_CUDA_LIB_SONAMES)
    for name in names:
        try:
            ctypes.CDLL(name, mode=mode)
        except OSError:
            pass  # not loaded in this process (e.g. a CPU-only torch): nothing to promote
