"""``cudagym tasks``: list a suite's tasks, or show one task (its origin, content hash, level, ops, source).

Examples::

    cudagym tasks list                          # the bundled suite
    cudagym tasks list --suite kernelbench --root ~/KernelBench --level 1 --json
    cudagym tasks list --suite ops6k --path data.parquet --max-ops 2 --ops ReLU --limit 20
    cudagym tasks show L1/19_ReLU --root ~/KernelBench
    cudagym tasks fetch-models --suite kernelbench --level 4 --root ~/KernelBench   # the judge's model cache
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from cudagym.errors import ConfigError
from cudagym.paths import writable_dir
from cudagym.suites import get_task, load_source, suite_names
from cudagym.task import Task

DEFAULT_SUITE = "bundled"
OPS6K_FILTERS = ("min_ops", "max_ops", "ops", "limit")


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``list`` and ``show`` actions and their options."""
    actions = parser.add_subparsers(dest="action", required=True, metavar="{list,show,fetch-models}")
    listing = actions.add_parser("list", help="list the tasks of a suite")
    listing.add_argument("--suite", default=DEFAULT_SUITE, choices=suite_names(),
                         help=f"which suite (default: {DEFAULT_SUITE})")
    listing.add_argument(
        "--level", type=int, default=None,
        help="only this level (KernelBench level; bundled level; Ops-6K number of composed ops)",
    )
    _data_options(listing)
    ops6k = listing.add_argument_group("Ops-6K filters")
    ops6k.add_argument("--min-ops", type=int, default=None, help="at least this many composed torch ops")
    ops6k.add_argument("--max-ops", type=int, default=None, help="at most this many composed torch ops")
    ops6k.add_argument("--ops", nargs="+", default=None, metavar="OP",
                       help="rows that use every one of these ops (e.g. Conv2d ReLU; case-insensitive)")
    ops6k.add_argument("--limit", type=int, default=None, help="at most this many tasks, in row order")
    listing.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    show = actions.add_parser("show", help="show one task by id")
    show.add_argument("id", help="task id, e.g. L1/19_ReLU, bundled/L1/01_Swish, ops6k/000123_Conv2d_ReLU")
    _data_options(show)
    show.add_argument("--json", action="store_true", help="print the task as a JSON object")
    fetch = actions.add_parser("fetch-models", help="download the pretrained models a suite's tasks load (KernelBench "
                               "level 4) into the judge's model cache, which its offline processes read")
    fetch.add_argument("--suite", default="kernelbench", choices=suite_names(),
                       help="which suite (default: kernelbench)")
    fetch.add_argument("--level", type=int, default=None, help="only this level (default: every level)")
    _data_options(fetch)
    fetch.add_argument("--dest", default=None, help="the hub cache to fill (default: CUDAGYM_MODEL_CACHE, else "
                       "models/ in cudagym's cache folder, where the judge looks)")
    fetch.add_argument("--list", action="store_true", help="only list the models and the tasks that load them")


def _data_options(parser: argparse.ArgumentParser) -> None:
    data = parser.add_argument_group(
        "where the data is", "default: the environment variables CUDAGYM_KERNELBENCH_DIR, "
        "CUDAGYM_KERNELBENCH_PARQUET, CUDAGYM_OPS6K_PARQUET, else the Hugging Face hub cache")
    data.add_argument("--root", default=None, help="a KernelBench checkout (the repository root or KernelBench/)")
    data.add_argument("--parquet", default=None, help="KernelBench parquet file or folder (the hub data set's)")
    data.add_argument("--path", default=None, help="Ops-6K parquet file or folder (data.parquet)")


def run(args: argparse.Namespace) -> int:
    """Run ``tasks list`` or ``tasks show``; returns the exit code."""
    data = {"root": args.root, "parquet": args.parquet, "path": args.path}
    if args.action == "fetch-models":
        return _fetch_models(args.suite, args.level, {k: v for k, v in data.items() if v is not None}, args.dest,
                             only_list=args.list)
    if args.action == "list":
        filters = {**data, "min_ops": args.min_ops, "max_ops": args.max_ops, "ops": args.ops, "limit": args.limit}
        _check_ops6k_filters(args.suite, filters)
        return _list(args.suite, args.level, {k: v for k, v in filters.items() if v is not None}, as_json=args.json)
    return _show(args.id, {k: v for k, v in data.items() if v is not None}, as_json=args.json)


def _check_ops6k_filters(suite: str, filters: dict[str, Any]) -> None:
    """Refuse Ops-6K filters on another suite, and a range of op counts that holds nothing."""
    given = [f"--{name.replace('_', '-')}" for name in OPS6K_FILTERS if filters.get(name) is not None]
    if given and suite != "ops6k":
        raise ConfigError(f"Ops-6K filters (for --suite ops6k only) given with --suite {suite}: {', '.join(given)}; "
                          f"select {suite} tasks with --level")
    low, high = filters.get("min_ops"), filters.get("max_ops")
    if low is not None and high is not None and low > high:
        raise ConfigError(f"expected --min-ops <= --max-ops, got --min-ops {low} and --max-ops {high} (no row "
                          "could match)")


def _summary(task: Task) -> dict[str, Any]:
    return {
        "id": task.id,
        "suite": task.suite,
        "level": task.level,
        "name": task.name,
        "content_hash": task.content_hash,
        "ops": list(task.ops),
    }


def _list(suite: str, level: int | None, options: dict[str, Any], *, as_json: bool) -> int:
    source = load_source(suite, level=level, **options)
    tasks = source.tasks()
    if as_json:
        json.dump([_summary(t) for t in tasks], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    rows = [(t.id, str(t.level), t.short_hash, ", ".join(t.ops)) for t in tasks]
    _print_table(("ID", "LEVEL", "HASH", "OPS"), rows)
    print(f"{len(tasks)} task(s) from {source.describe()}")
    return 0


def _show(task_id: str, options: dict[str, Any], *, as_json: bool) -> int:
    task = get_task(task_id, **options)
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


def _fetch_models(suite: str, level: int | None, options: dict[str, Any], dest: str | None, *,
                  only_list: bool) -> int:
    from pathlib import Path

    from cudagym.paths import model_cache_dir
    from cudagym.sources.models import fetch_models, models_of

    if dest and not only_list:
        writable_dir(dest, "--dest")  # before the listing and any download
    source = load_source(suite, level=level, **options)
    users = models_of(source.tasks())
    if not users:
        print(f"no task of {source.describe()} loads a pretrained model")
        return 0
    _print_table(("MODEL", "TASKS"), [(repo, ", ".join(ids)) for repo, ids in users.items()])
    cache = Path(dest).expanduser() if dest else model_cache_dir()
    if only_list:
        print(f"{len(users)} model(s); not fetched (--list). The judge reads {cache}")
        return 0
    for repo, snapshot in zip(users, fetch_models(list(users), cache), strict=True):
        print(f"fetched {repo} -> {snapshot}")
    hint = "" if dest is None else f" (the judge reads it with CUDAGYM_MODEL_CACHE={cache})"
    print(f"{len(users)} model(s) in {cache}{hint}")
    return 0


def _print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max([len(header[i]), *(len(r[i]) for r in rows)]) for i in range(len(header))]
    for row in (header, *rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
