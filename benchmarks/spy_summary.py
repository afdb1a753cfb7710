"""Where the judge's processes spend their wall time: a py-spy recording (``--format raw``) read by process kind.

    python benchmarks/spy_summary.py gpu-logs/spy_batch.txt [--top 25]

``py-spy record --subprocesses --idle --format raw`` writes one line per distinct stack, ``frame;frame;... count``,
the first frames naming the process and its ancestors (``process 123:"cmdline"``, outermost first) and, with
``--threads`` (which this reader needs), the next its thread. The
processes are grouped by kind (the split's runners, the trusted workers, the rest) and for each kind the table gives
its samples, then the functions that held the most samples anywhere on the stack (inclusive) and at its top (self),
a function being its name and file without the line, so one function's lines add up. Idle samples (a thread
waiting in a socket, a lock or the driver) are kept: waiting is where a round trip's wall time goes too.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

KINDS = (("runner", "cudagym.judge.split.runner"), ("trusted worker", "cudagym.judge.worker"))
_LINE = re.compile(r"^(?P<stack>.*) (?P<count>\d+)$")
_PROCESS = re.compile(r"(?:^|;)process \d+:")
_FRAME = re.compile(r"^(?P<name>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")


def kind_of(process: str) -> str:
    """The kind of the process a stack's first frame names."""
    return next((kind for kind, mark in KINDS if mark in process), "other")


def function(frame: str) -> str:
    """A frame without its line number: ``name (file)``; a frame of another shape as it is."""
    match = _FRAME.match(frame.strip())
    if not match:
        return frame.strip()
    return f"{match['name']} ({Path(match['file']).name})" if match["file"] else match["name"]


def read(text: str) -> dict[str, list[tuple[list[str], int]]]:
    """Each process kind's stacks (outermost frame first, the process and thread frames left off) and counts."""
    stacks: dict[str, list[tuple[list[str], int]]] = defaultdict(list)
    for line in text.splitlines():
        match = _LINE.match(line.rstrip())
        if not match:
            continue
        stack = match["stack"]
        at = stack.find(";thread (")  # process frames quote command lines, which may hold ';': the thread ends them
        if stack.startswith("process ") and at >= 0:
            chain, rest = stack[:at], stack[at + 1:].split(";")[1:]
            starts = [m.start() for m in _PROCESS.finditer(chain)]  # a child's ancestors come first: its own is last
            kind = kind_of(chain[starts[-1]:] if starts else chain)
        else:
            kind, rest = "other", stack.split(";")
        stacks[kind].append(([function(f) for f in rest], int(match["count"])))
    return stacks


def summarize(text: str, top: int = 25) -> list[str]:
    """The table's lines."""
    lines = []
    by_kind = read(text)
    total = sum(count for stacks in by_kind.values() for _, count in stacks)
    for kind in sorted(by_kind, key=lambda k: -sum(c for _, c in by_kind[k])):
        stacks = by_kind[kind]
        samples = sum(count for _, count in stacks)
        inclusive: Counter[str] = Counter()
        own: Counter[str] = Counter()
        for frames, count in stacks:
            for name in dict.fromkeys(frames):  # a recursive function counts once per stack
                inclusive[name] += count
            if frames:
                own[frames[-1]] += count
        lines.append(f"## {kind}: {samples} samples ({samples / max(total, 1):.0%} of all)")
        lines.append("inclusive:")
        lines += [f"  {count / samples:6.1%}  {name[:150]}" for name, count in inclusive.most_common(top)]
        lines.append("self:")
        lines += [f"  {count / samples:6.1%}  {name[:150]}" for name, count in own.most_common(top)]
    return lines or ["(no samples)"]


def main(argv: list[str] | None = None) -> int:
    """Print the table of a recording."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recording", type=Path)
    parser.add_argument("--top", type=int, default=25, help="functions per list (default 25)")
    args = parser.parse_args(argv)
    if not args.recording.exists():
        print(f"no recording at {args.recording}")
        return 2
    print("\n".join(summarize(args.recording.read_text(errors="replace"), args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
