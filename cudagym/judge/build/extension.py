"""The ``extension`` format's builder (the default) and its loader for the GPU worker.

Layout (see :mod:`cudagym.solution`)::

    model_new.py              import cuda_extension; class ModelNew(...)
    kernels/<op>.cu           pure CUDA: __global__ kernels + an extern "C" launcher (raw pointers, stream)
    kernels/<op>_binding.cpp  torch glue: checks, allocation, REGISTER_BINDING(name, fn)
    kernels/*.cuh, *.h        headers (part of every object's cache key)
    binding.cpp, binding_registry.h   protected: the judge compiles its own copies

Compile commands (``.cu`` by nvcc for the target arch only; ``.cpp`` by the host compiler with
``<torch/extension.h>`` force-included, precompiled once it is built: see :func:`torch_prelude`)::

    nvcc -O3 -std=c++17 -Xptxas -v -Xcompiler -fPIC -lineinfo -arch=sm_90 -ccbin c++ -Ikernels -I. -c kernels/relu.cu
    c++ -std=<torch's> -O1 -fPIC -fvisibility=hidden -D_GLIBCXX_USE_CXX11_ABI=<torch's>
        -DTORCH_API_INCLUDE_EXTENSION_H -DTORCH_EXTENSION_NAME=cuda_extension -include <prelude>/torch_ext.h
        -I. -Ikernels -I<torch> -I<python> -I<cuda> -c kernels/relu_binding.cpp

The agent's ``.cpp`` files see ``TORCH_EXTENSION_NAME=cuda_extension`` (a fixed name keeps their objects
cacheable across edits); the unique module name only exists at link time. Module naming rule: the
library is ``<artifact dir>/cudagym_ext_<artifact_key[:16]>.so`` and exports
``PyInit_cudagym_ext_<artifact_key[:16]>``; :func:`load_extension` imports it under that name and
aliases it as ``cuda_extension``. ``BuildResult.message`` reads ``built module <name> (objects: C
compiled, H cached; linked)``; ``manifest.json`` beside the library records the module name and the
torch, CUDA and arch it was built for.
"""

from __future__ import annotations

import json
import types
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cudagym.judge.build.cache import BuildCache, content_key
from cudagym.judge.build.diagnostics import PathMap, parse_diagnostics, parse_ptxas_resources
from cudagym.judge.build.process import BuildLimits, Deadline, RunOutcome
from cudagym.judge.build.staging import select, stage_solution
from cudagym.judge.build.toolchain import NVCC_FLAGS
from cudagym.judge.build.torch_ext import (
    BINDING_IMPL,
    INFRA_TIMEOUT_S,
    MANIFEST,
    PCH_TEXT,
    ExtToolchain,
    LinkResult,
    Prelude,
    binding_unit,
    host_toolchain,
    infra_failure,
    link_extension,
    load_torch_module,
    toolchain_links,
    torch_prelude,
)
from cudagym.judge.build.units import OUT_TOKEN, CompileUnit, UnitResult, compile_unit, compile_units, failure
from cudagym.judge.protocol import Protocol
from cudagym.judge.records import BuildResult, BuildStatus, Diagnostic, KernelResources, Severity
from cudagym.solution import Solution
from cudagym.task import Task

MODULE_PREFIX = "cudagym_ext"
AGENT_MODULE = "cuda_extension"  # the name model_new.py imports
SOURCES = ("kernels/*.cu", "kernels/*.cpp")
HEADERS = ("kernels/*.cuh", "kernels/*.h")


def layout_error(files: dict[str, str]) -> str:
    """Why an ``extension`` solution cannot be built as laid out, or ``""``."""
    if "model_new.py" not in files:
        return ("model_new.py is missing; the extension format needs model_new.py (class ModelNew, "
                "`import cuda_extension`) plus kernels/<op>.cu and kernels/<op>_binding.cpp")
    cu = select(files, "kernels/*.cu")
    cpp = select(files, "kernels/*.cpp")
    bindings = [p for p in cpp if p.endswith("_binding.cpp")]
    if not cu and not cpp:
        return "no kernels: expected kernels/<op>.cu (CUDA) and kernels/<op>_binding.cpp (REGISTER_BINDING)"
    if not bindings:
        return ("no kernels/<op>_binding.cpp: nothing registers a function with REGISTER_BINDING, so "
                "cuda_extension would be empty")
    for binding in bindings:
        stem = binding[: -len("_binding.cpp")]
        if f"{stem}.cu" not in cu and f"{stem}.cpp" not in cpp:
            return (f"{binding} has no sources: expected {stem}.cu (or {stem}.cpp for cuBLAS/cuDNN calls) "
                    "next to it")
    return ""


def build_extension(task: Task, solution: Solution, protocol: Protocol, cache: BuildCache) -> BuildResult:
    """Build an ``extension`` solution into one torch extension (see the module docstring)."""
    files = dict(solution.files)
    problem = layout_error(files)
    if problem:
        return BuildResult(BuildStatus.INVALID, "extension", message=problem)
    limits = BuildLimits.from_protocol(protocol)
    deadline = Deadline(limits.timeout_s)
    # the judge's protected binding module is built once per toolchain, on its own clock
    infra = Deadline(max(limits.timeout_s, INFRA_TIMEOUT_S))
    tc = host_toolchain(cache)
    with cache.staging() as stage, ThreadPoolExecutor(max_workers=1) as pool:
        stage_solution(solution, stage, patterns=(*SOURCES, *HEADERS))
        paths = PathMap(prefixes=(str(stage),))
        # every unit at once: the protected module init needs no torch headers, and the solution's host
        # files use the torch PCH if it is built, else parse torch themselves while it builds elsewhere
        prelude = torch_prelude(tc, cache, stage / "prelude")
        binding_future = pool.submit(compile_unit, binding_unit(tc, stage / "protected"), cache=cache, cwd=stage,
                                     deadline=infra, limits=limits)
        cu_units = [_cu_unit(tc, rel, text, files) for rel, text in select(files, "kernels/*.cu").items()]
        cpp_units = [_cpp_unit(tc, rel, text, files, prelude)
                     for rel, text in select(files, "kernels/*.cpp").items()]
        unit_results = compile_units([*cu_units, *cpp_units], cache=cache, cwd=stage, deadline=deadline,
                                     limits=limits)
        cu_results = unit_results[: len(cu_units)]
        binding = binding_future.result()
        if not binding.ok:
            return infra_failure(binding, "extension")
        results = [*unit_results, binding]
        log = paths.scrub("".join(r.output for r in results))
    diagnostics = tuple(d for r in results for d in parse_diagnostics(r.output, tool=r.unit.tool, paths=paths))
    kernels = tuple(k for r in cu_results for k in parse_ptxas_resources(r.output, cxxfilt=tc.tools.cxxfilt))
    counts = f"objects: {sum(not r.cached for r in results)} compiled, {sum(r.cached for r in results)} cached"
    failed = failure(results, limits)
    if failed is not None:
        return BuildResult(failed[0], "extension", message=f"{failed[1]} ({counts})", diagnostics=diagnostics,
                           kernels=kernels, log=log[: limits.max_log_chars])
    link = link_extension(tc, results, prefix=MODULE_PREFIX, impl=BINDING_IMPL, extra_ldflags=(), cache=cache,
                          deadline=deadline, limits=limits)
    return link_result(link, results, diagnostics, kernels, log, counts, limits, "extension", tc=tc, cache=cache,
                       paths=paths)


def link_result(link: LinkResult, results: list[UnitResult], diagnostics: tuple[Diagnostic, ...],
                kernels: tuple[KernelResources, ...], log: str, counts: str, limits: BuildLimits,
                fmt: str, *, tc: ExtToolchain, cache: BuildCache, paths: PathMap | None = None) -> BuildResult:
    """The BuildResult of a linked (or failed) torch extension.

    A link that fails is the candidate's failure (``COMPILE_ERROR``: its objects and flags are what was
    linked) unless the toolchain cannot link even an empty extension (:func:`toolchain_links`): then
    ``TOOL_ERROR``. Linker messages name the agent's sources, never a cache path.
    """
    if link.path is not None:
        cached = link.cached and all(r.cached for r in results)
        return BuildResult(BuildStatus.OK, fmt, message=f"built module {link.module} ({counts}; "
                           f"{'cached' if link.cached else 'linked'})", diagnostics=diagnostics, kernels=kernels,
                           log=log[: limits.max_log_chars], cached=cached, artifact_key=link.path.parent.name,
                           artifact_path=str(link.path))
    run = link.run
    names = {str(r.path): r.unit.source for r in results if r.path is not None}
    link_paths = PathMap(prefixes=paths.prefixes if paths else (), names=names)
    output = link_paths.scrub(run.output) if run is not None else ""
    link_diags = parse_diagnostics(run.output if run is not None else "", tool="ld", paths=link_paths)
    status, why = _link_failure(link, tc, cache)
    first = next((d.message for d in link_diags if d.severity is Severity.ERROR), "")
    message = f"link failed: {why or first or 'see the linker output'} ({counts})"
    return BuildResult(status, fmt, message=message, diagnostics=diagnostics + link_diags, kernels=kernels,
                       log=(log + output)[: limits.max_log_chars])


def _link_failure(link: LinkResult, tc: ExtToolchain, cache: BuildCache) -> tuple[BuildStatus, str]:
    """The status of a failed link, and a reason where the linker's own messages are not it."""
    run = link.run
    if run is not None and run.outcome is RunOutcome.TIMEOUT:
        return BuildStatus.TIMEOUT, "the linker ran past the build timeout"
    if link.too_large or (run is not None and run.outcome is RunOutcome.OUTPUT_LIMIT):
        return BuildStatus.OUTPUT_LIMIT, "the linked module or the linker's output is over its cap"
    if run is not None and run.outcome is RunOutcome.NOT_FOUND:
        return BuildStatus.TOOL_ERROR, f"the judge could not run the linker: {run.output}"
    probe = toolchain_links(tc, cache)
    if not probe.ok:
        return BuildStatus.TOOL_ERROR, ("the judge's toolchain cannot link an empty torch extension on this host "
                                        f"(not your solution's fault): {probe.output[-2000:]}")
    return BuildStatus.COMPILE_ERROR, ""


def _cu_unit(tc: ExtToolchain, rel: str, text: str, files: dict[str, str]) -> CompileUnit:
    flags = (*NVCC_FLAGS, f"-arch={tc.arch}", "-ccbin", tc.tools.cxx, "-Ikernels", "-I.")
    key = content_key("ext-cu", tc.tools.fingerprint(), tc.arch, flags, rel, text, select(files, *HEADERS))
    return CompileUnit(source=rel, kind="obj", key=key, tool="nvcc", artifact=Path(rel).stem + ".cu.o",
                       argv=(tc.tools.nvcc, *flags, "-c", rel, "-o", OUT_TOKEN), tools=(tc.tools.cxx,))


def _cpp_unit(tc: ExtToolchain, rel: str, text: str, files: dict[str, str], prelude: Prelude) -> CompileUnit:
    flags = (*tc.host_flags(), f"-DTORCH_EXTENSION_NAME={AGENT_MODULE}")
    protected = {**select(files, *HEADERS), "<protected>": _protected_text()}
    # the prelude's text, not whether it was precompiled: the object is the same either way
    key = content_key("ext-cpp", tc.fingerprint(), flags, tc.key_includes(), rel, text, protected, PCH_TEXT)
    return CompileUnit(source=rel, kind="obj", key=key, tool="c++", artifact=Path(rel).stem + ".o",
                       argv=(tc.tools.cxx, *flags, *prelude.flags(), "-I.", "-Ikernels", *tc.host_includes(),
                             "-c", rel, "-o", OUT_TOKEN), reads=(*tc.reads(), *prelude.reads()))


def _protected_text() -> str:
    from cudagym.solution import get_format

    return json.dumps(get_format("extension").template_files(), sort_keys=True)


def load_extension(build_result: BuildResult, *, alias: str | None = AGENT_MODULE) -> types.ModuleType:
    """Import a built extension in the GPU worker (torch must be importable; the worker has it loaded).

    Args:
        build_result: An OK ``extension`` build (its ``artifact_path`` is the ``.so``).
        alias: Also register the module in ``sys.modules`` under this name (``cuda_extension``, what
            model_new.py imports); ``None`` to skip.

    Raises:
        BuildToolError: The artifact is missing, was built for another torch, or cannot be loaded.
    """
    import sys

    from cudagym.errors import BuildToolError

    so = Path(build_result.artifact_path)
    manifest = so.parent / MANIFEST
    if not build_result.ok or not so.is_file() or not manifest.is_file():
        raise BuildToolError(f"expected an OK extension build with its artifact on this host, got status "
                             f"{build_result.status.value} and artifact {so}; build it here (or copy the cache)")
    info = json.loads(manifest.read_text())
    module = load_torch_module(so, expect_torch=info.get("torch", ""))
    if alias:
        sys.modules[alias] = module
    return module
