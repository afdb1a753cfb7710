"""Compiling translation units through the cache: one cache entry per unit, compiled in parallel.

A unit is one source file, one command and one output file, keyed by everything that determines the
output. A unit already in the cache costs a directory lookup; a missing one is compiled under its key's
lock (so two builders of the same key compile once) into a staging directory, then committed with its
compiler output (so a cached unit still reports its warnings and ptxas resources).
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import os
import shutil
import stat
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from cudagym.judge.build.cache import BuildCache, write_atomic
from cudagym.judge.build.process import BuildLimits, Deadline, RunOutcome, ToolRun, run_tool
from cudagym.judge.records import BuildStatus

OUT_TOKEN = "{out}"  # replaced in a unit's argv by the path of its output file
OUTPUT_LOG = "output.txt"
FAILED_MARK = "failed.txt"  # a unit the compiler rejected is cached too: resubmitting it costs nothing


@dataclass(frozen=True)
class CompileUnit:
    """One compiler invocation.

    Attributes:
        source: The source's path relative to the build directory (as the agent names it).
        kind: Cache kind of the output (``obj``, ``cubin``, ``pch``, ...).
        key: Content key of the output.
        argv: Command; :data:`OUT_TOKEN` marks the output path (the token may be part of an argument).
        tool: Tool name for diagnostics (``nvcc``, ``c++``, ``nvrtc``).
        artifact: Name of the output file inside the cache entry.
        env: Extra environment variables.
        trusted: The judge's own source (the torch PCH, the protected binding module): exempt from the
            artifact size cap, which is there for candidate code (a PCH of torch is ~0.8 GB).
        runner: Runs the compile instead of spawning ``argv`` (the persistent NVRTC child); called as
            ``runner(unit, out_path, cwd, deadline, limits)``. ``argv`` then only names it in reports.
        reads: Host folders the command reads besides its working folder and the system (the toolchain's
            include folders, the PCH's cache entry): the judge's own choice, the only ones bound into its view.
        tools: Executables it runs besides ``argv[0]`` (nvcc's ``-ccbin`` host compiler).
    """

    source: str
    kind: str
    key: str
    argv: tuple[str, ...]
    tool: str
    artifact: str
    env: Mapping[str, str] | None = None
    trusted: bool = False
    runner: Callable[[CompileUnit, Path, Path, Deadline, BuildLimits], ToolRun] | None = field(
        default=None, compare=False)
    reads: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()


@dataclass(frozen=True)
class UnitResult:
    """A compiled (or failed) unit.

    Attributes:
        unit: The unit.
        outcome: How the compiler run ended (``EXITED`` also for cache hits).
        returncode: Compiler exit status (0 for cache hits).
        output: Compiler output (from the cache for hits).
        path: The output file in the cache; ``None`` when it failed.
        cached: Taken from the cache without compiling.
        too_large: The output exceeded ``BuildLimits.max_artifact_bytes``.
        wall_time_s: Seconds spent compiling (0 for hits).
    """

    unit: CompileUnit
    outcome: RunOutcome
    returncode: int
    output: str
    path: Path | None
    cached: bool
    too_large: bool = False
    wall_time_s: float = 0.0

    @property
    def ok(self) -> bool:
        """True when the output file exists."""
        return self.path is not None


def compile_units(
    units: Sequence[CompileUnit], *, cache: BuildCache, cwd: Path, deadline: Deadline, limits: BuildLimits,
) -> list[UnitResult]:
    """Get every unit's output from the cache or by compiling it (in parallel); results in input order."""
    if not units:
        return []
    workers = max(1, min(len(units), os.cpu_count() or 1))
    if workers == 1:
        return [compile_unit(u, cache=cache, cwd=cwd, deadline=deadline, limits=limits) for u in units]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        # each unit in a copy of this context: it carries BUILD_OWNER (whose judge the build is for)
        futures = [pool.submit(contextvars.copy_context().run, compile_unit, u, cache=cache, cwd=cwd,
                               deadline=deadline, limits=limits) for u in units]
        return [f.result() for f in futures]


def compile_unit(
    unit: CompileUnit, *, cache: BuildCache, cwd: Path, deadline: Deadline, limits: BuildLimits,
) -> UnitResult:
    """One unit's output from the cache, or compiled into it."""
    key = cache_key(unit, limits)
    found = cache.lookup(unit.kind, key)
    if found is not None:
        return _from_entry(unit, found)
    with cache.lock(key, deadline.remaining_s()) as locked:
        if not locked:
            return UnitResult(unit, RunOutcome.TIMEOUT, -1, "", None, cached=False)
        existing = cache.entry_dir(unit.kind, key)
        if existing.is_dir():  # another builder compiled it while we waited for the lock
            return _from_entry(unit, existing)
        with cache.staging(prefix=f"{unit.kind}-") as stage:
            out = stage / unit.artifact
            if unit.runner is not None:
                run = unit.runner(unit, out, cwd, deadline, limits)
            else:
                argv = [a.replace(OUT_TOKEN, str(out)) for a in unit.argv]
                # files: room above the artifact cap (which _store reports as such); the trusted units (the
                # torch PCH: ~0.8 GB) are exempt from the cap
                size = 8 << 30 if unit.trusted else 2 * limits.max_artifact_bytes + (64 << 20)
                memory = 0 if unit.trusted else limits.compiler_memory_bytes
                run = run_tool(argv, cwd=cwd, deadline=deadline, max_output_bytes=limits.max_output_bytes,
                               env=unit.env, reads=unit.reads, writes=(stage,), tools=unit.tools,
                               file_size_bytes=size, memory_bytes=memory)
            return _store(unit, key, run, out, stage, cache, limits)


def cache_key(unit: CompileUnit, limits: BuildLimits) -> str:
    """The cache key of ``unit``'s output (or failure) under ``limits``.

    A compiler run under a probe's lowered (or raised) memory or artifact cap can fail (or pass) where the
    preset's would not, and a failure is cached too: under caps other than the defaults, a candidate unit's
    entries live apart from the preset's, so neither ever answers for the other. The judge's own (trusted) units
    run without those caps and keep their key.
    """
    default = BuildLimits()
    caps = (limits.compiler_memory_bytes, limits.max_artifact_bytes)
    if unit.trusted or caps == (default.compiler_memory_bytes, default.max_artifact_bytes):
        return unit.key
    return f"{unit.key}-caps{caps[0]}-{caps[1]}"


def _store(unit: CompileUnit, key: str, run: ToolRun, out: Path, stage: Path, cache: BuildCache,
           limits: BuildLimits) -> UnitResult:
    if run.outcome is RunOutcome.EXITED and run.returncode != 0:
        _discard(out)
        write_atomic(stage / OUTPUT_LOG, run.output.encode("utf-8", errors="replace"))
        write_atomic(stage / FAILED_MARK, str(run.returncode).encode())
        cache.commit(unit.kind, key, stage)
    if not run.ok:
        return UnitResult(unit, run.outcome, run.returncode, run.output, None, False, wall_time_s=run.wall_time_s)
    found = _output_status(out)
    if found is None:  # exited 0 without writing its output
        return UnitResult(unit, run.outcome, run.returncode, run.output, None, False, wall_time_s=run.wall_time_s)
    if isinstance(found, str):  # refused, not cached: the candidate's compile error, with the reason in its log
        output = f"{run.output}\n[cudagym judge: the output {unit.artifact} {found}; refused]\n"
        return UnitResult(unit, RunOutcome.EXITED, -1, output, None, False, wall_time_s=run.wall_time_s)
    if not unit.trusted and found.st_size > limits.max_artifact_bytes:
        return UnitResult(unit, RunOutcome.OUTPUT_LIMIT, run.returncode, run.output, None, False, too_large=True,
                          wall_time_s=run.wall_time_s)
    write_atomic(stage / OUTPUT_LOG, run.output.encode("utf-8", errors="replace"))
    entry = cache.commit(unit.kind, key, stage)
    return UnitResult(unit, RunOutcome.EXITED, 0, run.output, entry / unit.artifact, False,
                      wall_time_s=run.wall_time_s)


def _output_status(out: Path) -> os.stat_result | str | None:
    """The status of a compiler's output file; why it is refused when it is not a regular file; None if absent.

    The compiler ran confined, but what it leaves at ``out`` is the candidate's doing (its sources and flags): a
    symbolic link there would be followed by the judge's own process, which sees the host (its size checked, a host
    file taken for the unit's output), so ``out`` is opened without following a link (``O_NOFOLLOW``; ``O_NONBLOCK``
    so a fifo cannot hold the open) and judged by ``fstat`` of what was opened, as the cache's export does.
    """
    try:
        fd = os.open(out, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "is a symbolic link, not a regular file"
        return f"could not be opened ({exc.strerror})"
    try:
        info = os.fstat(fd)
    finally:
        os.close(fd)
    return info if stat.S_ISREG(info.st_mode) else "is not a regular file"


def _discard(out: Path) -> None:
    """Remove whatever a failed compiler left at ``out`` (a file, a link, a folder), never following a link."""
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISDIR(out.lstat().st_mode):
            shutil.rmtree(out)
        else:
            out.unlink()


def _from_entry(unit: CompileUnit, entry: Path) -> UnitResult:
    log = entry / OUTPUT_LOG
    output = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
    failed = entry / FAILED_MARK
    if failed.is_file():
        code = int(failed.read_text() or 1)
        return UnitResult(unit, RunOutcome.EXITED, code, output, None, cached=True)
    return UnitResult(unit, RunOutcome.EXITED, 0, output, entry / unit.artifact, cached=True)


def failure(results: Sequence[UnitResult], limits: BuildLimits) -> tuple[BuildStatus, str] | None:
    """The build's status and message when a unit failed (worst first: limits, tools, code), else ``None``."""
    for r in results:
        if r.outcome is RunOutcome.TIMEOUT:
            return BuildStatus.TIMEOUT, (f"compiling {r.unit.source} ran past the build timeout of "
                                         f"{limits.timeout_s:g} s; simplify it (template or unroll explosion?)")
    for r in results:
        if r.too_large:
            return BuildStatus.OUTPUT_LIMIT, (f"compiling {r.unit.source} produced more than "
                                              f"{limits.max_artifact_bytes} bytes; shrink it")
        if r.outcome is RunOutcome.OUTPUT_LIMIT:
            return BuildStatus.OUTPUT_LIMIT, (f"compiling {r.unit.source} printed more than "
                                              f"{limits.max_output_bytes} bytes of messages; fix the first errors")
    for r in results:
        if r.outcome is RunOutcome.NOT_FOUND:
            return BuildStatus.TOOL_ERROR, f"the judge could not run {r.unit.tool}: {r.output}"
    bad = [r.unit.source for r in results if not r.ok]
    if bad:
        return BuildStatus.COMPILE_ERROR, f"compile failed: {', '.join(bad)}"
    return None
