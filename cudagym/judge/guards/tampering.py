"""tampering: protected workspace files and the judge's code must not change; sandbox-reported breaches.

The worker writes each job's working folder fresh (solution files plus the format's protected files, read
only) and hash-checks it before the harness runs (``cudagym.judge.sandbox.check_workdir``). This guard
checks again, before loading and after the candidate's code ran (it could ``chmod`` and rewrite
``binding.cpp``, or rewrite its own ``model_new.py`` after the static checks read it): protected files
against the package's templates, ``model.py`` (where present) against the task's source, and the solution
files against the snapshot the judge built. Static: ``model_new.py`` may not import the judge
(``cudagym.*`` other than ``cudagym.runtime``, the raw format's launch API).

``file_access`` and ``network`` (the sandbox's rules) live in :mod:`.escape`.
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from cudagym.judge.guards.base import Guard, register
from cudagym.judge.guards.source_scan import PYTHON_FILE, parse_python

if TYPE_CHECKING:  # pragma: no cover
    from cudagym.judge.harness.context import EvalContext

ALLOWED_CUDAGYM_MODULES = ("cudagym.runtime",)
REFERENCE_FILE = "model.py"


@register
class Tampering(Guard):
    """Changes to protected files or the solution after it was checked; imports of the judge."""

    name = "tampering"
    runner_hooks = frozenset({"after_correctness", "after_timing"})  # they inspect the candidate's process
    summary = "do not modify protected files (binding.cpp, binding_registry.h, model.py) or import the judge"
    order = 5

    def check_sources(self, ctx: EvalContext) -> None:
        """Static import check and the first file check."""
        tree = parse_python(ctx.sources.get(PYTHON_FILE, ""))
        if tree is not None:
            for module, line in judge_imports(tree):
                ctx.flag(self.name, f"{PYTHON_FILE}:{line} imports the judge's module {module}")
        self._check_files(ctx, "before loading")

    def after_correctness(self, ctx: EvalContext) -> None:
        """Files after the candidate's code ran."""
        self._check_files(ctx, "after the correctness runs")

    def after_timing(self, ctx: EvalContext) -> None:
        """Files after timing."""
        self._check_files(ctx, "after timing")

    def _check_files(self, ctx: EvalContext, when: str) -> None:
        problems = workdir_problems(ctx)
        if problems:
            ctx.flag(self.name, f"files changed {when}: " + "; ".join(problems[:6]))


def judge_imports(tree: ast.Module) -> list[tuple[str, int]]:
    """``(module, line)`` of each import of a ``cudagym`` module other than the allowed runtime."""
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        for name in names:
            if name.split(".")[0] == "cudagym" and not name.startswith(ALLOWED_CUDAGYM_MODULES):
                found.append((name, getattr(node, "lineno", 0)))
    return found


def workdir_problems(ctx: EvalContext) -> list[str]:
    """One line per protected or solution file in the working folder that differs from the judge's copy."""
    from cudagym.solution import get_format

    expected = dict(get_format(ctx.job.solution.format).template_files())
    expected.update(ctx.job.solution.files)
    problems = []
    for rel, text in sorted(expected.items()):
        actual = _digest(ctx.workdir / rel)
        if actual != hashlib.sha256(text.encode("utf-8")).hexdigest():
            problems.append(f"{rel} {'is missing' if actual is None else 'was modified'}")
    reference = ctx.workdir / REFERENCE_FILE
    if reference.exists() and _digest(reference) != hashlib.sha256(ctx.job.task.source.encode("utf-8")).hexdigest():
        problems.append(f"{REFERENCE_FILE} was modified")
    return problems


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None
