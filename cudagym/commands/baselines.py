"""``cudagym baselines precompute|show|check``: time, list and check the baselines of tasks.

The cache itself is :mod:`cudagym.judge.baselines`; this module only drives a judge over a task selection.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from cudagym.errors import ConfigError, UnknownTaskError
from cudagym.judge.baselines import BaselineCache, BaselineKey, reference_solution
from cudagym.judge.job import KnownBaselines
from cudagym.judge.protocol import Protocol
from cudagym.judge.records import EvalResult, EvalStatus, Hardware
from cudagym.paths import writable_file
from cudagym.task import Task

# ----------------------------------------------------------------------------------------------------
# The command: cudagym baselines precompute|show|check
# ----------------------------------------------------------------------------------------------------

class Progress:
    """A plain-text progress bar: redrawn in place on a terminal, one line per step otherwise."""

    def __init__(self, total: int, stream: IO[str] | None = None, width: int = 30) -> None:
        self.total = max(total, 1)
        self.done = 0
        self.stream = stream or sys.stderr
        self.width = width
        self.started = time.monotonic()
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()

    def step(self, label: str) -> None:
        """Count one finished item and redraw."""
        self.done += 1
        filled = self.width * self.done // self.total
        elapsed = time.monotonic() - self.started
        eta = elapsed / self.done * (self.total - self.done)
        line = (f"[{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total} "
                f"{elapsed:5.0f}s elapsed, ~{eta:.0f}s left  {label}")
        if self.tty:
            self.stream.write("\r\x1b[K" + line + ("\n" if self.done >= self.total else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``cudagym baselines``."""
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    pre = sub.add_parser("precompute", help="time eager and torch.compile for tasks not yet cached")
    show = sub.add_parser("show", help="list cached baselines")
    check = sub.add_parser("check", help="the reference as the candidate (guards off) on every task: proves the "
                           "harness loads, checks and times each one; writes a per-task table")
    for p in (pre, show, check):
        p.add_argument("--env", help="an environment id, e.g. CudaKernel-Bundled-v0 (its suite and level)")
        p.add_argument("--suite", help="a suite name instead of --env (kernelbench, ops6k, bundled)")
        p.add_argument("--level", type=int, help="only this level")
        p.add_argument("--tasks", nargs="+", metavar="ID", help="only these task ids")
        p.add_argument("--protocol", default="cudagym", help="protocol name or id (default: cudagym)")
        p.add_argument("--cache-dir", help="cache folder (default: $CUDAGYM_CACHE_DIR or ~/.cache/cudagym)")
    for p in (pre, check):
        p.add_argument("--devices", default="auto", help="GPUs: auto, or comma-separated CUDA device ids")
        p.add_argument("--journal", help="JSONL journal; a run resumed with the same journal skips done tasks")
    pre.add_argument("--force", action="store_true", help="time again tasks that are already cached")
    check.add_argument("--table", default="cudagym-check.md",
                       help="the markdown table to write (a .csv with the same rows lies beside it)")
    check.add_argument("--stop-after-s", type=float, default=0.0,
                       help="submit no new task after this many seconds; running ones finish (0: no limit)")
    check.add_argument("--deadline-s", type=float, default=0.0,
                       help="start no task that would end after this many seconds, taking it to last as long as "
                            "the longest so far, behind those in flight (0: no limit)")
    check.add_argument("--window", type=int, default=2, help="jobs in flight at once per GPU (default 2)")
    check.add_argument("--first", type=int, default=0, help="only the first N tasks of the selection (0: all)")
    check.add_argument("--retry-failed", action="store_true",
                       help="run once more the tasks whose journaled result is not OK")
    check.add_argument("--from-journal", action="store_true",
                       help="only rewrite the table from the results in --journal (runs nothing; no GPU needed)")


def run(args: argparse.Namespace) -> int:
    """Run ``cudagym baselines``; the exit code is 0 when every task got its baselines."""
    if args.action == "show":
        return _show(args)
    if args.action == "check":
        return _check(args)
    return _precompute(args)


def resolve_tasks(args: argparse.Namespace) -> tuple[Task, ...]:
    """The tasks an ``--env`` / ``--suite`` / ``--level`` / ``--tasks`` selection names.

    Raises:
        ConfigError: Neither ``--env`` nor ``--suite`` nor ``--tasks`` was given.
        UnknownTaskError: The env id is not registered, or a task id is unknown.
    """
    from cudagym.suites import load_tasks, suite_of

    filters: dict[str, Any] = {}
    if args.env:
        from cudagym.registration import ENV_IDS

        if args.env not in ENV_IDS:
            raise UnknownTaskError(f"unknown env id {args.env!r}; expected one of: {', '.join(ENV_IDS)}")
        filters = dict(ENV_IDS[args.env])
    suite = filters.pop("suite", None) or args.suite
    if suite is None and args.tasks:
        suite = suite_of(args.tasks[0]).name
    if suite is None:
        raise ConfigError("expected --env ID, --suite NAME or --tasks ID...; got none of them")
    if args.level is not None:
        filters["level"] = args.level
    return tuple(load_tasks(suite, ids=args.tasks, **filters))


def _precompute(args: argparse.Namespace) -> int:
    devices: str | list[str] = "auto" if args.devices == "auto" else args.devices.split(",")
    if args.journal:
        writable_file(args.journal, "--journal")
    return precompute(resolve_tasks(args), args.protocol, devices=devices, force=args.force,
                      cache_dir=args.cache_dir, journal=args.journal)


def precompute(
    tasks: Sequence[Task],
    protocol: str | Protocol = "cudagym",
    *,
    devices: str | Sequence[str] = "auto",
    force: bool = False,
    cache_dir: str | os.PathLike[str] | None = None,
    journal: str | os.PathLike[str] | None = None,
    make_judge: Callable[..., Any] | None = None,
) -> int:
    """Time the baselines of every task not yet cached, on every GPU at once, with a progress bar.

    Args:
        tasks: The tasks.
        protocol: Whose timing method and key to use.
        devices: ``"auto"`` or CUDA device ids.
        force: Time cached tasks again (and replace their entries).
        cache_dir: The cudagym cache folder (default: the user's).
        journal: A JSONL journal: a run resumed with it skips the tasks it already finished.
        make_judge: Builds the judge (``LocalJudge`` by default; tests pass a stand-in).

    Returns:
        0 when every task has its baselines, 1 otherwise (no GPU, or a task failed).
    """
    from cudagym.judge.interface import EvalMode
    from cudagym.judge.local import LocalJudge
    from cudagym.judge.protocol import get_protocol

    protocol = get_protocol(protocol)
    # Guards judge candidates, not baselines; the id stays, so the cache key is the protocol's own.
    timing_protocol = protocol.with_changes(guards=())
    with (make_judge or LocalJudge)(timing_protocol, devices=devices, cache_dir=cache_dir, journal=journal) as judge:
        if not judge.has_gpu:
            print("cudagym baselines precompute: no GPU found; baselines are timed on a GPU", file=sys.stderr)
            return 1
        hardware = judge.hardware()
        todo = [t for t in tasks if force or not _complete(judge.baselines.get(BaselineKey.of(t, hardware, protocol)),
                                                             protocol)]
        print(f"{len(tasks)} tasks, {len(tasks) - len(todo)} already cached on {hardware.gpu} "
              f"(torch {hardware.torch}, protocol {protocol.id}); timing {len(todo)}", file=sys.stderr)
        mode = EvalMode.SUBMIT if force else EvalMode.PROFILE  # SUBMIT always re-times the baselines
        futures = {judge.submit(t, reference_solution(t), mode,
                                job_id=baselines_job_id(protocol, hardware, t)): t for t in todo}
        return _collect(futures, judge, hardware, protocol, replace=force)


def _complete(cached: KnownBaselines, protocol: Protocol) -> bool:
    """Whether the cache holds all of a task's clean job times: both baselines, and the yardstick where one is taken.

    An entry written before the cache kept the yardstick is timed again (a PROFILE then times only the yardstick).
    """
    return cached.known and (cached.yardstick.measured or not protocol.runner_reference_runs)


def _check(args: argparse.Namespace) -> int:
    from cudagym.judge.task_check import CheckPlan

    devices: str | list[str] = "auto" if args.devices == "auto" else args.devices.split(",")
    _check_limits(args)
    writable_file(args.table, "--table")  # now, not when the table is written at the end of a long run
    if args.journal and not args.from_journal:
        writable_file(args.journal, "--journal")
    plan = CheckPlan(args.table, args.stop_after_s, args.window, args.retry_failed, args.deadline_s)
    tasks = resolve_tasks(args)
    if args.first > 0:
        tasks = tasks[:args.first]
    if args.from_journal:
        return _tables_from_journal(tasks, args)
    return check(tasks, args.protocol, plan, devices=devices, cache_dir=args.cache_dir, journal=args.journal)


def _check_limits(args: argparse.Namespace) -> None:
    """Refuse counts and times that mean nothing: a window below 1, negative --first or seconds."""
    if args.window < 1:
        raise ConfigError(f"expected --window >= 1 (jobs in flight per GPU), got {args.window}")
    if args.first < 0:
        raise ConfigError(f"expected --first >= 0 (0: every task), got {args.first}")
    for flag, value in (("--stop-after-s", args.stop_after_s), ("--deadline-s", args.deadline_s)):
        if not value >= 0:  # NaN too
            raise ConfigError(f"expected {flag} >= 0 (0: no limit), got {value}")


def _tables_from_journal(tasks: Sequence[Task], args: argparse.Namespace) -> int:
    from cudagym.judge.journal import Journal
    from cudagym.judge.protocol import get_protocol
    from cudagym.judge.task_check import journaled_timing_keys, passed, tables_from_journal

    if not args.journal:
        raise ConfigError("--from-journal needs --journal PATH: the journal of the run whose table to rewrite")
    if Path(args.journal).is_dir():
        raise ConfigError(f"--journal {args.journal} is a folder; expected the journal file (JSONL) of a run")
    if not Path(args.journal).is_file():
        raise ConfigError(f"--journal {args.journal}: no such file")
    protocol, journal = get_protocol(args.protocol), Journal(args.journal)
    rows = tables_from_journal(tasks, protocol, journal, args.table)
    good = sum(map(passed, rows))
    print(f"rewrote {args.table} from {args.journal}: {good} of {len(rows)} tasks loaded, checked and timed",
          file=sys.stderr)
    if not good:  # most likely another protocol's journal: say which protocols it holds
        held = sorted(journaled_timing_keys(journal) - {protocol.timing_key})
        if held:
            print(f"the journal has check results under {', '.join(held)}, none under {protocol.timing_key} "
                  f"(--protocol {args.protocol}); give that protocol's id", file=sys.stderr)
    return 0 if good == len(rows) else 1


def check(
    tasks: Sequence[Task],
    protocol: str | Protocol,
    plan: Any,
    *,
    devices: str | Sequence[str] = "auto",
    cache_dir: str | os.PathLike[str] | None = None,
    journal: str | os.PathLike[str] | None = None,
    make_judge: Callable[..., Any] | None = None,
) -> int:
    """Judge each task's reference as its candidate, guards off (PROFILE); baselines are cached on the way.

    Args:
        tasks: The tasks.
        protocol: The protocol (its guards are turned off; its id and timing key stay).
        plan: A :class:`~cudagym.judge.task_check.CheckPlan`: the table, the time budget, the window.
        devices: ``"auto"`` or CUDA device ids.
        cache_dir: The cudagym cache folder (default: the user's).
        journal: A JSONL journal: a run resumed with it answers finished tasks from it.
        make_judge: Builds the judge (``LocalJudge`` by default; tests pass a stand-in).

    Returns:
        0 when every task was loaded, checked and timed; 1 otherwise (no GPU, a failure, not reached).
    """
    from cudagym.judge.local import LocalJudge
    from cudagym.judge.protocol import get_protocol
    from cudagym.judge.task_check import check_tasks, passed

    checking = get_protocol(protocol).with_changes(guards=())
    with (make_judge or LocalJudge)(checking, devices=devices, cache_dir=cache_dir, journal=journal) as judge:
        if not judge.has_gpu:
            print("cudagym baselines check: no GPU found; the check runs on a GPU", file=sys.stderr)
            return 1
        rows = check_tasks(tasks, checking, judge, plan, reference_solution, gpus=len(judge.workers()))
    good = sum(map(passed, rows))
    print(f"done: {good} of {len(rows)} tasks loaded, checked and timed; table in {plan.table}", file=sys.stderr)
    return 0 if good == len(rows) else 1


def _collect(futures: dict[Any, Task], judge: Any, hardware: Hardware, protocol: Protocol, *, replace: bool) -> int:
    from concurrent.futures import as_completed

    progress = Progress(len(futures))
    failed = 0
    for future in as_completed(futures):
        task = futures[future]
        result: EvalResult = future.result()
        if result.eager.measured and result.compiled.measured:
            if replace:  # the judge keeps cached times; a forced run means the new ones
                judge.baselines.put(BaselineKey.of(task, result.hardware, protocol), result.eager,
                                    result.compiled, task_id=task.id, replace=True, yardstick=result.yardstick)
            label = f"{task.id}: eager {result.eager.median_us:.1f} us, compile {result.compiled.median_us:.1f} us"
        elif judge.baselines.get(BaselineKey.of(task, hardware, protocol)).known:
            label = f"{task.id}: cached"
        else:
            failed += 1
            why = result.message.splitlines()[0] if result.message else result.status.value
            label = f"{task.id}: FAILED ({result.status.value}: {why})"
            if result.status is EvalStatus.OK:
                label = f"{task.id}: FAILED (a baseline was not timed)"
        progress.step(label)
    print(f"done: {len(futures) - failed} timed, {failed} failed", file=sys.stderr)
    return 0 if failed == 0 else 1


def _show(args: argparse.Namespace) -> int:
    from cudagym.judge.protocol import get_protocol

    cache = BaselineCache(Path(args.cache_dir) / "baselines" if args.cache_dir else None)
    protocol = get_protocol(args.protocol)
    wanted = None
    if args.env or args.suite or args.tasks:
        wanted = {t.content_hash: t.id for t in resolve_tasks(args)}
    rows = [(k, tid, v) for k, tid, v in cache.entries()
            if k.protocol_key == protocol.timing_key and (wanted is None or k.task_hash in wanted)]
    for key, task_id, value in rows:
        name = (wanted or {}).get(key.task_hash) or task_id or key.task_hash[:12]
        own = value.yardstick
        late = f" ({own.late_calls}/{own.calls} late)" if own.late_calls else ""
        runner = f"{own.time.median_us:10.1f} us{late}" if own.measured else f"{'-':>10s}"
        print(f"{name:40s} {key.gpu:28s} torch {key.torch:16s} eager {value.eager.median_us:10.1f} us  "
              f"compile {value.compiled.median_us:10.1f} us  in a runner {runner}")
    print(f"{len(rows)} cached baselines under {cache.root} (protocol {protocol.id}, "
          f"timing key {protocol.timing_key})", file=sys.stderr)
    return 0


def baselines_job_id(protocol: Protocol, hardware: Hardware, task: Task) -> str:
    """The journal id of one task's baselines job: what its times depend on (timing settings, GPU, the task)."""
    return f"baselines:{protocol.timing_key}:{hardware.gpu}:{task.content_hash[:16]}"

