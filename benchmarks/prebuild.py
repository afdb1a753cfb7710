"""Fill the build cache with every bundled reference solution and every planted hack, in parallel.

The GPU tests build these one by one inside the test process; on a many-core GPU host building them all
first, one process per solution, turns ~40 sequential extension builds into a few parallel rounds, so the
device time of a test session goes to the GPU work. Run from the repository root::

    python benchmarks/prebuild.py [--jobs N] [--no-hacks]

Builds land in the default build cache (``$CUDAGYM_CACHE_DIR/build``), keyed by content, which the tests use.
Prints one line per build and a count; exits 1 if any reference solution fails to build.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _build_one(kind: str, ref: str, folder: str) -> tuple[str, str, bool, float, str]:
    sys.path.insert(0, str(ROOT / "tests"))
    from hacks.corpus import load_task

    from cudagym.judge.build import build
    from cudagym.solution import Solution

    start = time.monotonic()
    result = build(load_task(ref), Solution.from_dir(Path(folder), "extension"), None)
    tail = "" if result.ok else result.message[:300]
    return kind, ref, result.ok, time.monotonic() - start, tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    parser.add_argument("--no-hacks", action="store_true", help="build only the bundled reference solutions")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT / "tests"))
    from hacks.corpus import load_hacks

    from cudagym.judge.build import warm_up

    start = time.monotonic()
    warm_up()  # the torch PCH and the protected module once, before the parallel builds share them
    work = [("bundled", f"bundled/{p.parent.name}/{p.name}", str(p))
            for p in sorted((ROOT / "envs/bundled/solutions").glob("L*/*"))]
    if not args.no_hacks:
        work += [("hack", h.task, str(h.folder)) for h in load_hacks()]
    failed = 0
    with ProcessPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(_build_one, *item) for item in work]
        for future in as_completed(futures):
            kind, ref, ok, wall, tail = future.result()
            failed += kind == "bundled" and not ok
            print(f"{'ok  ' if ok else 'FAIL'} {kind:7s} {ref:40s} {wall:6.1f} s {tail}", flush=True)
    print(f"prebuild: {len(work)} builds ({failed} bundled failed) in {time.monotonic() - start:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
