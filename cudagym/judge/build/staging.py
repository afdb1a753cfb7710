"""The build directory of one solution: the agent's files plus the format's protected files.

The protected files always come from the package (never from the workspace), and sources are compiled
by their relative paths from this directory, so compiler messages already name ``kernels/relu.cu``.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from pathlib import Path

from cudagym.solution import Solution, get_format


def stage_solution(solution: Solution, root: Path, *, patterns: tuple[str, ...] = ()) -> None:
    """Write the solution's files (those matching ``patterns``, or all) and its protected files under ``root``."""
    fmt = get_format(solution.format)
    picked = {p: t for p, t in solution.files.items() if not patterns or matches(p, patterns)}
    write_files(root, {**picked, **fmt.template_files()})


def write_files(root: Path, files: Mapping[str, str]) -> None:
    """Write text files under ``root`` (relative paths, folders created)."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def matches(path: str, patterns: tuple[str, ...]) -> bool:
    """True when ``path`` matches any glob in ``patterns``."""
    return any(fnmatch.fnmatchcase(path, p) for p in patterns)


def select(files: Mapping[str, str], *patterns: str) -> dict[str, str]:
    """The files whose paths match any of ``patterns``, sorted by path."""
    return {p: files[p] for p in sorted(files) if matches(p, patterns)}
