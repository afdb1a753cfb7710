"""The ``raw`` format's builder: ``extern "C" __global__`` kernels in ``kernels/*.cu`` to cubins.

Each ``.cu`` becomes one cubin for the target arch, by NVRTC through CuPy's binding when CuPy can load a
``libnvrtc`` (tens of milliseconds; :mod:`cudagym.judge.build.nvrtc`) or by ``nvcc -cubin`` otherwise (about
half a second); the backend is recorded. Set
``CUDAGYM_RAW_BACKEND=nvcc`` or ``nvrtc`` to force one. Both run with ptxas ``-v``, so per-kernel
registers, shared memory and spills are reported either way.

The artifact is a directory holding the cubins and ``manifest.json``; ``BuildResult.artifact_path`` is
the manifest. :mod:`cudagym.runtime` reads it (the GPU worker points ``CUDAGYM_RAW_MANIFEST`` at it) to
find each source's cubin and its kernels' parameter types::

    {"format": "raw", "arch": "sm_90", "backend": "nvrtc", "backend_version": "13.0",
     "units": {"kernels/relu.cu": {"cubin": "kernels__relu.cu.cubin", "source_sha256": "...",
                                   "kernels": [{"name": "relu", "params": [["x", "float*", "ptr", false], ...]}]}}}
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from cudagym.errors import BuildToolError
from cudagym.judge.build import nvrtc
from cudagym.judge.build.cache import BuildCache, content_key, write_atomic
from cudagym.judge.build.diagnostics import PathMap, parse_diagnostics, parse_ptxas_resources
from cudagym.judge.build.kernel_signature import KernelSignature, parse_kernels
from cudagym.judge.build.nvrtc_server import server_for
from cudagym.judge.build.process import BuildLimits, Deadline, ToolRun
from cudagym.judge.build.staging import select, write_files
from cudagym.judge.build.toolchain import cuda_tools, target_arch
from cudagym.judge.build.units import OUT_TOKEN, CompileUnit, UnitResult, compile_units, failure
from cudagym.judge.protocol import Protocol
from cudagym.judge.records import BuildResult, BuildStatus, Diagnostic, KernelResources, Severity
from cudagym.solution import Solution
from cudagym.task import Task

BACKEND_ENV = "CUDAGYM_RAW_BACKEND"
MANIFEST = "manifest.json"
NVCC_CUBIN_FLAGS = ("-cubin", "-O3", "-std=c++17", "-lineinfo", "-Xptxas", "-v")
NVRTC_FLAGS = ("-std=c++17", "-lineinfo", "--ptxas-options=-v")


@dataclass(frozen=True)
class RawBackend:
    """How cubins are made: ``nvrtc`` (library path) or ``nvcc``."""

    name: str
    version: str
    path: str
    include_dirs: tuple[str, ...]
    cxxfilt: str


def pick_backend(preference: str = "") -> RawBackend:
    """The backend to compile with: NVRTC when loadable, else nvcc (or as ``CUDAGYM_RAW_BACKEND`` says).

    Raises:
        BuildToolError: Neither is available, or the forced one is missing.
    """
    want = (preference or os.environ.get(BACKEND_ENV, "auto")).lower()
    if want not in ("auto", "nvrtc", "nvcc"):
        raise BuildToolError(f"expected {BACKEND_ENV} to be auto, nvrtc or nvcc, got {want!r}")
    try:
        tools = cuda_tools()
    except BuildToolError:
        if want == "nvcc":
            raise
        tools = None
    if want != "nvcc":
        home = tools.cuda_home if tools else os.environ.get("CUDA_HOME", "/usr/local/cuda")
        lib = nvrtc.find_nvrtc()
        if lib:
            includes = (str(Path(home) / "include"),) if (Path(home) / "include").is_dir() else ()
            cxxfilt = tools.cxxfilt if tools else (shutil.which("c++filt") or "")
            return RawBackend("nvrtc", nvrtc.nvrtc_version(), lib, includes, cxxfilt)
        if want == "nvrtc":
            raise BuildToolError("expected CuPy and a libnvrtc it can load (pip install nvidia-cuda-nvrtc, a CUDA "
                                 f"toolkit on the loader's path, or ${nvrtc.NVRTC_LIB_ENV}), found none; install one "
                                 f"or unset {BACKEND_ENV}")
    if tools is None:
        cuda_tools()  # raises the missing-nvcc message
        raise AssertionError("unreachable")
    return RawBackend("nvcc", tools.version, tools.nvcc, (), tools.cxxfilt)


def build_raw(task: Task, solution: Solution, protocol: Protocol, cache: BuildCache) -> BuildResult:
    """Compile a ``raw`` solution's kernels to cubins (see the module docstring)."""
    files = dict(solution.files)
    limits = BuildLimits.from_protocol(protocol)
    sources = select(files, "kernels/*.cu")
    layout = _layout_error(files, sources)
    if layout:
        return BuildResult(BuildStatus.INVALID, "raw", message=layout)
    signatures = {rel: parse_kernels(text) for rel, text in sources.items()}
    if not any(signatures.values()):
        return BuildResult(BuildStatus.INVALID, "raw", message=(
            'expected at least one extern "C" __global__ kernel in kernels/*.cu, found none; the raw format '
            'launches kernels by their C names: extern "C" __global__ void relu(const float* x, ...)'))
    backend = pick_backend()
    arch = target_arch()
    headers = select(files, "kernels/*.cuh")
    units = [cubin_unit(rel, text, headers, backend, arch) for rel, text in sources.items()]
    deadline = Deadline(limits.timeout_s)
    with cache.staging() as stage:
        write_files(stage, {**sources, **headers})
        results = compile_units(units, cache=cache, cwd=stage, deadline=deadline, limits=limits)
        paths = PathMap(prefixes=(str(stage),))
        log = paths.scrub("".join(r.output for r in results))
    return _finish(results, sources, signatures, backend, arch, cache, limits, log, paths)


def _layout_error(files: dict[str, str], sources: dict[str, str]) -> str:
    if "model_new.py" not in files:
        return ("model_new.py is missing; the raw format needs model_new.py (class ModelNew, launching kernels "
                "through cudagym.runtime) and kernels/*.cu")
    if not sources:
        return "no kernels: expected kernels/<name>.cu files holding extern \"C\" __global__ kernels"
    return ""


def cubin_unit(rel: str, text: str, headers: dict[str, str], backend: RawBackend, arch: str) -> CompileUnit:
    """The compile of one source to a cubin (keyed by backend, arch, flags, source and headers)."""
    runner = None
    if backend.name == "nvrtc":
        flags: tuple[str, ...] = (f"--gpu-architecture={arch}", *NVRTC_FLAGS, "-Ikernels", "-I.",
                                  *(f"-I{d}" for d in backend.include_dirs))
        argv: tuple[str, ...] = ("nvrtc", rel, *flags)
        runner = functools.partial(_nvrtc_compile, lib=backend.path, options=flags)
    else:
        flags = (*NVCC_CUBIN_FLAGS, f"-arch={arch}", "-Ikernels", "-I.")
        argv = (backend.path, *flags, rel, "-o", OUT_TOKEN)
    key = content_key("raw-cubin", backend.name, backend.version, flags, rel, text, headers)
    return CompileUnit(source=rel, kind="cubin", key=key, argv=argv, tool=backend.name,
                       artifact=rel.replace("/", "__") + ".cubin", runner=runner)


def _nvrtc_compile(unit: CompileUnit, out: Path, cwd: Path, deadline: Deadline, limits: BuildLimits, *,
                   lib: str, options: tuple[str, ...]) -> ToolRun:
    return server_for(lib).compile(cwd=cwd, source=unit.source, out=out, options=options, deadline=deadline,
                                   limits=limits)


def _finish(results: list[UnitResult], sources: dict[str, str], signatures: dict[str, tuple[KernelSignature, ...]],
            backend: RawBackend, arch: str, cache: BuildCache, limits: BuildLimits, log: str,
            paths: PathMap) -> BuildResult:
    diagnostics: list[Diagnostic] = []
    kernels: list[KernelResources] = []
    for r in results:
        diagnostics += parse_diagnostics(r.output, tool=backend.name, paths=paths)
        kernels += parse_ptxas_resources(r.output, cxxfilt=backend.cxxfilt)
    for rel, sigs in signatures.items():
        for sig in sigs:
            diagnostics += [Diagnostic(Severity.WARNING, f"kernel {sig.name}: parameter {p.name} has type "
                                       f"{p.ctype!r}, which cudagym.runtime cannot pass; use pointers, integers, "
                                       "float, double or bool", rel, 0, 0, "cudagym")
                            for p in sig.params if p.kind == "unsupported"]
    common = dict(format="raw", diagnostics=tuple(diagnostics), kernels=tuple(kernels),
                  log=log[: limits.max_log_chars])
    failed = failure(results, limits)
    if failed is not None:
        status, message = failed
        return BuildResult(status, message=message, **common)  # type: ignore[arg-type]
    manifest_path = _artifact(results, sources, signatures, backend, arch, cache)
    cached = all(r.cached for r in results)
    names = sorted(s.name for sigs in signatures.values() for s in sigs)
    message = (f"built {len(results)} cubin(s) for {arch} with {backend.name} {backend.version} "
               f"({sum(r.cached for r in results)} cached); kernels: {', '.join(names)}")
    if backend.name == "nvrtc" and not kernels:
        message += "; NVRTC reported no ptxas resources"
    return BuildResult(BuildStatus.OK, message=message, cached=cached, artifact_key=manifest_path.parent.name,
                       artifact_path=str(manifest_path), **common)  # type: ignore[arg-type]


def _artifact(results: list[UnitResult], sources: dict[str, str], signatures: dict[str, tuple[KernelSignature, ...]],
              backend: RawBackend, arch: str, cache: BuildCache) -> Path:
    key = content_key("raw-artifact", [r.unit.key for r in results],
                      {rel: [s.to_dict() for s in sigs] for rel, sigs in signatures.items()})
    entry = cache.lookup("raw", key)
    if entry is not None:
        return entry / MANIFEST
    units = {}
    with cache.staging(prefix="raw-") as stage:
        for r in results:
            assert r.path is not None
            shutil.copyfile(r.path, stage / r.unit.artifact)
            units[r.unit.source] = {
                "cubin": r.unit.artifact,
                "source_sha256": source_sha256(sources[r.unit.source]),
                "kernels": [s.to_dict() for s in signatures[r.unit.source]],
            }
        manifest = {"format": "raw", "arch": arch, "backend": backend.name, "backend_version": backend.version,
                    "units": units}
        write_atomic(stage / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True).encode())
        return cache.commit("raw", key, stage) / MANIFEST


def source_sha256(text: str) -> str:
    """The hash the manifest records for a source (the runtime compares it with the file it loads)."""
    return hashlib.sha256(text.encode("utf-8", errors="surrogateescape")).hexdigest()
