"""The bundled suite: tasks written for cudagym and shipped in the wheel, each with a reference solution.

Package data of ``cudagym.envs.bundled`` (the repository's ``envs/bundled/``):

- ``tasks/L{n}/NN_Name.py``: the reference module, KernelBench format;
- ``solutions/L{n}/NN_Name/``: its solution in the ``extension`` format (``model_new.py``, ``kernels/``).

Ids are ``bundled/L{n}/NN_Name``, in level then numeric order.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from importlib import resources
from pathlib import Path

from cudagym.errors import ConfigError, DataUnavailableError, TaskFormatError, UnknownTaskError
from cudagym.solution import Solution
from cudagym.sources.base import TaskSource
from cudagym.task import Task, make_task, read_task_file

logger = logging.getLogger(__name__)

SUITE = "bundled"
PACKAGE = "cudagym.envs.bundled"
SOLUTION_FORMAT = "extension"

_LEVEL_DIR = re.compile(r"^L(\d+)$")
_TASK_FILE = re.compile(r"^(\d+)_(.+)\.py$")
_REINSTALL = 'reinstall cudagym (`pip install --force-reinstall cudagym`, or `pip install -e .` in a checkout)'


def package_root() -> Path:
    """The installed ``cudagym.envs.bundled`` folder.

    Raises:
        DataUnavailableError: The package is missing or not on a file system (e.g. inside a zip).
    """
    try:
        root = resources.files(PACKAGE)
    except ModuleNotFoundError:
        raise DataUnavailableError(f"the package {PACKAGE} is not installed; {_REINSTALL}") from None
    if not isinstance(root, Path):
        raise DataUnavailableError(
            f"expected {PACKAGE} on the file system, got {type(root).__name__} ({root}); "
            f"install cudagym unzipped ({_REINSTALL})"
        )
    return root


class BundledSource(TaskSource):
    """The bundled tasks and their reference solutions.

    Args:
        levels: One level, several, or None for all.
        root: A folder laid out like ``envs/bundled/`` (``tasks/``, ``solutions/``); the installed
            package when None.
    """

    suite = SUITE

    def __init__(self, levels: int | Iterable[int] | None = None, *, root: str | Path | None = None) -> None:
        super().__init__()
        if levels is None:
            self.levels: tuple[int, ...] | None = None
        else:
            wanted = (levels,) if isinstance(levels, int) else tuple(levels)
            if not wanted or any(isinstance(lv, bool) or not isinstance(lv, int) or lv < 1 for lv in wanted):
                raise ConfigError(f"expected bundled levels as positive ints (e.g. 1, 2, 3), got {levels!r}")
            self.levels = tuple(sorted(set(wanted)))
        self._root = Path(root) if root is not None else None

    @property
    def root(self) -> Path:
        """The folder holding ``tasks/`` and ``solutions/``."""
        return self._root if self._root is not None else package_root()

    def describe(self) -> str:
        """Where the tasks come from."""
        levels = "all levels" if self.levels is None else "levels " + ", ".join(map(str, self.levels))
        return f"bundled suite at {self.root} ({levels})"

    def _fix(self) -> str:
        """What to do about missing tasks: check the folder the user named, or reinstall the package."""
        if self._root is None:
            return _REINSTALL
        return (f"check suite_options['root'] ({self._root}): it should be a folder laid out like envs/bundled/ "
                f"(tasks/L<n>/NN_Name.py), or leave it out for the installed bundled suite (if that is missing "
                f"too, {_REINSTALL})")

    def _load(self) -> Sequence[Task]:
        tasks_dir = self.root / "tasks"
        if not tasks_dir.is_dir():
            what = ("is a file" if self.root.is_file() else "does not exist") if not self.root.is_dir() else \
                "has no tasks/ folder"
            raise DataUnavailableError(f"expected the bundled tasks at {tasks_dir}, not found ({self.root} {what}); "
                                       f"{self._fix()}")
        tasks: list[Task] = []
        present = _level_dirs(tasks_dir)
        if self.levels is not None and present and not set(self.levels) & {lv for lv, _ in present}:
            raise UnknownTaskError(
                f"the bundled suite has no level {', '.join(map(str, self.levels))}; its levels are "
                f"{', '.join(str(lv) for lv, _ in present)} (`cudagym tasks list --suite bundled` lists them all)"
            )
        for level, folder in present:
            if self.levels is None or level in self.levels:
                tasks.extend(_load_level(folder, level))
        if not tasks:
            raise DataUnavailableError(
                f"expected bundled tasks tasks/L<n>/NN_Name.py under {self.root} for "
                f"{'any level' if self.levels is None else f'levels {self.levels}'}, found none; {self._fix()}"
            )
        return tasks

    def solution_dir(self, task_id: str) -> Path:
        """The folder holding the reference solution of ``task_id``.

        Raises:
            UnknownTaskError: No bundled task has this id.
            DataUnavailableError: The task has no solution folder.
        """
        task = self.get(task_id)
        folder = self.root / "solutions" / f"L{task.level}" / task.name
        if not folder.is_dir():
            raise DataUnavailableError(
                f"expected a reference solution for {task_id} at {folder}, not found; {_REINSTALL}"
            )
        return folder

    def solution(self, task_id: str) -> Solution:
        """The reference solution of ``task_id``, in the ``extension`` format."""
        return Solution.from_dir(self.solution_dir(task_id), format=SOLUTION_FORMAT)


def _level_dirs(tasks_dir: Path) -> list[tuple[int, Path]]:
    found = []
    for child in tasks_dir.iterdir():
        match = _LEVEL_DIR.match(child.name)
        if match and child.is_dir():
            found.append((int(match.group(1)), child))
    return sorted(found)


def _load_level(folder: Path, level: int) -> list[Task]:
    numbered = []
    for path in folder.iterdir():
        match = _TASK_FILE.match(path.name)
        if match and path.is_file():
            numbered.append((int(match.group(1)), path))
        elif path.suffix == ".py" and not path.name.startswith("__"):
            logger.warning("skipping %s: expected a file named NN_Name.py", path)
    tasks = []
    for number, path in sorted(numbered, key=lambda item: (item[0], item[1].name)):
        name = path.stem
        try:
            text = read_task_file(path)
        except OSError as exc:
            raise TaskFormatError(f"{path}: cannot be read ({exc.strerror or exc})") from None
        tasks.append(
            make_task(
                text,
                id=f"{SUITE}/L{level}/{name}", suite=SUITE, level=level, name=name, origin=str(path),
                metadata={"problem_id": number},
            )
        )
    return tasks
