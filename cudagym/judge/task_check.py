"""``cudagym baselines check``: the reference as the candidate, guards off, on every task; a per-task table.

One PROFILE job per task proves the harness can load the task, run it, check it against itself and time it
(its baselines are timed and cached on the way, as ``baselines precompute`` would, or read from the cache).
The table has one row per task: status, eager, torch.compile and reference-as-candidate times, the
eager/compile ratio, torch.compile's compile time, peak device memory and the time per phase.

Resumable: jobs have stable ids, so a run given the same ``--journal`` answers the tasks it already finished
from the journal and runs the rest; the table (markdown and CSV) is rewritten after every finished task,
so a run that is killed leaves a table of everything done so far. ``--stop-after-s`` stops submitting new
tasks after that many seconds and waits for the ones in flight, so a time-boxed session (a 10-minute device
call) ends cleanly with its results written; ``--deadline-s`` starts no task that the longest job so far says
would end after it, so jobs longer than that margin are not cut half done either.
"""

from __future__ import annotations

import csv
import io
import os
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from cudagym.judge.protocol import Protocol
from cudagym.judge.records import EvalCost, EvalResult, EvalStatus
from cudagym.task import Task

GIB = float(1 << 30)
MAX_MESSAGE_CHARS = 160
NOT_RUN = "not_run"  # the status of a task the run never reached (time budget)


@dataclass(frozen=True)
class TaskRow:
    """One task's line of the table; times in microseconds, memory in GiB, phases in seconds."""

    task_id: str
    level: int
    status: str
    eager_us: float = 0.0
    compile_us: float = 0.0
    candidate_us: float = 0.0
    runner_reference_us: float = 0.0  # the reference timed in the candidate's runner (0: the protocol takes none)
    runner_reference_runs: int = 0  # its timed calls there
    runner_reference_ci_pct: float = 0.0  # its median's 95% interval there, half-width in % of the median
    # the verdict's own ratios (the protocol's statistic, which the times above are not when it is the mean): for
    # the reference as its candidate, above 1 + the protocol's threshold is a speedup tier the same code did not earn
    speedup_vs_eager: float = 0.0
    speedup_vs_compile: float = 0.0
    # the profiled forward's kernel time over the candidate's timed median (0: not profiled on a GPU); what the
    # ``decoy_kernels`` guard bounds (:data:`~cudagym.judge.guards.kernels.PROFILE_OVER_TIMED_MAX`)
    profiled_over_timed: float = 0.0
    eager_over_compile: float = 0.0  # eager / torch.compile: above 1, torch.compile is faster
    compile_s: float = 0.0  # torch.compile's first call (0: baselines came from the cache)
    peak_memory_gib: float = 0.0
    reference_peak_gib: float = 0.0  # after the models were built and the reference ran once: the task's own need
    compiled_peak_gib: float = 0.0  # torch.compile's warm-up on one set (0: baselines came from the cache)
    input_output_gib: float = 0.0  # one input set and its outputs
    bound_gib: float = 0.0  # the bound that applies (:func:`memory_bound_bytes`); 0 when no reference peak was measured
    over_bound_gib: float = 0.0  # peak - bound; <= 0 within the bound
    # the peak of live allocations (the allocator's unused cached blocks left out; 0 unmeasured), and its excess
    allocated_peak_gib: float = 0.0
    allocated_over_bound_gib: float = 0.0
    device_memory_gib: float = 0.0
    host_in_baselines: str = ""  # baselines whose host enqueue outlasted the longest cover (host time timed)
    # the split's calls not queued before the judge's go, timed by its GPU clock: "reference L/N, timed L/N"
    late_calls: str = ""
    load_s: float = 0.0
    check_s: float = 0.0
    timing_s: float = 0.0
    profile_s: float = 0.0
    wall_s: float = 0.0
    message: str = ""


def memory_bound_bytes(cost: EvalCost) -> int:
    """The README's device-memory bound for the process ``cost`` measured.

    With R the task's own need (the reference's peak, eager or compiled by torch.compile, whichever is larger),
    S one input set, O one output set and ε the small buffers (``small_buffers_bytes``: the L2 flush buffer and
    the chunked comparisons' temporaries; 0 in results that did not record them): R + S + O + ε in one process;
    in the split's trusted process, whose peak includes its arenas (the candidate's copy of the inputs and its
    outputs), R + S + 2 O + ε; with a heap shared with the runner (``heap_bytes``: its reserve is the output
    arena, its room the runner's), R + S + O + the heap + ε.
    """
    outputs = cost.output_set_bytes * (2 if cost.arena_bytes > 0 and not cost.heap_bytes else 1)
    return max(cost.reference_peak_bytes, cost.compiled_peak_bytes) + cost.input_set_bytes + outputs + \
        cost.heap_bytes + cost.small_buffers_bytes


def row_of(task: Task, result: EvalResult) -> TaskRow:
    """The table row of ``task``'s reference-as-candidate result."""
    eager, compiled, cost = result.eager.median_us, result.compiled.median_us, result.cost
    io_bytes = cost.input_set_bytes + cost.output_set_bytes
    measured = cost.reference_peak_bytes > 0 and cost.peak_device_memory_bytes > 0
    allocated = cost.peak_allocated_bytes > 0
    bound = memory_bound_bytes(cost) * measured
    message = " ".join(result.message.split())
    return TaskRow(
        task_id=task.id, level=task.level, status=result.status.value, eager_us=eager, compile_us=compiled,
        candidate_us=result.candidate.median_us, runner_reference_us=result.runner_reference.median_us,
        runner_reference_runs=result.runner_reference.runs,
        runner_reference_ci_pct=result.runner_reference.ci95_halfwidth_pct,
        speedup_vs_eager=result.speedup_vs_eager,
        speedup_vs_compile=result.speedup_vs_compile, profiled_over_timed=_profiled_over_timed(result),
        eager_over_compile=eager / compiled if compiled > 0 else 0.0,
        compile_s=cost.compile_s, peak_memory_gib=cost.peak_device_memory_bytes / GIB,
        reference_peak_gib=cost.reference_peak_bytes / GIB, compiled_peak_gib=cost.compiled_peak_bytes / GIB,
        input_output_gib=io_bytes / GIB, bound_gib=bound / GIB,
        over_bound_gib=(cost.peak_device_memory_bytes - bound) / GIB * measured,
        allocated_peak_gib=cost.peak_allocated_bytes / GIB,
        allocated_over_bound_gib=(cost.peak_allocated_bytes - bound) / GIB * (measured and allocated),
        device_memory_gib=cost.device_memory_total_bytes / GIB, host_in_baselines=" ".join(_outlasted(result.log)),
        late_calls=_late(cost),
        load_s=cost.load_s, check_s=cost.check_s,
        timing_s=cost.timing_s, profile_s=cost.profile_s, wall_s=result.wall_time_s,
        message=message[:MAX_MESSAGE_CHARS],
    )


def _late(cost: EvalCost) -> str:
    """``reference L/N, timed L/N`` for the kinds of calls with late ones (``""`` where none was late)."""
    kinds = (("reference", cost.late_reference_calls, cost.reference_calls), ("timed", cost.late_calls,
                                                                              cost.timed_calls))
    return ", ".join(f"{kind} {late}/{total}" for kind, late, total in kinds if late)


def _profiled_over_timed(result: EvalResult) -> float:
    """The profiled forward's busy GPU time over the candidate's timed median (0 without either).

    A result without a busy time (from an older harness) gives its kernels' summed times instead.
    """
    kernel_us = result.kernel_busy_us or sum(k.time_us for k in result.kernels)
    median = result.candidate.median_us
    return kernel_us / median if kernel_us > 0 and median > 0 else 0.0


def _outlasted(log: str) -> list[str]:
    """The baselines the harness noted as timed with host time in (their cover outlasted)."""
    from cudagym.judge.harness.runner import OUTLASTED_NOTE

    prefix = f"{OUTLASTED_NOTE}: "
    return [line[len(prefix):].split("'s host", 1)[0] for line in log.splitlines() if line.startswith(prefix)]


def passed(row: TaskRow) -> bool:
    """The harness loaded, checked and timed the task: OK, and eager and torch.compile both have times."""
    return row.status == EvalStatus.OK.value and row.eager_us > 0 and row.compile_us > 0


def to_csv(rows: Sequence[TaskRow]) -> str:
    """The rows as CSV with a header line (full precision)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=[f.name for f in fields(TaskRow)], lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow(asdict(row))
    return out.getvalue()


@dataclass(frozen=True)
class RunFacts:
    """What one check run did, for the table's summary (rows answered from the journal ran in an earlier run)."""

    wall_s: float = 0.0
    evaluated: int = 0  # jobs this run sent to a GPU
    from_journal: int = 0
    gpus: int = 1


def to_markdown(rows: Sequence[TaskRow], title: str, facts: RunFacts | None = None, threshold: float = 0.05) -> str:
    """A summary (counts by status, throughput, median time per phase, unearned tiers) and the per-task table.

    ``threshold`` is the protocol's: a verdict ratio above 1 + it is a speedup tier.
    """
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.status] = counts.get(row.status, 0) + 1
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    lines = [f"# {title}", "", f"{len(rows)} tasks: {summary or 'none'}; {sum(map(passed, rows))} loaded, checked "
             "and timed.", ""]
    lines += _phase_summary([r for r in rows if passed(r)], facts, threshold)
    lines += ["| task | status | eager us | compile us | ref-as-candidate us | runner's reference us (calls, "
              "95% interval) | verdict vs eager | profiled/timed | eager/compile | compile s | peak GiB "
              "| ref peak GiB | compiled peak GiB | in+out GiB | bound GiB | over bound GiB (allocated) | load s "
              "| check s | timing s | profile s | message |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        note = "" if passed(r) else r.message.replace("|", "/")
        own = (f"{r.runner_reference_us:.1f} ({r.runner_reference_runs}, +-{r.runner_reference_ci_pct:.1f}%)"
               if r.runner_reference_us > 0 else "-")
        lines.append(f"| {r.task_id} | {r.status} | {r.eager_us:.1f} | {r.compile_us:.1f} | {r.candidate_us:.1f} | "
                     f"{own} | {r.speedup_vs_eager:.3f} | {_ratio(r.profiled_over_timed)} | "
                     f"{r.eager_over_compile:.3f} | {r.compile_s:.1f} | "
                     f"{r.peak_memory_gib:.2f} | "
                     f"{r.reference_peak_gib:.2f} | {r.compiled_peak_gib:.2f} | {r.input_output_gib:.2f} | "
                     f"{r.bound_gib:.2f} | {r.over_bound_gib:.2f}{_allocated(r)} | "
                     f"{r.load_s:.2f} | {r.check_s:.2f} | {r.timing_s:.2f} | {r.profile_s:.2f} | {note} |")
    return "\n".join(lines) + "\n"


def _allocated_measured(row: TaskRow) -> bool:
    """Whether the row has an allocated peak and a bound to set it against."""
    return row.allocated_peak_gib > 0 and row.bound_gib > 0


def _allocated(row: TaskRow) -> str:
    """`` (x.xx)``: the allocated peak's excess, where it was measured."""
    return f" ({row.allocated_over_bound_gib:.2f})" if _allocated_measured(row) else ""


def _ratio(x: float) -> str:
    return f"{x:.3f}" if x > 0 else "-"


def _allocated_excess(rows: Sequence[TaskRow]) -> str:
    """``; counting live allocations only, x.xx GiB (N over)`` where the rows measured allocated peaks."""
    measured = [r for r in rows if _allocated_measured(r)]
    if not measured:
        return ""
    worst = max(measured, key=lambda r: r.allocated_over_bound_gib)
    over = sum(r.allocated_over_bound_gib > 0 for r in measured)
    return (f" (reserved by the allocator); counting live allocations only, {worst.allocated_over_bound_gib:.2f} "
            f"GiB ({worst.task_id}), {over} of {len(measured)} task(s) over")


def _phase_summary(rows: Sequence[TaskRow], facts: RunFacts | None, threshold: float) -> list[str]:
    """The passed rows' median seconds per phase, the clocks' agreement and unearned tiers; this run's rate.

    The rate is evaluations per GPU-hour of wall time.
    """
    lines = []
    if rows:
        import statistics

        phases = {name: statistics.median(getattr(r, f"{name}_s") for r in rows)
                  for name in ("load", "check", "timing", "profile", "wall")}
        lines.append("Median per task: " + ", ".join(f"{name} {sec:.2f} s" for name, sec in phases.items())
                     + f"; largest peak {max(r.peak_memory_gib for r in rows):.2f} GiB, largest excess over the "
                     f"bound {max(r.over_bound_gib for r in rows):.2f} GiB{_allocated_excess(rows)}.")
        # the same code timed as the candidate and as eager: a ratio away from 1 is a bias of the clocks
        ratios = sorted(r.candidate_us / r.eager_us for r in rows if r.candidate_us > 0 and r.eager_us > 0)
        if ratios:
            hosted = sum(1 for r in rows if r.host_in_baselines)
            lines.append(f"Reference as candidate / eager (the same code, two clocks): median "
                         f"{statistics.median(ratios):.3f}, range {ratios[0]:.3f}-{ratios[-1]:.3f}; {hosted} task(s) "
                         "with a baseline whose host outlasted its cover.")
        factors = sorted(r.runner_reference_us / r.eager_us for r in rows
                         if r.runner_reference_us > 0 and r.eager_us > 0)
        if factors:
            calls = sorted(r.runner_reference_runs for r in rows if r.runner_reference_us > 0)
            lines.append(f"The reference in the candidate's runner / eager here (the yardstick's scale): median "
                         f"{statistics.median(factors):.3f}, range {factors[0]:.3f}-{factors[-1]:.3f}; its timed "
                         f"calls there: median {statistics.median(calls):.0f}, range {calls[0]}-{calls[-1]}.")
        late = [r for r in rows if r.late_calls]
        if late:
            named = ", ".join(f"{r.task_id} ({r.late_calls})" for r in late[:6]) + (
                f" and {len(late) - 6} more" if len(late) > 6 else "")
            lines.append(f"Calls not queued before the judge's go (each timed by its GPU clock, the GPU's wait for "
                         f"the runner's host in it): {len(late)} task(s): {named}.")
        verdicts = sorted((r.speedup_vs_eager, r.task_id) for r in rows if r.speedup_vs_eager > 0)
        if verdicts:
            free = [task for ratio, task in reversed(verdicts) if ratio > 1.0 + threshold]
            named = ", ".join(free[:8]) + (f" and {len(free) - 8} more" if len(free) > 8 else "")
            lines.append(f"The verdict's own ratio vs eager (the protocol's statistic): median "
                         f"{statistics.median(v for v, _ in verdicts):.3f}, range {verdicts[0][0]:.3f}-"
                         f"{verdicts[-1][0]:.3f}; {len(free)} task(s) where the same code was judged more than "
                         f"{threshold:.0%} faster than eager, a tier it did not earn{': ' + named if free else ''}.")
        fits = sorted((r.profiled_over_timed, r.task_id) for r in rows if r.profiled_over_timed > 0)
        if fits:
            from cudagym.judge.guards.kernels import PROFILE_OVER_TIMED_MAX, PROFILE_OVER_TIMED_SLACK_US

            lines.append(f"The profiled forward's busy GPU time / its timed median: median "
                         f"{statistics.median(f for f, _ in fits):.3f}, range {fits[0][0]:.3f}-{fits[-1][0]:.3f} "
                         f"({fits[-1][1]}); {sum(f > 1.0 for f, _ in fits)} task(s) above 1 (`decoy_kernels` allows "
                         f"{PROFILE_OVER_TIMED_MAX:g}x + {PROFILE_OVER_TIMED_SLACK_US:g} us, in a profile and its "
                         f"retake).")
    if facts is not None and facts.evaluated and facts.wall_s > 0:
        rate = 3600.0 * facts.evaluated / (facts.wall_s * max(1, facts.gpus))
        lines.append(f"This run: {facts.evaluated} evaluations in {facts.wall_s:.0f} s of wall time on {facts.gpus} "
                     f"GPU(s), {rate:.0f} per GPU-hour; {facts.from_journal} answered from the journal.")
    return [*lines, ""] if lines else []


def write_tables(rows: Sequence[TaskRow], path: str | os.PathLike[str], title: str,
                 facts: RunFacts | None = None, threshold: float = 0.05) -> None:
    """Write ``path`` (markdown) and the same rows beside it as ``.csv``, each atomically."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    ordered = sorted(rows, key=lambda r: (r.level, _natural(r.task_id)))
    markdown = to_markdown(ordered, title, facts, threshold)
    for where, text in ((target, markdown), (target.with_suffix(".csv"), to_csv(ordered))):
        tmp = where.with_name(f".{where.name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, where)


def check_job_id(protocol: Protocol, task: Task) -> str:
    """The stable id of ``task``'s check job under ``protocol`` (its timing key: guards do not change it)."""
    return f"check:{protocol.timing_key}:{task.content_hash[:16]}"


def journaled_timing_keys(journal: Any) -> set[str]:
    """The protocol timing keys that ``journal`` holds check results under (the inverse of :func:`check_job_id`)."""
    return {i.split(":")[1] for i in journal.done_ids() if i.startswith("check:") and i.count(":") >= 2}


def _title(protocol: Protocol) -> str:
    return f"Reference-as-candidate check, protocol {protocol.id} (guards off)"


def tables_from_journal(tasks: Sequence[Task], protocol: Protocol, journal: Any,
                        table: str | os.PathLike[str]) -> list[TaskRow]:
    """Rewrite the check's table from the results ``journal`` holds, running nothing (no GPU needed).

    A task's retry supersedes its failure, as in a run; a task the journal has no result for is :data:`NOT_RUN`.
    """
    rows = []
    for task in tasks:
        result = journal.result(_job_id(check_job_id(protocol, task), journal, False))
        rows.append(row_of(task, result) if result is not None else
                    TaskRow(task.id, task.level, NOT_RUN, message="no result in the journal"))
    write_tables(rows, table, _title(protocol), None, protocol.threshold)
    return rows


def _job_id(base: str, journal: Any, retry_failed: bool) -> str:
    """``base``, or its retry id once ``base`` failed and a retry was asked for or is already journaled.

    A retry's answer supersedes the failure it retried, so a later run without ``--retry-failed`` reports it too.
    """
    if journal is None:
        return base
    known = journal.result(base)
    if known is None or known.status is EvalStatus.OK:
        return base
    retry = f"{base}:retry"
    return retry if retry_failed or journal.result(retry) is not None else base


def _natural(task_id: str) -> tuple[Any, ...]:
    """``L1/9_x`` before ``L1/10_y``: digit runs compare as numbers."""
    import re

    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", task_id))


@dataclass(frozen=True)
class CheckPlan:
    """How a check run goes.

    Attributes:
        table: The markdown table's path (the CSV lies beside it).
        stop_after_s: Submit no new task after this many seconds (0: no limit); running ones finish.
        window: Jobs handed to the judge at once per GPU: enough that a GPU never waits for the next build,
            few enough that the jobs still running when the budget ends finish soon.
        retry_failed: Run once more the tasks whose journaled result is not OK (under a second job id, so
            the retry is journaled and resumable too).
        deadline_s: Every job should end this many seconds after the start (0: no limit): a task is submitted
            only while the longest job of this run so far would still end by then, queued behind the jobs in
            flight on its GPU. A run cut at a hard limit (a device call's) then loses no job half done.
    """

    table: str
    stop_after_s: float = 0.0
    window: int = 2
    retry_failed: bool = False
    deadline_s: float = 0.0


def ends_in_time(deadline_s: float, elapsed_s: float, longest_s: float, ahead: int) -> bool:
    """Whether a job submitted now would end by ``deadline_s`` (seconds since the start; 0: no limit).

    It is taken to last as long as the longest job so far (``longest_s``), after the ``ahead`` jobs queued before
    it on its GPU, each as long (those already running are counted whole: a cut job is lost, a late start is not).
    """
    return deadline_s <= 0 or elapsed_s + longest_s * (ahead + 1) <= deadline_s


def check_tasks(
    tasks: Sequence[Task], protocol: Protocol, judge: Any, plan: CheckPlan,
    solution_of: Callable[[Task], Any], *, gpus: int = 1, log: Any = None,
) -> list[TaskRow]:
    """Run the reference of every task as its candidate (PROFILE) through ``judge``; write the table as it goes.

    Args:
        tasks: The tasks, run in this order.
        protocol: The protocol the judge runs (its guards should be off).
        judge: A judge with ``submit(task, solution, mode, job_id=...)`` (a ``LocalJudge``).
        plan: The table's path, the time budget and the window.
        solution_of: The reference-as-candidate solution of a task.
        gpus: The judge's GPUs (the window is per GPU; the throughput line divides by them).
        log: Where progress lines go (stderr by default).

    Returns:
        One row per task, in task order; tasks never reached have status :data:`NOT_RUN`.
    """
    from cudagym.judge.interface import EvalMode

    stream = log or sys.stderr
    started = time.monotonic()
    gpus = max(1, gpus)
    window = max(1, plan.window) * gpus
    journal = getattr(judge, "journal", None)
    rows: dict[str, TaskRow] = {}
    flying: dict[Future[EvalResult], Task] = {}
    queue = list(tasks)
    title = _title(protocol)
    evaluated = answered = 0
    longest = 0.0  # the longest job this run evaluated (journaled answers take no time)
    replayed: set[Future[EvalResult]] = set()
    unreached = "not reached within --stop-after-s"
    while queue or flying:
        budget_over = plan.stop_after_s > 0 and time.monotonic() - started > plan.stop_after_s
        while queue and len(flying) < window:
            task = queue[0]
            job_id = _job_id(check_job_id(protocol, task), journal, plan.retry_failed)
            known = journal is not None and journal.result(job_id) is not None
            if not known and budget_over:  # a journaled answer takes no time: it is always given
                break
            if not known and not ends_in_time(plan.deadline_s, time.monotonic() - started, longest,
                                              len(flying) // gpus):
                unreached = (f"not started: a job as long as this run's longest ({longest:.0f} s) would end after "
                             "--deadline-s")
                break
            queue.pop(0)
            answered, evaluated = answered + known, evaluated + (not known)
            future = judge.submit(task, solution_of(task), EvalMode.PROFILE, job_id=job_id)
            flying[future] = task
            if known:
                replayed.add(future)
        if not flying:
            break
        done, _ = wait(flying, return_when=FIRST_COMPLETED)
        for future in done:
            task = flying.pop(future)
            result = future.result()
            if future not in replayed:
                longest = max(longest, result.wall_time_s)
            row = row_of(task, result)
            rows[task.id] = row
            print(f"[{len(rows)}/{len(tasks)} {time.monotonic() - started:5.0f}s] {task.id}: {row.status} "
                  f"eager {row.eager_us:.1f} us, compile {row.compile_us:.1f} us, peak {row.peak_memory_gib:.2f} GiB",
                  file=stream, flush=True)
        facts = RunFacts(time.monotonic() - started, evaluated, answered, gpus)
        write_tables(list(rows.values()), plan.table, title, facts, protocol.threshold)
    for task in queue:  # not submitted: what the journal already holds of them still counts
        held = journal.result(_job_id(check_job_id(protocol, task), journal, plan.retry_failed)) if journal else None
        rows[task.id] = row_of(task, held) if held is not None else TaskRow(task.id, task.level, NOT_RUN,
                                                                            message=unreached)
    facts = RunFacts(time.monotonic() - started, evaluated, answered, gpus)
    write_tables(list(rows.values()), plan.table, title, facts, protocol.threshold)
    return [rows[t.id] for t in tasks]
