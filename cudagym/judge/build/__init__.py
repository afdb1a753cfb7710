"""The build stage: one builder per solution format, one signature, outputs cached by content.

>>> from cudagym.judge.build import build
>>> result = build(task, solution, protocol)          # doctest: +SKIP
>>> result.status, result.artifact_path                # BuildStatus.OK, '/.../cudagym_ext_....so'

Every builder has the signature ``(task, solution, protocol, cache) -> BuildResult`` and is found by the
solution's format name in :data:`BUILDERS`; adding a format is one :func:`register_builder` call. A
builder never raises for a bad candidate: broken code is ``COMPILE_ERROR``, a wrong layout ``INVALID``,
a compile bomb ``TIMEOUT`` or ``OUTPUT_LIMIT``; a missing compiler is ``TOOL_ERROR`` (not the agent's
fault). Whatever fails because of what the candidate wrote or recorded is the candidate's failure;
``TOOL_ERROR`` is kept for failures that no candidate input causes. No text of a result names a host path
(:func:`cudagym.judge.hostpaths.scrub_build_result`). Builds run on CPU (nvcc needs no GPU); the GPU worker
only loads the artifact:

- ``extension``: :func:`cudagym.judge.build.extension.load_extension`;
- ``inline``: :func:`cudagym.judge.build.inline.install_inline_loader`;
- ``raw``: :mod:`cudagym.runtime`, pointed at the manifest by ``CUDAGYM_RAW_MANIFEST``.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable

from cudagym.errors import BuildToolError, ConfigError, SandboxUnavailableError
from cudagym.judge import confine
from cudagym.judge.build.cache import BuildCache, default_cache_root
from cudagym.judge.build.extension import build_extension
from cudagym.judge.build.inline import build_inline
from cudagym.judge.build.process import COMPILER_MEMORY_BYTES, compile_slots
from cudagym.judge.build.pycheck import check_model_new, failed_python_checks, not_python, with_python_checks
from cudagym.judge.build.raw import build_raw
from cudagym.judge.hostpaths import scrub_build_result
from cudagym.judge.protocol import Protocol, get_protocol
from cudagym.judge.records import BuildResult, BuildStatus, Isolation
from cudagym.solution import Solution
from cudagym.task import Task

logger = logging.getLogger(__name__)

Builder = Callable[[Task, Solution, Protocol, BuildCache], BuildResult]

BUILDERS: dict[str, Builder] = {}


def register_builder(format_name: str, builder: Builder) -> None:
    """Make ``builder`` build solutions of ``format_name`` (replacing any earlier one)."""
    BUILDERS[format_name] = builder


register_builder("extension", build_extension)
register_builder("inline", build_inline)
register_builder("raw", build_raw)

_default_cache: BuildCache | None = None


def default_cache() -> BuildCache:
    """The process-wide cache under the user cache directory (created on first use)."""
    global _default_cache
    if _default_cache is None or _default_cache.root != default_cache_root() / "build":
        _default_cache = BuildCache()
    return _default_cache


def build(
    task: Task, solution: Solution, protocol: Protocol | str | None = None, cache: BuildCache | None = None,
) -> BuildResult:
    """Build ``solution`` with its format's builder.

    Args:
        task: The task the solution answers (recorded in logs).
        solution: The agent's files.
        protocol: Supplies the build timeout (and caps in ``extra``); default: the default protocol.
        cache: Artifact cache; default: :func:`default_cache`.

    Raises:
        ConfigError: No builder is registered for the solution's format.
    """
    builder = BUILDERS.get(solution.format)
    if builder is None:
        raise ConfigError(f"expected a solution format with a builder ({', '.join(sorted(BUILDERS))}), "
                          f"got {solution.format!r}; register one with register_builder()")
    start = time.monotonic()
    # model_new.py read statically, never run here: the builders of extension and raw never look at it
    checks = check_model_new(solution.files.get("model_new.py"), solution.format)
    try:
        isolation = confine.isolation(limits=build_limits_words())
        if not_python(checks) and solution.format == "inline":  # its build would run a file that cannot run
            result = failed_python_checks(solution.format, checks)
        else:
            result = with_python_checks(builder(task, solution, get_protocol(protocol), cache or default_cache()),
                                        checks)
    except (BuildToolError, SandboxUnavailableError) as exc:
        isolation = Isolation()
        result = with_python_checks(BuildResult(BuildStatus.TOOL_ERROR, solution.format, message=str(exc)), checks)
    wall = time.monotonic() - start
    # one funnel for every text the agent reads: no builder's message, log or diagnostic names a host path
    result = dataclasses.replace(scrub_build_result(result), isolation=isolation)
    logger.info("build %s (%s): %s in %.2f s%s", task.id, solution.format, result.status.value, wall,
                " (cached)" if result.cached else "")
    return _with_wall_time(result, wall)


def warm_up(
    cache: BuildCache | None = None, formats: tuple[str, ...] = ("extension", "raw"),
) -> dict[str, BuildResult]:
    """Build each format's worked example and the torch PCH (call at worker start).

    The once-per-toolchain work (the torch PCH, the protected binding module, tool discovery) is then
    done before the first agent's build, which a build alone does not promise: it leaves the PCH to a
    background thread.
    """
    from cudagym.judge.build.torch_ext import wait_for_pch
    from cudagym.solution import get_format
    from cudagym.templates import example_task

    cache = cache or default_cache()
    task = example_task()
    protocol = get_protocol(None).with_changes(id="cudagym-warm-up", build_timeout_s=3600)
    results = {fmt: build(task, Solution(fmt, get_format(fmt).example_files()), protocol, cache) for fmt in formats}
    if any(fmt in ("extension", "inline") for fmt in formats):
        try:
            wait_for_pch(cache)
        except BuildToolError as exc:  # no toolchain: the example builds above already say so
            logger.warning("torch PCH not built: %s", exc)
    return results


def build_limits_words() -> tuple[str, ...]:
    """The limits every compiler process runs under, in words (for :class:`~cudagym.judge.records.Isolation`)."""
    return (f"address space {COMPILER_MEMORY_BYTES >> 30} GiB per compiler process",
            f"{compile_slots()} compiler processes at once", "the build's wall-clock timeout")


def _with_wall_time(result: BuildResult, wall_s: float) -> BuildResult:
    return dataclasses.replace(result, wall_time_s=wall_s)


__all__ = ["BUILDERS", "Builder", "BuildCache", "build", "default_cache", "register_builder", "warm_up"]
