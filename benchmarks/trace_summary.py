"""A short table of a split trace (``CUDAGYM_TRACE``): per job, its phases, its runner requests and timed rounds.

    python benchmarks/trace_summary.py gpu-logs/wb_36.trace [more.trace ...]
    python benchmarks/trace_summary.py --claims gpu-logs/bench_cmp.trace

``--claims``: instead, per task, protocol and mode, each job's median claim per call of the runner's reference (the
yardstick) and of the candidate's timed calls, and how far those medians and their ratio moved from job to job
(max / min - 1) with the two's correlation: which of them moves a speedup's spread (session 48, Softmax's).

Per worker pid: the jobs and verdicts, each phase's seconds (an unfinished phase says so), the requests by kind
(count, late count, median and max of the bracket, of the judge's own staging in it before the go (and the
median of each of its parts: the inputs placed, the outputs poisoned, the L2 flush), and of the
host parts; for ``queued`` lines the first part is the time this process took to queue its part of the bracket),
and the last ``rounds`` line (how far the timing loop got and why it stopped). Lines that are not JSON are
counted, not fatal: a trace cut mid-line is normal.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.0f}" if values else "-"


def _max(values: list[float]) -> str:
    return f"{max(values):.0f}" if values else "-"


def read_events(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The trace's events in order, and how many lines were not a JSON object (a trace cut mid-line is normal)."""
    events, broken = [], 0
    for raw in path.read_text(errors="replace").splitlines():
        try:
            event = json.loads(raw)
        except json.JSONDecodeError:
            broken += 1
            continue
        if isinstance(event, dict):
            events.append(event)
        else:
            broken += 1
    return events, broken


def summarize(path: Path) -> list[str]:
    """The table's lines for one trace file."""
    lines = [f"## {path}"]
    if not path.exists():
        return [*lines, "(no trace written)"]
    by_pid: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    events, broken = read_events(path)
    for event in events:
        by_pid[event.get("pid")].append(event)
    if broken:
        lines.append(f"({broken} lines not JSON)")
    for pid, events in by_pid.items():
        t0 = events[0].get("t", 0.0)
        lines.append(f"- worker pid {pid}: {len(events)} events over {events[-1].get('t', t0) - t0:.1f} s")
        open_phases: dict[str, float] = {}
        kinds: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        last_rounds: dict[str, Any] | None = None
        rounds_lines = 0
        for e in events:
            ev, t = e.get("event"), e.get("t", 0.0) - t0
            if ev in ("job", "verdict"):
                extra = {k: v for k, v in e.items() if k not in ("event", "t", "pid")}
                lines.append(f"  {t:8.2f}s {ev} {json.dumps(extra)[:200]}")
            elif ev == "phase":
                if e.get("begins"):
                    open_phases[e["name"]] = t
                else:
                    open_phases.pop(e.get("name"), None)
                    lines.append(f"  {t:8.2f}s phase {e.get('name')} {e.get('seconds', 0.0):.2f} s")
            elif ev in ("request", "bracketed", "queued"):
                k = kinds[f"{ev}:{e.get('kind')}"]
                k["n"].append(1.0)
                if e.get("late"):
                    k["late"].append(1.0)
                if e.get("bracket_us") is not None:
                    k["bracket"].append(float(e["bracket_us"]))
                if e.get("staged_us") is not None:  # the judge's own part of the bracket, before the go
                    k["staged"].append(float(e["staged_us"]))
                for i, part in enumerate(e.get("staged_parts_us") or []):  # inputs, poison, flush
                    k[f"stage{i}"].append(float(part))
                if e.get("queue_us") is not None:  # this process's part queued, before the request went out
                    k["part0"].append(float(e["queue_us"]))
                for i, part in enumerate(e.get("parts_us") or []):
                    k[f"part{i}"].append(float(part))
                if e.get("claim_us") is not None:
                    k["claim"].append(float(e["claim_us"]))
            elif ev == "rounds":
                rounds_lines += 1
                last_rounds = e
        for name, began in open_phases.items():
            lines.append(f"  {began:8.2f}s phase {name} begun, never ended")
        for kind, k in sorted(kinds.items()):
            lines.append(f"  {kind:28s} n={len(k['n']):6d} late={len(k['late']):5d}"
                         f" bracket_us med={_median(k['bracket'])} max={_max(k['bracket'])}"
                         f" staged med={_median(k['staged'])} max={_max(k['staged'])}"
                         + (f" (inputs/poison/flush med={_median(k['stage0'])}/{_median(k['stage1'])}/"
                            f"{_median(k['stage2'])})" if k["stage0"] else "") +
                         f" claim med={_median(k['claim'])}"
                         f" host parts med=({_median(k['part0'])}, {_median(k['part1'])}, {_median(k['part2'])})"
                         f" max=({_max(k['part0'])}, {_max(k['part1'])}, {_max(k['part2'])})")
        if last_rounds is not None:
            lines.append(f"  rounds lines={rounds_lines}, last: done={last_rounds.get('done')}"
                         f" warm_ups={last_rounds.get('warm_ups')} stop={last_rounds.get('stop')!r}"
                         f" medians_us={json.dumps(last_rounds.get('medians_us'))[:200]}")
    return lines


def _spread(values: list[float]) -> str:
    return f"{max(values) / min(values) - 1:.2%}" if values and min(values) > 0 else "-"


def _range(values: list[float]) -> str:
    return f"{min(values):.1f}-{max(values):.1f} us ({_spread(values)})" if values else "-"


def claims(path: Path) -> list[str]:
    """Per task, protocol and mode: the jobs' median claims per call of the reference and the candidate."""
    lines = [f"## {path}: claims per call, median per job"]
    if not path.exists():
        return [*lines, "(no trace written)"]
    jobs: dict[Any, dict[str, Any]] = {}  # by worker pid: the job it is judging now
    done: list[dict[str, Any]] = []
    for event in read_events(path)[0]:
        pid = event.get("pid")
        if event.get("event") == "job":
            jobs[pid] = {"key": (event.get("task"), event.get("protocol"), event.get("mode")),
                         "reference": [], "timed": []}
            done.append(jobs[pid])
        elif event.get("event") == "bracketed" and pid in jobs and event.get("kind") in ("reference", "timed"):
            claim, calls = event.get("claim_us"), event.get("calls") or 1
            if isinstance(claim, (int, float)) and isinstance(calls, int) and calls > 0:
                jobs[pid][event["kind"]].append(float(claim) / calls)
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for job in done:
        groups[job["key"]].append(job)
    for (task, protocol, mode), group in groups.items():
        both = [(statistics.median(j["reference"]), statistics.median(j["timed"]))
                for j in group if j["reference"] and j["timed"]]
        reference = [statistics.median(j["reference"]) for j in group if j["reference"]]
        timed = [statistics.median(j["timed"]) for j in group if j["timed"]]
        ratio = [r / t for r, t in both if t > 0]
        corr = "-"
        if len(both) >= 3:
            try:
                corr = f"{statistics.correlation([r for r, _ in both], [t for _, t in both]):.2f}"
            except statistics.StatisticsError:  # one of them constant
                corr = "-"
        lines.append(f"- {task} [{protocol}, {mode}]: {len(group)} jobs; the runner's reference {_range(reference)}; "
                     f"the candidate {_range(timed)}; their ratio {_spread(ratio)} over {len(ratio)} jobs; "
                     f"correlation {corr}")
    return lines


def main(argv: list[str]) -> int:
    """Print the table of each trace named (``--claims`` first: the claims' table instead)."""
    table = summarize
    if argv[:1] == ["--claims"]:
        table, argv = claims, argv[1:]
    if not argv:
        print(__doc__)
        return 2
    for name in argv:
        print("\n".join(table(Path(name))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
