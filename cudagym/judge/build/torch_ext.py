"""The fast torch-extension pipeline shared by the ``extension`` and ``inline`` formats.

``torch.utils.cpp_extension`` rebuilds everything, for every arch in ``TORCH_CUDA_ARCH_LIST``, with no
cache across build directories. This pipeline instead:

- compiles each translation unit once per content key (sources, headers, flags, arch, compiler and torch
  versions), so editing one ``.cu`` recompiles one object and relinks;
- compiles ``.cu`` files for the target arch only;
- force-includes ``<torch/extension.h>`` in every host file, precompiled once per (torch, compiler, flags)
  into a ``.gch`` on a background thread; a build that finds no ``.gch`` yet does not wait for it (see
  :func:`torch_prelude`);
- compiles the protected pybind11 module init once, against pybind11 alone, under a fixed init name and
  gives each linked library its unique module name with a linker alias
  (``--defsym=PyInit_<unique>=PyInit_<fixed>``), so a new module name costs no compile.

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
import logging
import os
import sys
import threading
import types
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from cudagym.errors import BuildToolError
from cudagym.judge.build.cache import BuildCache, content_key, write_atomic
from cudagym.judge.build.process import BuildLimits, Deadline, RunOutcome, ToolRun, run_tool
from cudagym.judge.build.toolchain import HOST_FLAGS, CudaTools, TorchTools, cuda_tools, target_arch, torch_tools
from cudagym.judge.build.units import OUT_TOKEN, CompileUnit, UnitResult, compile_unit
from cudagym.judge.records import BuildResult, BuildStatus
from cudagym.solution import get_format

logger = logging.getLogger(__name__)

MANIFEST = "manifest.json"
PCH_HEADER = "torch_ext.h"
PCH_TEXT = "// cudagym: precompiled once per torch/compiler/flags\n#include <torch/extension.h>\n"
BINDING_IMPL = "cudagym_binding_impl"  # PYBIND11_MODULE name of the protected binding.cpp object
INFRA_TIMEOUT_S = 1800.0  # budget of the once-per-toolchain units (a torch PCH takes a minute on 2 cores)


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

    def reads(self) -> tuple[str, ...]:
        """Host folders its compiles and links read: torch's, Python's and CUDA's headers and libraries."""
        return tuple(dict.fromkeys(d for d in (*self.torch.include_dirs, self.torch.python_include,
                                               self.tools.include_dir, self.compat_include, self.torch.lib_dir,
                                               self.tools.lib_dir) if d))

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


def host_toolchain(cache: BuildCache) -> ExtToolchain:
    """The extension toolchain of this host: its nvcc and compiler, the installed torch, the target arch."""
    return make_toolchain(cache, cuda_tools(), torch_tools(), target_arch())


def module_name(prefix: str, key: str) -> str:
    """The Python module name of a linked extension: ``<prefix>_<first 16 hex digits of its key>``."""
    return f"{prefix}_{key[:16]}"


@dataclass(frozen=True)
class Prelude:
    """The header every torch host file is compiled with (``-include``): ``<torch/extension.h>``.

    Attributes:
        header: The ``torch_ext.h`` to force-include.
        precompiled: A ``.gch`` of it sits beside ``header`` (g++ then loads it instead of parsing torch).
    """

    header: Path
    precompiled: bool

    def flags(self) -> tuple[str, ...]:
        """g++ flags that force-include the header (``-Winvalid-pch`` says so if a ``.gch`` cannot be used)."""
        return ("-include", str(self.header), *(("-Winvalid-pch",) if self.precompiled else ()))

    def reads(self) -> tuple[str, ...]:
        """The folder a compile with :meth:`flags` reads (the header and its ``.gch``)."""
        return (str(self.header.parent),)


def torch_prelude(tc: ExtToolchain, cache: BuildCache, scratch: Path) -> Prelude:
    """The prelude for a build starting now: precompiled when the PCH is built, else plain (never waits).

    A missing PCH is started in the background (:func:`pch_in_background`) and this build's host files
    parse torch's headers themselves. Either way they see the same text, so an object's cache key does
    not depend on which it got. On the H200 host a binding file took 18 s parsed, 9 s against the PCH,
    and the PCH itself 33 s: waiting for it would make the first build slower, not faster.
    """
    entry = cache.lookup("pch", pch_key(tc))
    if entry is not None and (entry / f"{PCH_HEADER}.gch").is_file() and (entry / PCH_HEADER).is_file():
        return Prelude(entry / PCH_HEADER, precompiled=True)
    pch_in_background(tc, cache)
    header = scratch / PCH_HEADER
    write_atomic(header, PCH_TEXT.encode())
    return Prelude(header, precompiled=False)


def pch_key(tc: ExtToolchain) -> str:
    """Content key of the toolchain's torch PCH."""
    return content_key("pch", tc.fingerprint(), tc.host_flags(), tc.key_includes(), PCH_TEXT)


_background = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cudagym-pch")
_pending: dict[tuple[str, str], Future[UnitResult]] = {}
_pending_lock = threading.Lock()


def pch_in_background(tc: ExtToolchain, cache: BuildCache) -> Future[UnitResult]:
    """Build the toolchain's torch PCH on a background thread (once per process and cache; see :func:`build_pch`).

    The thread is joined at interpreter exit, so a short-lived process finishes the PCH for the next one.
    """
    slot = (str(cache.root), pch_key(tc))
    with _pending_lock:
        future = _pending.get(slot)
        # asked for again after it was built: pruned from the cache since; after an exception (the cache
        # directory removed under it): worth another try; after the compiler failed: it would fail again
        if future is None or (future.done() and (future.exception() is not None or future.result().ok)):
            future = _pending[slot] = _background.submit(build_pch, tc, cache)
        return future


def wait_for_pch(cache: BuildCache) -> UnitResult:
    """This host's torch PCH in ``cache``, built now if it is missing (what a warm-up waits for)."""
    return pch_in_background(host_toolchain(cache), cache).result()


def build_pch(tc: ExtToolchain, cache: BuildCache) -> UnitResult:
    """The precompiled ``<torch/extension.h>`` in the cache (compiled once per toolchain, under its lock)."""
    try:
        return _build_pch(tc, cache)
    except OSError as exc:  # e.g. the cache directory removed under it: the next build starts it again
        logger.warning("the torch PCH did not build: %s", exc)
        raise


def _build_pch(tc: ExtToolchain, cache: BuildCache) -> UnitResult:
    key = pch_key(tc)
    with cache.staging(prefix="pch-src-") as scratch:
        header = scratch / PCH_HEADER
        write_atomic(header, PCH_TEXT.encode())
        unit = CompileUnit(source=f"<pch {PCH_HEADER}>", kind="pch", key=key, tool="c++",
                           artifact=f"{PCH_HEADER}.gch", trusted=True, reads=tc.reads(),
                           argv=(tc.tools.cxx, *tc.host_flags(), *tc.host_includes(), "-x", "c++-header",
                                 str(header), "-o", OUT_TOKEN))
        result = compile_unit(unit, cache=cache, cwd=scratch, deadline=Deadline(INFRA_TIMEOUT_S),
                              limits=BuildLimits())
    if result.path is not None and not (result.path.parent / PCH_HEADER).is_file():
        write_atomic(result.path.parent / PCH_HEADER, PCH_TEXT.encode())
    if result.path is None:
        logger.warning("the torch PCH did not build (%s, exit status %s); host files are compiled without it "
                       "(about twice as slow): %s", result.outcome.value, result.returncode, result.output[-2000:])
    return result


def infra_failure(result: UnitResult, fmt: str) -> BuildResult:
    """A TOOL_ERROR for a failed judge-owned unit (the protected binding module): not the agent's fault."""
    return BuildResult(BuildStatus.TOOL_ERROR, fmt, message=f"the judge could not build {result.unit.source} "
                       f"({result.outcome.value}, exit status {result.returncode}); the torch/CUDA toolchain on "
                       "this host is broken", log=result.output[-8000:])


def binding_unit(tc: ExtToolchain, scratch: Path) -> CompileUnit:
    """The package's protected ``binding.cpp`` (the pybind11 module init), compiled once per toolchain.

    It defines ``CUDAGYM_REGISTRY_ONLY``, so the registry header gives it pybind11 alone, not torch: it
    compiles in seconds beside the solution's own files instead of after the torch PCH.
    """
    templates = get_format("extension").template_files()
    for rel, text in templates.items():
        write_atomic(scratch / rel, text.encode())
    flags = (*tc.host_flags(), f"-DTORCH_EXTENSION_NAME={BINDING_IMPL}")
    key = content_key("binding-obj", tc.fingerprint(), flags, tc.key_includes(), templates)
    return CompileUnit(source="binding.cpp", kind="obj", key=key, tool="c++", artifact="binding.o", trusted=True,
                       reads=tc.reads(), argv=(tc.tools.cxx, *flags, f"-I{scratch}", *tc.host_includes(),
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
    cache: BuildCache, deadline: Deadline, limits: BuildLimits, kind: str = "ext", python_module: bool = True,
) -> LinkResult:
    """Link compiled objects into ``<module>.so`` (cached by the objects' keys and the flags).

    ``python_module``: alias the module's init (``PyInit_<module>`` to ``PyInit_<impl>``); a library that
    only registers operators (``load_inline(is_python_module=False)``) has none.
    """
    flags = tc.link_flags(extra_ldflags)
    key = content_key("ext-link", tc.fingerprint(), flags, impl, python_module, [o.unit.key for o in objects])
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
            alias = (f"-Wl,--defsym=PyInit_{name}=PyInit_{impl}",) if python_module else ()
            argv = [tc.tools.cxx, *[str(o.path) for o in objects], "-o", str(out), *flags, *alias]
            run = run_tool(argv, cwd=stage, deadline=deadline, max_output_bytes=limits.max_output_bytes,
                           reads=(*tc.reads(), *dict.fromkeys(os.path.dirname(str(o.path)) for o in objects)),
                           writes=(stage,),
                           file_size_bytes=2 * limits.max_artifact_bytes + (64 << 20),
                           memory_bytes=limits.compiler_memory_bytes)
            if not run.ok or not out.is_file():
                return LinkResult(run, None, name, False)
            if out.stat().st_size > limits.max_artifact_bytes:
                return LinkResult(run, None, name, False, too_large=True)
            manifest = {"module": name, "so": out.name, "key": key, "torch": tc.torch.version,
                        "cuda": tc.tools.version, "arch": tc.arch, "cudart_major": tc.tools.major}
            write_atomic(stage / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True).encode())
            final = cache.commit(kind, key, stage)
            return LinkResult(run, final / out.name, name, cached=False)


_links_here: dict[str, ToolRun] = {}  # toolchain key -> its probe's run, once per process (a host does not change)


def toolchain_links(tc: ExtToolchain, cache: BuildCache) -> ToolRun:
    """Whether this toolchain links a torch extension at all: an empty one, with the judge's own flags only.

    Asked after a link failed: if this probe links, the failure came from what the candidate linked (its
    objects, its ``-l`` flags) and is the candidate's; if it fails too, the toolchain is broken.
    """
    key = content_key("link-probe", tc.fingerprint(), tc.link_flags())
    if key not in _links_here or not _links_here[key].ok:
        with cache.staging(prefix="link-probe-") as stage:
            argv = [tc.tools.cxx, "-x", "c++", "/dev/null", "-o", str(stage / "probe.so"), *tc.link_flags()]
            _links_here[key] = run_tool(argv, cwd=stage, deadline=Deadline(INFRA_TIMEOUT_S), reads=tc.reads(),
                                        writes=(stage,), max_output_bytes=BuildLimits().max_output_bytes)
    return _links_here[key]


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
