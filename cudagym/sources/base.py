"""One base class for every task source (a KernelBench checkout, a Hugging Face parquet, the bundled suite)."""

from __future__ import annotations

import abc
import threading
from collections.abc import Iterator, Sequence

from cudagym.errors import TaskFormatError, UnknownTaskError
from cudagym.task import Task


class TaskSource(abc.ABC):
    """A finite, ordered collection of tasks loaded from one place.

    Subclasses implement :meth:`_load`; loading happens once, on first use, so constructing a source is
    cheap and touches neither disk nor network.
    """

    suite: str = ""

    def __init__(self) -> None:
        self._tasks: tuple[Task, ...] | None = None
        self._by_id: dict[str, Task] = {}
        self._load_lock = threading.Lock()  # tasks() loads once even when many threads call it at once

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state.pop("_load_lock", None)  # a lock does not pickle; the copy gets its own
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._load_lock = threading.Lock()

    @abc.abstractmethod
    def _load(self) -> Sequence[Task]:
        """Read every task; raise DataUnavailableError with instructions when the data is missing."""

    def describe(self) -> str:
        """Where this source reads from, for listings and errors."""
        return type(self).__name__

    def tasks(self) -> tuple[Task, ...]:
        """All tasks, in a stable order."""
        tasks = self._tasks
        if tasks is not None:
            return tasks
        with self._load_lock:
            if self._tasks is None:
                by_id: dict[str, Task] = {}
                for task in self._load():
                    held = by_id.setdefault(task.id, task)
                    if held.content_hash != task.content_hash:  # one id, two problems: get() could not tell them apart
                        raise TaskFormatError(
                            f"{self.describe()}: two different tasks have the id {task.id!r} (from "
                            f"{held.metadata.get('origin', '?')} and {task.metadata.get('origin', '?')}); "
                            "each task needs its own id"
                        )
                self._by_id = by_id
                self._tasks = tuple(by_id.values())  # a task listed twice (same id, same source) counts once
            return self._tasks

    def ids(self) -> list[str]:
        """All task ids, in order."""
        return [t.id for t in self.tasks()]

    def get(self, task_id: str) -> Task:
        """The task with this id.

        Raises:
            UnknownTaskError: No task has this id; the message lists close matches.
        """
        self.tasks()
        try:
            return self._by_id[task_id]
        except KeyError:
            import difflib

            close = difflib.get_close_matches(task_id, list(self._by_id), n=5)
            hint = f"; did you mean {', '.join(close)}?" if close else f"; {len(self._by_id)} ids in {self.describe()}"
            raise UnknownTaskError(f"no task {task_id!r} in {self.describe()}{hint}") from None

    def __len__(self) -> int:
        return len(self.tasks())

    def __iter__(self) -> Iterator[Task]:
        return iter(self.tasks())

    def __contains__(self, task_id: object) -> bool:
        self.tasks()
        return task_id in self._by_id
