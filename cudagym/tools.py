"""The tools an agent calls: file operations on the workspace, and builds and evaluations by the judge.

Every tool is a handler with one signature, ``(ToolContext, arguments) -> ToolResult``, registered by
name in :data:`TOOLS` (the names and argument schemas are in :mod:`cudagym.toolcalls`). Handlers never
raise for agent input: a refused path, a missing file or a failing build is a result with ``ok=False``
and a text saying why.

Without a GPU on the judge, ``compile`` runs the real build, and ``verify`` / ``profile`` / ``submit``
build too and then report plainly that no GPU is available (status ``no_gpu``: not evaluated).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from cudagym.judge.interface import EvalMode, Judge
from cudagym.judge.records import BuildResult, BuildStatus, EvalResult, EvalStatus, Hardware, no_gpu_verdict
from cudagym.observation import (
    render_action_error,
    render_build,
    render_eval,
    render_file,
    render_listing,
    render_refusal,
)
from cudagym.solution import Solution
from cudagym.task import Task
from cudagym.toolcalls import ActionError, ToolCall
from cudagym.workspace import FileRefused, Workspace

logger = logging.getLogger(__name__)

DEFAULT_READ_LINES = 2000
_before_judge = threading.local()  # .callback: what judge_waits_on_this_thread() was given


@dataclass
class ToolContext:
    """What a tool acts on during one episode.

    Attributes:
        workspace: The episode's files.
        task: The reference task.
        judge: Builds and evaluates solutions.
        hardware: The judge's GPU (``gpu == "none"`` without one), read once per episode.
        read_lines: Lines ``read_file`` shows when the agent gives no ``limit``.
    """

    workspace: Workspace
    task: Task
    judge: Judge
    hardware: Hardware = field(default_factory=Hardware)
    read_lines: int = DEFAULT_READ_LINES

    @property
    def has_gpu(self) -> bool:
        """True when the judge can check and time solutions."""
        return self.hardware.gpu != "none"


@dataclass(frozen=True)
class ToolResult:
    """What one tool call did.

    Attributes:
        tool: The tool's name (empty when the action named no known tool).
        ok: True when the tool did what was asked (a build passed, a verdict was correct, a file was read).
        text: The observation body.
        error: Why it failed, as a kind (``refused``, ``bad_json``, ``unknown_tool``, ...); empty when ok.
        build: The build record of ``compile``; None for other tools.
        evaluation: The verdict of ``verify``/``profile``/``submit``; None for other tools.
        solution: The snapshot that was built or evaluated; None for file tools.
        ends_episode: True for ``submit``.
    """

    tool: str
    ok: bool
    text: str
    error: str = ""
    build: BuildResult | None = None
    evaluation: EvalResult | None = None
    solution: Solution | None = None
    ends_episode: bool = False


Handler = Callable[[ToolContext, Mapping[str, Any]], ToolResult]


def run_tool(call: ToolCall | ActionError, ctx: ToolContext) -> ToolResult:
    """Run a parsed action (or report why it could not be parsed); never raises for agent input."""
    if isinstance(call, ActionError):
        return ToolResult(tool=call.tool, ok=False, text=render_action_error(call), error=call.kind)
    try:
        result = TOOLS[call.name](ctx, call.arguments)
    except FileRefused as exc:
        result = ToolResult(call.name, False, render_refusal(call.name, str(exc)), error="refused")
    except OSError as exc:  # the disk, not the agent: say so instead of crashing the episode
        logger.warning("%s failed in %s: %s", call.name, ctx.workspace.root, exc)
        result = ToolResult(call.name, False, f"Error: {call.name} failed: {exc.strerror or exc}", error="os_error")
    if call.ignored_calls:
        note = f"Note: {call.ignored_calls} more tool call(s) in this action were ignored; one runs per step.\n"
        result = _with_text(result, note + result.text)
    return result


# -- file tools ---------------------------------------------------------------------------------------


def read_file(ctx: ToolContext, args: Mapping[str, Any]) -> ToolResult:
    """Numbered lines of a file."""
    rel = ctx.workspace.normalize(args["path"])
    text = ctx.workspace.read_text(rel)
    offset, limit = args.get("offset", 1), args.get("limit", ctx.read_lines)
    total = len(text.splitlines())
    if total and offset > total:
        raise FileRefused(f"{rel} has {total} lines; offset {offset} is past the end")
    return ToolResult("read_file", True, render_file(rel, text, offset, limit))


def write_file(ctx: ToolContext, args: Mapping[str, Any]) -> ToolResult:
    """Create or overwrite a writable file."""
    rel = ctx.workspace.normalize(args["path"])
    size, created = ctx.workspace.write_text(rel, args["content"])
    lines = args["content"].count("\n") + (0 if args["content"].endswith("\n") or not args["content"] else 1)
    verb = "Created" if created else "Overwrote"
    sizes = f"{size} byte{'' if size == 1 else 's'}, {lines} line{'' if lines == 1 else 's'}"
    return ToolResult("write_file", True, f"{verb} {rel} ({sizes}).")


def edit_file(ctx: ToolContext, args: Mapping[str, Any]) -> ToolResult:
    """Exact-match replacement in a writable file."""
    rel = ctx.workspace.normalize(args["path"])
    count, lines = ctx.workspace.edit(rel, args["old"], args["new"], bool(args.get("replace_all", False)))
    where = ", ".join(str(n) for n in lines[:10]) + (" ..." if len(lines) > 10 else "")
    plural = "s" if count > 1 else ""
    return ToolResult("edit_file", True, f"Edited {rel}: replaced {count} occurrence{plural} (line{plural} {where}).")


def list_files(ctx: ToolContext, args: Mapping[str, Any]) -> ToolResult:
    """The workspace's files with sizes and read-only marks."""
    folder = args.get("path", "")
    entries = ctx.workspace.listing(folder)
    return ToolResult("list_files", True, render_listing(entries, folder))


# -- judge tools --------------------------------------------------------------------------------------


def compile_solution(ctx: ToolContext, args: Mapping[str, Any]) -> ToolResult:
    """Build the current files (works without a GPU)."""
    solution = ctx.workspace.snapshot()
    build = _guarded_build(ctx, solution)
    error = "" if build.ok else build.status.value
    return ToolResult("compile", build.ok, render_build(build), error, build=build, solution=solution)


def _evaluator(mode: EvalMode) -> Handler:
    def evaluate(ctx: ToolContext, args: Mapping[str, Any]) -> ToolResult:
        solution = ctx.workspace.snapshot()
        result = _guarded_evaluate(ctx, solution, mode)
        error = "" if result.correct else result.status.value
        return ToolResult(
            mode.value, result.correct, render_eval(result, mode.value), error,
            evaluation=result, solution=solution, ends_episode=mode is EvalMode.SUBMIT,
        )

    evaluate.__name__ = mode.value
    evaluate.__doc__ = f"Judge the current files ({mode.value})."
    return evaluate


def evaluate_solution(ctx: ToolContext, solution: Solution, mode: EvalMode) -> EvalResult:
    """The judge's verdict on a snapshot (the env's final evaluation at truncation uses it too)."""
    return _guarded_evaluate(ctx, solution, mode)


@contextlib.contextmanager
def judge_waits_on_this_thread(callback: Callable[[], None]) -> Iterator[None]:
    """Call ``callback`` each time a tool run on this thread is about to wait on the judge.

    The vector env uses it to know when a sub-env has handed its work to the judge (everything before
    that is this process's own work, which it keeps apart from the other sub-envs' file tools).
    """
    previous = getattr(_before_judge, "callback", None)
    _before_judge.callback = callback
    try:
        yield
    finally:
        _before_judge.callback = previous


def _waiting_on_judge() -> None:
    callback = getattr(_before_judge, "callback", None)
    if callback is not None:
        callback()


def _guarded_evaluate(ctx: ToolContext, solution: Solution, mode: EvalMode) -> EvalResult:
    start = time.perf_counter()
    if not ctx.has_gpu:
        # No GPU: run the real build so the agent still gets compiler feedback, and say plainly that
        # nothing was checked or timed (status no_gpu: not the agent's fault, so not scored).
        build = _guarded_build(ctx, solution)
        return no_gpu_verdict(build, protocol_id=ctx.judge.protocol.id, hardware=ctx.hardware,
                              wall_time_s=time.perf_counter() - start)
    try:
        _waiting_on_judge()
        return ctx.judge.evaluate(ctx.task, solution, mode)
    except Exception as exc:  # a judge must not raise for a candidate; if it does, it is the judge's fault
        logger.exception("judge.evaluate raised for task %s", ctx.task.id)
        return EvalResult(
            status=EvalStatus.INFRA_ERROR, message=f"the judge failed: {type(exc).__name__}: {exc}",
            protocol_id=ctx.judge.protocol.id, hardware=ctx.hardware, wall_time_s=time.perf_counter() - start,
        )


def _guarded_build(ctx: ToolContext, solution: Solution) -> BuildResult:
    try:
        _waiting_on_judge()
        return ctx.judge.build(ctx.task, solution)
    except Exception as exc:  # as above: infrastructure, reported as a tool error rather than a crash
        logger.exception("judge.build raised for task %s", ctx.task.id)
        return BuildResult(BuildStatus.TOOL_ERROR, solution.format, message=f"the build failed to run: {exc}")


def _with_text(result: ToolResult, text: str) -> ToolResult:
    return replace(result, text=text)


TOOLS: dict[str, Handler] = {
    "read_file": read_file,
    "write_file": write_file,
    "edit_file": edit_file,
    "list_files": list_files,
    "compile": compile_solution,
    "verify": _evaluator(EvalMode.VERIFY),
    "profile": _evaluator(EvalMode.PROFILE),
    "submit": _evaluator(EvalMode.SUBMIT),
}
