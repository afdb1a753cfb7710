"""reference_reuse: the candidate may not import, subclass, instantiate or reach the reference ``Model``.

Static (``model_new.py``): importing ``model`` (the workspace's copy of the reference), using the name
``Model``, subclassing it, reflection that reaches the judge's objects (``gc``, ``inspect``,
``sys._getframe``, ``sys.modules``, ``importlib``, ``runpy``, ``exec``/``eval``/``compile``/``__import__``),
and any ``try``/``except``: the known "fall back to torch when my kernel fails" path (Kevin-32B's hack).
Errors must surface, so a kernel that fails is a failure, not a silent torch fallback.

Run time: after loading, ``ModelNew``'s class hierarchy must not contain the reference class, no module of
the candidate may have loaded the workspace's ``model.py``, and no submodule of the built ``ModelNew`` may
be an instance of the reference class.
"""

from __future__ import annotations

import ast
import os
import sys
from collections.abc import Iterator
from pathlib import Path
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

REFERENCE_NAME = "Model"
REFERENCE_MODULES = frozenset({"model", ".model"})
REFLECTION_MODULES = frozenset({"gc", "inspect", "importlib", "runpy", "imp", "pickle", "marshal"})
REFLECTION_CALLS = frozenset({"exec", "eval", "compile", "__import__", "globals", "sys._getframe",
                              "sys.modules", "builtins.exec", "builtins.eval"})


@register
class ReferenceReuse(Guard):
    """Reusing the reference: importing or subclassing ``Model``, reflection into the judge, try/except paths."""

    name = "reference_reuse"
    summary = "do not import, subclass or call the reference Model; no try/except fallback paths"

    def check_sources(self, ctx: EvalContext) -> None:
        """Flag reference imports, ``Model`` uses, reflection and try/except in model_new.py."""
        tree = parse_python(ctx.sources.get(PYTHON_FILE, ""))
        if tree is None:
            return
        self.flag_findings(ctx, list(_findings(tree)))

    def after_load(self, ctx: EvalContext) -> None:
        """Check the built candidate against the reference class and the loaded modules."""
        assert ctx.module is not None and ctx.cand_model is not None
        if ctx.reference is not None:  # the split's runner has none: the reference's code left before the candidate's
            ref_cls = ctx.reference.model_cls
            cand_cls = type(ctx.cand_model)
            if any(base is ref_cls for base in cand_cls.__mro__):
                ctx.flag(self.name, "ModelNew inherits from the reference Model")
            if any(isinstance(sub, ref_cls) for sub in ctx.cand_model.modules()):
                ctx.flag(self.name, "ModelNew holds an instance of the reference Model")
        model_py = ctx.workdir / "model.py"
        before = ctx.modules_before
        for name, module in list(sys.modules.items()):
            if before.get(name) is module:  # loaded before the candidate's code ran: not its doing
                continue
            file = getattr(module, "__file__", None)
            if isinstance(file, str) and _same_file(file, model_py):
                ctx.flag(self.name, f"the workspace's model.py was imported (as module {name!r})")


def _findings(tree: ast.Module) -> Iterator[str]:
    aliases = import_aliases(tree)
    for module, line in imported_modules(tree):
        root = module.split(".")[0]
        if module in REFERENCE_MODULES or module.startswith("model.") or root == "model":
            yield f"{PYTHON_FILE}:{line} imports the reference module {module!r}"
        elif root in REFLECTION_MODULES:
            yield f"{PYTHON_FILE}:{line} imports {root} (reflection into the judge is not allowed)"
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == REFERENCE_NAME and isinstance(node.ctx, ast.Load):
            yield f"{PYTHON_FILE}:{node.lineno} uses the reference class name `Model`"
        elif isinstance(node, (ast.Try, *_TRY_STAR)):
            line = getattr(node, "lineno", 0)
            yield f"{PYTHON_FILE}:{line} has a try/except: fallback paths are not allowed, let errors surface"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            callee = _callee(node, aliases)
            if callee in REFLECTION_CALLS:
                yield f"{PYTHON_FILE}:{node.lineno} calls {callee}"
        elif isinstance(node, ast.Attribute) and _callee_name(node, aliases) in REFLECTION_CALLS:
            yield f"{PYTHON_FILE}:{node.lineno} uses {_callee_name(node, aliases)}"


_TRY_STAR: tuple[type, ...] = (ast.TryStar,) if hasattr(ast, "TryStar") else ()


def _callee(node: ast.Call, aliases: dict[str, str]) -> str:
    name = dotted(node.func)
    return resolve(name, aliases) if name else ""


def _callee_name(node: ast.Attribute, aliases: dict[str, str]) -> str:
    name = dotted(node)
    return resolve(name, aliases) if name else ""


def _same_file(file: str, target: Path) -> bool:
    """Whether ``file`` is ``target``: the same inode (a link under any name) or, once deleted, the same path.

    Called only for the modules the candidate's code added or replaced: resolving the path of every loaded
    module (about 2,300 with torch, dynamo and CuPy) took 0.4-0.6 s of each runner's start on the H200 host.
    """
    try:
        found, wanted = os.stat(file), os.stat(target)
        return (found.st_dev, found.st_ino) == (wanted.st_dev, wanted.st_ino)
    except (OSError, ValueError):
        pass
    try:
        return Path(file).resolve() == target.resolve()
    except (OSError, RuntimeError, ValueError):
        return False
