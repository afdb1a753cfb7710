"""``cudagym tasks``: list a suite's tasks, or show one task (its origin, content hash, level, ops, source).

Examples::

    cudagym tasks list                          # the bundled suite
    cudagym tasks list --suite kernelbench --level 1 --json
    cudagym tasks show L1/19_ReLU
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from cudagym.suites import get_task, load_source, suite_names
from cudagym.task import Task

DEFAULT_SUITE = "bundled"


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``list`` and ``show`` actions and their options."""
    actions = parser.add_subparsers(dest="action", required=True, metavar="{list,show}")
    listing = actions.add_parser("list", help="list the tasks of a suite")
    listing.add_argument(
        "--suite", default=DEFAULT_SUITE, choices=suite_names(),
        help=f"which suite (default: {DEFAULT_SUITE}; data locations come from the environment variables "
        "CUDAGYM_KERNELBENCH_DIR, CUDAGYM_KERNELBENCH_PARQUET, CUDAGYM_OPS6K_PARQUET, else the HF hub)",
    )
    listing.add_argument(
        "--level", type=int, default=None,
        help="only this level (KernelBench level; bundled level; Ops-6K number of composed ops)",
    )
    listing.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    show = actions.add_parser("show", help="show one task by id")
    show.add_argument("id", help="task id, e.g. L1/19_ReLU, bundled/L1/01_ReLU, ops6k/000123_Conv2d_ReLU")
    show.add_argument("--json", action="store_true", help="print the task as a JSON object")


def run(args: argparse.Namespace) -> int:
    """Run ``tasks list`` or ``tasks show``; returns the exit code."""
    if args.action == "list":
        return _list(args.suite, args.level, as_json=args.json)
    return _show(args.id, as_json=args.json)


def _summary(task: Task) -> dict[str, Any]:
    return {
        "id": task.id,
        "suite": task.suite,
        "level": task.level,
        "name": task.name,
        "content_hash": task.content_hash,
        "ops": list(task.ops),
    }


def _list(suite: str, level: int | None, *, as_json: bool) -> int:
    source = load_source(suite, level=level)
    tasks = source.tasks()
    if as_json:
        json.dump([_summary(t) for t in tasks], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    rows = [(t.id, str(t.level), t.short_hash, ", ".join(t.ops)) for t in tasks]
    _print_table(("ID", "LEVEL", "HASH", "OPS"), rows)
    print(f"{len(tasks)} task(s) from {source.describe()}")
    return 0


def _show(task_id: str, *, as_json: bool) -> int:
    task = get_task(task_id)
    if as_json:
        json.dump(task.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    fields = {
        "id": task.id,
        "suite": task.suite,
        "level": str(task.level),
        "name": task.name,
        "content hash": task.content_hash,
        "ops": ", ".join(task.ops) or "-",
    }
    fields.update({k: str(v) for k, v in task.metadata.items() if k != "ops"})
    width = max(len(k) for k in fields) + 2
    for key, value in fields.items():
        print(f"{key + ':':<{width}}{value}")
    print("\n--- reference source ---")
    print(task.source.rstrip("\n"))
    return 0


def _print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max([len(header[i]), *(len(r[i]) for r in rows)]) for i in range(len(header))]
    for row in (header, *rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
