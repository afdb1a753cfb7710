"""How far honest timed calls' GPU brackets stray from the empty calls' cost, task by task, from a journal.

The bracket rule (``cudagym.judge.harness.claims.judge_bracketed_claims``) compares each timed call's bracket
less its claim (the gap) with the same for empty calls timed before the candidate loaded. Its allowances were
set from the bundled suite; this report shows what a sweep of real tasks (``benchmarks/kernelbench_sweep.sh``,
reference as candidate: every claim honest) did: per task the 20th-percentile gap, the empty call's, their
difference (absolute and as a fraction of the empty call's), the allowance, and, where the bracket timed the
judge's own staging apart, the staging in timed and empty calls. Sorted by the relative difference; the
summary counts the tasks within 1.6% and names those beyond their allowance.

    python benchmarks/bracket_gaps.py JOURNAL.jsonl [--protocol kernelbench-v0.4] [--out report.md]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

CLAIMS = re.compile(
    r"timing claims: median (?P<claim>[\d.]+) us; the judge's GPU clock around each call: median [\d.]+ us, "
    r"beyond the claim (?P<gap>-?[\d.]+) us \(20th percentile(?: of the \d+ call\(s\) on time whose outputs were "
    r"checked)?; median -?[\d.]+ us\) against (?P<base>-?[\d.]+) us "
    r"for an empty call \(allowed shortfall (?P<allowed>[\d.]+) us\)"
    r"(?:; the judge's own staging \(inputs, L2 flush\): median (?P<staged>[\d.]+) us, (?P<cal_staged>[\d.]+) us "
    r"in the empty calls)?")
WITHIN = 0.016  # the band most tasks fell in on the H200 (session 12, kernelbench-v0.4: all but 2 of 191)


@dataclass(frozen=True)
class Gap:
    """One task's bracket figures, in microseconds."""

    task_id: str
    status: str
    claim: float
    gap: float
    base: float
    allowed: float
    staged: float | None = None
    calibration_staged: float | None = None

    @property
    def diff(self) -> float:
        """The timed calls' gap less the empty calls' (positive: the timed calls took longer beside the claim)."""
        return self.gap - self.base

    @property
    def relative(self) -> float:
        return self.diff / self.base if self.base > 0 else 0.0


def read_gaps(lines: Iterable[str], protocol: str = "") -> list[Gap]:
    """The bracket figures of each result in a journal (the last result per task), of one protocol if named."""
    found: dict[str, Gap] = {}
    for line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if record.get("kind") != "result" or (protocol and record.get("result", {}).get("protocol_id") != protocol):
            continue
        result = record["result"]
        for note in result.get("notes", ()):
            m = CLAIMS.search(str(note))
            if m:
                staged = m.group("staged")
                found[record["task_id"]] = Gap(
                    record["task_id"], result.get("status", ""), float(m.group("claim")), float(m.group("gap")),
                    float(m.group("base")), float(m.group("allowed")),
                    float(staged) if staged else None,
                    float(m.group("cal_staged")) if staged else None)
                break
    return sorted(found.values(), key=lambda g: g.relative)


def render(gaps: Sequence[Gap], source: str) -> str:
    """The markdown report."""
    if not gaps:
        return f"# Bracket gaps\n\nNo bracketed timing notes in {source}.\n"
    within = sum(abs(g.relative) <= WITHIN for g in gaps)
    beyond = [g for g in gaps if g.diff > g.allowed or -g.diff > 2 * g.allowed]
    lines = ["# Bracket gaps: timed calls against empty calls", "", f"From {source}: {len(gaps)} tasks; {within} "
             f"within {WITHIN:.1%} of the empty call's gap; {len(beyond)} beyond the whole bracket's allowance "
             "(an excess over it, or a shortfall over twice it)" + (": " + ", ".join(g.task_id for g in beyond)
                                                                     if beyond else "") + ".", "",
             "| task | status | claim us | gap us | empty us | diff us | diff % | allowed us | staging us | "
             "empty staging us |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for g in gaps:
        staged = (f"{g.staged:.1f} | {g.calibration_staged:.1f}" if g.staged is not None
                  and g.calibration_staged is not None else " | ")
        lines.append(f"| {g.task_id} | {g.status} | {g.claim:.1f} | {g.gap:.1f} | {g.base:.1f} | {g.diff:.1f} | "
                     f"{100 * g.relative:.1f} | {g.allowed:.1f} | {staged} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Print the report of one journal (and write it to ``--out``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("journal", type=Path, help="a journal of `cudagym baselines check` (JSON lines)")
    parser.add_argument("--protocol", default="", help="only results of this protocol id (default: every one)")
    parser.add_argument("--out", type=Path, help="also write the report here")
    args = parser.parse_args(argv)
    if not args.journal.is_file():
        print(f"no journal at {args.journal}", file=sys.stderr)
        return 2
    with args.journal.open(encoding="utf-8") as f:
        text = render(read_gaps(f, args.protocol), str(args.journal))
    print(text, end="")
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
