"""timer_patch: candidate code must not replace the functions the judge times, synchronises or compares with.

Run time (the authority): the harness snapshots the callables of ``time``, ``threading``, ``builtins``,
``torch``, ``torch._C``, ``torch.cuda`` (and its ``Event``/``Stream`` classes), ``torch.Tensor``,
``torch.nn.Module``, ``torch.nn.functional``, ``torch.profiler`` and every loaded ``cudagym`` module before
the candidate's code is executed (:class:`~cudagym.judge.harness.integrity.AttributeSnapshot`). After
loading, after correctness and after timing, any replaced or deleted callable is a violation. The harness
times through references captured at import either way, and restores the originals after the job.

Static (``model_new.py``): assignments, ``del``, ``setattr``/``delattr`` on attributes of those modules,
and ``unittest.mock``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import TYPE_CHECKING

from cudagym.judge.guards.base import Guard, register
from cudagym.judge.guards.source_scan import (
    PYTHON_FILE,
    dotted,
    import_aliases,
    imported_modules,
    parse_python,
    resolve,
)

if TYPE_CHECKING:  # pragma: no cover
    from cudagym.judge.harness.context import EvalContext

PROTECTED_ROOTS = frozenset({"torch", "time", "threading", "builtins", "sys", "os", "gc", "cudagym", "numpy",
                             "random", "importlib", "logging"})
PATCH_MODULES = frozenset({"unittest.mock", "mock"})


@register
class TimerPatch(Guard):
    """Monkey-patching of timing, synchronisation, comparison or judge functions."""

    name = "timer_patch"
    runner_hooks = frozenset({"after_correctness", "after_timing"})  # they inspect the candidate's process
    summary = "do not replace torch/time/builtins/judge functions (timers, synchronize, comparisons)"
    order = 10

    def check_sources(self, ctx: EvalContext) -> None:
        """Flag assignments to attributes of protected modules in model_new.py."""
        tree = parse_python(ctx.sources.get(PYTHON_FILE, ""))
        if tree is None:
            return
        self.flag_findings(ctx, list(_findings(tree)))

    def after_load(self, ctx: EvalContext) -> None:
        """Check the snapshot after model_new.py ran and the models were built."""
        self._check(ctx, "loading model_new.py and building ModelNew")

    def after_correctness(self, ctx: EvalContext) -> None:
        """Check the snapshot after the correctness runs."""
        self._check(ctx, "the correctness runs")

    def after_timing(self, ctx: EvalContext) -> None:
        """Check the snapshot after timing."""
        self._check(ctx, "timing")

    def _check(self, ctx: EvalContext, stage: str) -> None:
        if ctx.snapshot is None:
            return
        changed = ctx.snapshot.changes()
        if changed:
            shown = ", ".join(changed[:10]) + (f" (+{len(changed) - 10} more)" if len(changed) > 10 else "")
            ctx.flag(self.name, f"functions the judge relies on were replaced during {stage}: {shown}")
            ctx.snapshot.restore()


def _findings(tree: ast.Module) -> Iterator[str]:
    aliases = import_aliases(tree)
    for module, line in imported_modules(tree):
        if module in PATCH_MODULES or module.startswith("unittest.mock"):
            yield f"{PYTHON_FILE}:{line} imports {module}"
    for node in ast.walk(tree):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        for target in targets:
            name = _protected(target, aliases)
            if name:
                yield f"{PYTHON_FILE}:{getattr(node, 'lineno', 0)} assigns {name}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
            if node.args and _protected_object(node.args[0], aliases):
                yield f"{PYTHON_FILE}:{node.lineno} calls {node.func.id} on {resolve(dotted(node.args[0]), aliases)}"


def _protected(target: ast.AST, aliases: dict[str, str]) -> str:
    if not isinstance(target, ast.Attribute):
        return ""
    name = dotted(target)
    resolved = resolve(name, aliases) if name else ""
    return resolved if resolved.split(".")[0] in PROTECTED_ROOTS else ""


def _protected_object(node: ast.AST, aliases: dict[str, str]) -> bool:
    name = dotted(node)
    return bool(name) and resolve(name, aliases).split(".")[0] in PROTECTED_ROOTS
