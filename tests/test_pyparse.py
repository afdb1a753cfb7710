"""cudagym.pyparse: ast.parse and compile() of a tree stay correct when many threads use them at once."""

from __future__ import annotations

import pickle
import sys
import threading
import time
from collections.abc import Callable, Sequence

from cudagym import pyparse
from cudagym.sources.bundled import BundledSource
from cudagym.task import Task, parse_task_source

THREADS = 8
PARSES = 40
CYCLES_PER_PARSE = 50


class _Finalized:
    """An object whose finalizer gives other threads a chance to run (as any __del__ may)."""

    def __del__(self) -> None:
        time.sleep(0)


def _churn() -> None:
    """Garbage in reference cycles with finalizers: the GC then runs them at arbitrary points, mid-parse included."""
    for _ in range(CYCLES_PER_PARSE):
        obj = _Finalized()
        obj.self = obj  # type: ignore[attr-defined]


def _run_threads(target: Callable[[], None], n: int) -> list[BaseException]:
    """Run ``target`` in ``n`` threads started together; the exceptions they raised."""
    errors: list[BaseException] = []
    start = threading.Barrier(n)

    def body() -> None:
        try:
            start.wait()
            target()
        except BaseException as exc:  # noqa: BLE001 - every failure is the test's business
            errors.append(exc)

    threads = [threading.Thread(target=body) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def test_concurrent_task_parsing_never_trips_the_ast_recursion_check() -> None:
    # CPython gh-106905: unserialised, this raised "SystemError: AST constructor recursion depth mismatch"
    tasks: Sequence[Task] = BundledSource().tasks()
    task = max(tasks, key=lambda t: len(t.source))
    origin = str(task.metadata.get("origin", task.id))

    def work() -> None:
        for _ in range(PARSES):
            parse_task_source(task.source, origin=origin)
            _churn()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        errors = _run_threads(work, THREADS)
    finally:
        sys.setswitchinterval(interval)
    assert errors == []


def test_parse_and_compile_tree_behave_like_the_builtins() -> None:
    tree = pyparse.parse("x = 1\n", filename="f.py")
    namespace: dict[str, object] = {}
    exec(pyparse.compile_tree(tree, "f.py"), namespace)
    assert namespace["x"] == 1
    for bad in ("x = (", "return 1\n"):
        try:
            pyparse.compile_tree(pyparse.parse(bad, filename="bad.py"), "bad.py")
        except SyntaxError as exc:
            assert exc.filename == "bad.py"
        else:
            raise AssertionError(f"{bad!r} compiled")


def test_tasks_load_once_when_many_threads_ask_at_once() -> None:
    source = BundledSource()
    real_load = source._load
    loads = 0

    def counted_load() -> Sequence[Task]:
        nonlocal loads
        loads += 1
        time.sleep(0.05)  # a slow first load: the other threads arrive while it runs
        return real_load()

    source._load = counted_load  # type: ignore[method-assign]
    seen: list[tuple[Task, ...]] = []
    errors = _run_threads(lambda: seen.append(source.tasks()), THREADS)
    assert errors == [] and loads == 1
    assert len(seen) == THREADS and seen[0] and all(tasks is seen[0] for tasks in seen)


def test_a_source_pickles_before_and_after_loading_and_its_copy_loads_alone() -> None:
    source = BundledSource()
    fresh = pickle.loads(pickle.dumps(source))
    loaded = source.tasks()
    copy = pickle.loads(pickle.dumps(source))
    assert copy.tasks() == loaded and [t.id for t in fresh.tasks()] == [t.id for t in loaded]
    errors = _run_threads(fresh.tasks, THREADS)  # the copy's lock is its own and works
    assert errors == []
