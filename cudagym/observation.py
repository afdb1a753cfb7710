"""Rendering tool results as the text an agent reads.

Compiler output becomes ``file:line:col: severity: message`` lines plus ptxas's per-kernel registers,
shared memory and spills; a verdict becomes a per-input correctness table (pass/fail, max abs and rel
error, first mismatching index), the guards that fired, a timing table (candidate vs eager vs
torch.compile with speedups) and the per-kernel breakdown. Long text is cut in the middle with a visible
marker. Every function here is pure: records in, text out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from cudagym.judge.harness import COMPILE_FAILED_PREFIX
from cudagym.judge.records import (
    BuildResult,
    BuildStatus,
    Diagnostic,
    EvalResult,
    EvalStatus,
    InputCheck,
    KernelResources,
    Severity,
    compile_failure,
)
from cudagym.reward import Score
from cudagym.toolcalls import EXPECTED_FORM, ActionError, signature
from cudagym.workspace import FileEntry

TRUNCATION_MARKER = "[... {n} characters truncated ...]"
_MARKER_ROOM = len(TRUNCATION_MARKER) + 12  # the marker, its count's digits and the two line breaks around it
# The shortest max_result_chars an env takes: a cut result keeps its marker and as many characters of its own
# (below the marker's room, truncate() could only cut the text short with no sign that it did).
MIN_RESULT_CHARS = 2 * _MARKER_ROOM
MAX_DIAGNOSTICS = 30
MAX_LOG_CHARS = 3000
MAX_REASON_CHARS = 300  # of why torch.compile was not timed, in the timing table

_EVAL_HEADLINES: dict[EvalStatus, str] = {
    EvalStatus.OK: "PASS",
    EvalStatus.BUILD_FAILED: "FAIL: the solution did not build",
    EvalStatus.INCORRECT: "FAIL: an output does not match the reference",
    EvalStatus.RUNTIME_ERROR: "FAIL: the solution raised an error while loading or running",
    EvalStatus.CRASHED: "FAIL: the worker process crashed running the solution",
    EvalStatus.TIMEOUT: "FAIL: the solution ran past the time limit",
    EvalStatus.RULE_VIOLATION: "FAIL: a rule was broken",
    EvalStatus.NO_GPU: "NOT RUN: no GPU is available on this judge",
    EvalStatus.INFRA_ERROR: "NOT RUN: the judge failed (not your solution's fault)",
    EvalStatus.TASK_TOO_LARGE: "NOT RUN: the task does not fit in this GPU's memory (not your solution's fault)",
}

_BUILD_HEADLINES: dict[BuildStatus, str] = {
    BuildStatus.OK: "OK",
    BuildStatus.COMPILE_ERROR: "FAILED: compile errors",
    BuildStatus.INVALID: "FAILED: the solution's files are not valid (layout or model_new.py)",
    BuildStatus.TIMEOUT: "FAILED: the build ran past its time limit",
    BuildStatus.OUTPUT_LIMIT: "FAILED: the build wrote more output than allowed",
    BuildStatus.TOOL_ERROR: "NOT RUN: a build tool is missing on the judge (not your solution's fault)",
}


def truncate(text: str, max_chars: int) -> str:
    """``text`` cut to at most ``max_chars`` characters, keeping the head and the tail around a marker."""
    if len(text) <= max_chars:
        return text
    if max_chars <= _MARKER_ROOM:
        return text[:max_chars]
    keep = max_chars - _MARKER_ROOM
    head, tail = keep * 2 // 3, keep - keep * 2 // 3
    cut = len(text) - head - tail
    return f"{text[:head]}\n{TRUNCATION_MARKER.format(n=cut)}\n{text[len(text) - tail:]}"


def render_action_error(error: ActionError) -> str:
    """Why an action was not run, and the form it should take."""
    if error.kind == "bad_arguments" and error.tool:
        return f"Error: {error.message}\nCall it as {signature(error.tool)}; the action did not run."
    return f"Error: {error.message}; the action did not run.\n{EXPECTED_FORM}"


def render_refusal(tool: str, message: str) -> str:
    """A file operation the workspace refused."""
    return f"Error: {tool} refused: {message}"


def render_file(path: str, text: str, offset: int, limit: int) -> str:
    """Lines ``offset .. offset+limit-1`` (1-based) of a file, numbered, with a note when more remain."""
    lines = text.splitlines()
    total = len(lines)
    if total == 0:
        return f"{path}: (empty file)"
    offset = min(max(offset, 1), total)
    last = min(total, offset + limit - 1)
    width = len(str(last))
    body = "\n".join(f"{n:>{width}}\t{lines[n - 1]}" for n in range(offset, last + 1))
    header = f"{path} (lines {offset}-{last} of {total})"
    more = f"\n[{total - last} more lines: read_file with offset={last + 1}]" if last < total else ""
    return f"{header}\n{body}{more}"


def render_listing(entries: Sequence[FileEntry], folder: str = "") -> str:
    """A listing: one path per line with its size and whether it is read-only."""
    if not entries:
        return f"{folder or '.'}: (empty)"
    rows = []
    for e in entries:
        if e.is_dir:
            rows.append(f"{e.path}/")
        else:
            rows.append(f"{e.path}  {e.size_bytes} B{'' if e.writable else '  (read-only)'}")
    return "\n".join(rows)


def render_build(build: BuildResult) -> str:
    """Compiler verdict: status, diagnostics with file:line, and ptxas resources per kernel."""
    cached = ", cached" if build.cached else ""
    lines = [f"Build {_BUILD_HEADLINES[build.status]} ({build.format} format, {build.wall_time_s:.1f} s{cached})"]
    if build.message:
        lines.append(build.message)
    for severity, title in ((Severity.ERROR, "Errors"), (Severity.WARNING, "Warnings")):
        diags = [d for d in build.diagnostics if d.severity is severity]
        if diags:
            lines.append(f"{title} ({len(diags)}):")
            lines.extend(f"  {_diagnostic(d)}" for d in diags[:MAX_DIAGNOSTICS])
            if len(diags) > MAX_DIAGNOSTICS:
                lines.append(f"  ... {len(diags) - MAX_DIAGNOSTICS} more")
    if build.kernels:
        lines.append("Kernels (ptxas):")
        lines.extend(_resources_table(build.kernels))
    failed_silently = not build.ok and not any(d.severity is Severity.ERROR for d in build.diagnostics)
    if failed_silently and build.log:
        lines.append("Compiler output:")
        lines.append(truncate(build.log.strip(), MAX_LOG_CHARS))
    return "\n".join(lines)


def render_eval(result: EvalResult, mode: str) -> str:
    """A verdict: headline, correctness per input, rule violations, timing, per-kernel breakdown, log."""
    lines = [f"{mode.capitalize()}: {_EVAL_HEADLINES[result.status]}"]
    if result.status is EvalStatus.NO_GPU:
        lines.append(
            f"No GPU is available, so {mode} could not check or time the solution; compile() works "
            "without one. The build ran:"
        )
    if result.message:
        lines.append(_summary_line(result))
    if result.status in (EvalStatus.BUILD_FAILED, EvalStatus.NO_GPU) or not result.build.ok:
        lines.append(render_build(result.build))
    else:
        lines.append(_build_summary(result.build))
    if result.checks:
        lines.extend(_checks_table(result.checks))
    if result.violations:
        lines.append("Rule violations:")
        lines.extend(f"  [{v.guard}] {v.message}" for v in result.violations)
    if result.candidate.measured:
        lines.extend(_timing_table(result))
    if result.kernels:
        lines.append("Kernel breakdown (candidate, per forward pass):")
        width = max(len(k.name[:60]) for k in result.kernels)
        lines.append(f"  {'kernel':<{width}}  {'time_us':>10}  {'calls':>5}  {'share':>6}")
        for k in result.kernels:
            lines.append(f"  {k.name[:60]:<{width}}  {k.time_us:>10.2f}  {k.calls:>5}  {k.share:>6.1%}")
    if result.log and not result.correct:
        lines.append("Output of the solution:")
        lines.append(truncate(result.log.strip(), MAX_LOG_CHARS))
    if result.protocol_id:
        on = {True: "on", False: "off"}
        lines.append(f"Precision: baselines and candidate ran with TF32 {on[result.precision.matmul_allow_tf32]} for "
                     f"matmuls, {on[result.precision.cudnn_allow_tf32]} for cuDNN convolutions.")
        lines.append(f"(protocol {result.protocol_id}, GPU {result.hardware.gpu})")
    return "\n".join(lines)


INTERVAL_SHOWN_PCT = 1.0  # a score's interval from this size on is named in the episode's last line


def render_score(score: Score, *, scoring: str) -> str:
    """The episode's final line: reward, tier and speedups."""
    if not score.evaluated:
        return f"Episode over. Reward {score.reward:g}: not evaluated ({score.status or 'no evaluation'})."
    speed = ""
    if score.speedup_vs_eager:
        versus = f"{score.speedup_vs_compile:.2f}x vs torch.compile" if score.speedup_vs_compile \
            else "torch.compile: not timed"
        speed = f", {score.speedup_vs_eager:.2f}x vs eager, {versus}"
    if score.interval_pct >= INTERVAL_SHOWN_PCT:  # where it can move a tier: say so beside the figures it overrules
        speed += f"; a tier step must also clear the timing's own 95% interval, +-{score.interval_pct:.1f}% here"
    return f"Episode over. Reward {score.reward:g} (tier {score.tier}, {scoring} state{speed})."


def compile_not_timed_reason(result: EvalResult) -> str:
    """Why the torch.compile baseline has no time in ``result`` (``""`` when it has one)."""
    if result.compiled.measured:
        return ""
    reason = compile_failure(result)
    if reason:
        return f"the baseline failed: {reason}"
    return "no time was recorded; see the log"


def _summary_line(result: EvalResult) -> str:
    """``result.message``, with a failed torch.compile baseline said as ``torch.compile: not timed (...)``."""
    head, sep, _ = result.message.partition("; " + COMPILE_FAILED_PREFIX)
    if (sep or result.compile_failure) and result.candidate.measured:
        return f"{head}; torch.compile: not timed ({compile_not_timed_reason(result)})"
    return result.message


def _build_summary(build: BuildResult) -> str:
    warnings = sum(d.severity is Severity.WARNING for d in build.diagnostics)
    details = f"; {warnings} warning(s), see compile()" if warnings else ""
    return f"Build OK ({build.wall_time_s:.1f} s, {len(build.kernels)} kernel(s){details})"


def _diagnostic(d: Diagnostic) -> str:
    where = d.file or "?"
    if d.line:
        where += f":{d.line}" + (f":{d.column}" if d.column else "")
    tool = f" [{d.tool}]" if d.tool else ""
    return f"{where}: {d.severity.value}: {d.message}{tool}"


def _resources_table(kernels: Iterable[KernelResources]) -> list[str]:
    ks = list(kernels)
    width = max(6, *(len(k.kernel[:60]) for k in ks))
    rows = [f"  {'kernel':<{width}}  {'regs':>4}  {'smem_B':>7}  {'cmem_B':>7}  {'stack_B':>7}  spill_st/ld_B"]
    for k in ks:
        rows.append(
            f"  {k.kernel[:60]:<{width}}  {k.registers:>4}  {k.shared_mem_bytes:>7}  {k.constant_mem_bytes:>7}  "
            f"{k.stack_frame_bytes:>7}  {k.spill_stores_bytes}/{k.spill_loads_bytes}"
        )
    return rows


def _checks_table(checks: Sequence[InputCheck]) -> list[str]:
    passed = sum(c.passed for c in checks)
    rows = [
        f"Correctness: {passed}/{len(checks)} inputs pass",
        f"  {'input':>5}  {'seed':>6}  {'result':<6}  {'max_abs_err':>11}  {'max_rel_err':>11}  "
        f"{'mismatches':>17}  first_mismatch",
    ]
    for c in checks:
        first = str(tuple(c.first_mismatch_index)) if c.first_mismatch_index else "-"
        counts = f"{c.mismatch_count}/{c.numel}"
        rows.append(
            f"  {c.index:>5}  {c.seed:>6}  {'pass' if c.passed else 'FAIL':<6}  {c.max_abs_error:>11.3e}  "
            f"{c.max_rel_error:>11.3e}  {counts:>17}  {first}"
        )
        if c.message and not c.passed:
            rows.append(f"         {c.message}")
    return rows


def _timing_table(result: EvalResult) -> list[str]:
    rows = [
        "Timing (microseconds per forward pass):",
        f"  {'impl':<13}  {'median_us':>10}  {'mean_us':>10}  {'min_us':>10}  {'runs':>5}  {'ci95':>6}  speedup",
    ]
    impls = (
        ("candidate", result.candidate, ""),
        ("eager", result.eager, f"{result.speedup_vs_eager:.2f}x"),
        ("torch.compile", result.compiled, f"{result.speedup_vs_compile:.2f}x"),
    )
    for name, stats, ratio in impls:
        if not stats.measured:
            reason = truncate(compile_not_timed_reason(result), MAX_REASON_CHARS) if name == "torch.compile" else ""
            rows.append(f"  {name:<13}  {'not timed':>10}" + (f" ({reason})" if reason else ""))
            continue
        rows.append(
            f"  {name:<13}  {stats.median_us:>10.2f}  {stats.mean_us:>10.2f}  {stats.min_us:>10.2f}  "
            f"{stats.runs:>5}  {stats.ci95_halfwidth_pct:>5.1f}%  {ratio}"
        )
    own = result.runner_reference
    if own.measured:
        rows.append(f"  {'reference*':<13}  {own.median_us:>10.2f}  {own.mean_us:>10.2f}  {own.min_us:>10.2f}  "
                    f"{own.runs:>5}  {own.ci95_halfwidth_pct:>5.1f}%")
        rows.append("  speedup = baseline time / candidate time (above 1 means the candidate is faster), the baselines "
                    "scaled by reference* / eager: *the reference timed in your forward's own process, before your "
                    "code loaded")
    else:
        rows.append("  speedup = baseline time / candidate time (above 1 means the candidate is faster)")
    return rows
