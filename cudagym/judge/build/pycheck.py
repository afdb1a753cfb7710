"""Static checks of ``model_new.py`` at build time: it compiles, has ``ModelNew(nn.Module)``, imports rightly.

Without a GPU, ``compile()`` is the only feedback an agent gets, and the ``extension`` and ``raw`` builders
compile only the kernels; so a ``model_new.py`` that is not Python would otherwise build "OK". These checks
read the source with :func:`compile` (to an AST and to bytecode, which catches what the parser alone lets
through, such as ``return`` outside a function) and never execute it: the env process stays free of
candidate code.

What each format forbids importing is what it cannot load in the GPU worker:

- ``extension``: ``cudagym.runtime`` (the raw format's launcher) and ``torch.utils.cpp_extension`` (the
  judge builds ``kernels/`` into ``cuda_extension``; nothing is built when the worker loads);
- ``inline``: ``cuda_extension`` (the extension format's module) and ``cudagym.runtime``;
- ``raw``: ``cuda_extension`` and ``torch.utils.cpp_extension``.

Imports that are rule violations in every format (the reference ``model``, the judge's ``cudagym``
modules) are left to the guards, which name the rule at ``verify``.
"""

from __future__ import annotations

import ast
import dataclasses
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

from cudagym import pyparse
from cudagym.judge.records import BuildResult, BuildStatus, Diagnostic, Severity

PYTHON_FILE = "model_new.py"
CLASS_NAME = "ModelNew"
TOOL = "python"
NOT_PYTHON = "does not compile as Python"

_RUNTIME = "cudagym.runtime"
_CPP_EXTENSION = "torch.utils.cpp_extension"
_EXTENSION_MODULE = "cuda_extension"


@dataclass(frozen=True)
class FormatImports:
    """The modules one solution format's ``model_new.py`` may not import, and what to use instead.

    Attributes:
        forbidden: Dotted module names (a name and everything under it).
        use_instead: One clause for the message: how this format reaches its kernels.
    """

    forbidden: tuple[str, ...]
    use_instead: str


FORMAT_IMPORTS: dict[str, FormatImports] = {
    "extension": FormatImports(
        (_RUNTIME, _CPP_EXTENSION),
        "the extension format calls its kernels through `import cuda_extension`, which the judge builds "
        "from kernels/*.cu and kernels/*_binding.cpp",
    ),
    "inline": FormatImports(
        (_EXTENSION_MODULE, _RUNTIME),
        "the inline format builds its kernels with torch.utils.cpp_extension.load_inline in model_new.py",
    ),
    "raw": FormatImports(
        (_EXTENSION_MODULE, _CPP_EXTENSION),
        "the raw format launches the kernels of kernels/*.cu through `from cudagym import runtime`",
    ),
}


def check_model_new(source: str | None, format_name: str) -> tuple[Diagnostic, ...]:
    """Errors (and compiler warnings) in ``model_new.py``, each with its line; ``()`` when it is fine.

    Args:
        source: The file's text; None when the solution has no ``model_new.py`` (the layout check's case).
        format_name: The solution format (``extension``, ``inline``, ``raw``; others get the generic checks).

    Returns:
        Diagnostics for ``model_new.py``: a syntax error alone when it does not compile; otherwise a
        missing or wrong ``ModelNew`` and each forbidden import as errors, and the compiler's warnings
        (invalid escape sequences, ``is`` with a literal) as warnings.
    """
    if source is None:
        return ()
    tree, found = _compile(source)
    if tree is None:
        return found
    found += _model_new_class(tree)
    rules = FORMAT_IMPORTS.get(format_name)
    if rules is not None:
        found += tuple(_forbidden_imports(tree, format_name, rules))
    return found


def has_errors(diagnostics: tuple[Diagnostic, ...]) -> bool:
    """True when any diagnostic is an error."""
    return any(d.severity is Severity.ERROR for d in diagnostics)


def not_python(diagnostics: tuple[Diagnostic, ...]) -> bool:
    """True when the checks found that ``model_new.py`` does not compile at all (running it is pointless)."""
    return any(d.severity is Severity.ERROR and d.message.startswith(NOT_PYTHON) for d in diagnostics)


def _error(message: str, line: int = 0, column: int = 0) -> Diagnostic:
    return Diagnostic(Severity.ERROR, message, file=PYTHON_FILE, line=line, column=column, tool=TOOL)


def _compile(source: str) -> tuple[ast.Module | None, tuple[Diagnostic, ...]]:
    """The syntax tree and compiler warnings, or None and the syntax error (nothing is executed)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            tree = pyparse.parse(source, filename=PYTHON_FILE)
            pyparse.compile_tree(tree, PYTHON_FILE, "exec")  # bytecode only: 'return' outside function
        except SyntaxError as exc:
            text = f"{type(exc).__name__}: {exc.msg}" + (f": {exc.text.strip()}" if exc.text else "")
            return None, (_error(f"{NOT_PYTHON} ({text})", exc.lineno or 0, exc.offset or 0),)
        except (ValueError, RecursionError, MemoryError) as exc:  # NUL bytes; nesting too deep to parse
            return None, (_error(f"{NOT_PYTHON} ({type(exc).__name__}: {exc})"),)
    notes = tuple(
        Diagnostic(Severity.WARNING, f"{w.category.__name__}: {w.message}", file=PYTHON_FILE,
                   line=int(w.lineno or 0), tool=TOOL)
        for w in caught if issubclass(w.category, (SyntaxWarning, DeprecationWarning))  # 3.11: invalid escapes
    )
    return tree, notes


def _module_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements that run at module level, through ``if``/``try``/``with`` blocks."""
    for node in body:
        yield node
        if isinstance(node, ast.If):
            yield from _module_statements(node.body)
            yield from _module_statements(node.orelse)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            yield from _module_statements(node.body)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                yield from _module_statements(block)


def _model_new_class(tree: ast.Module) -> tuple[Diagnostic, ...]:
    statements = list(_module_statements(tree.body))
    classes = {n.name: n for n in statements if isinstance(n, ast.ClassDef)}
    assigned = [n for n in statements if isinstance(n, (ast.Assign, ast.AnnAssign))
                and any(isinstance(t, ast.Name) and t.id == CLASS_NAME
                        for t in (n.targets if isinstance(n, ast.Assign) else [n.target]))]
    model_new = classes.get(CLASS_NAME)
    if model_new is None:
        if assigned:  # ModelNew = make_class(...): what it is shows only when it runs
            return ()
        return (_error(f"defines no module-level `class {CLASS_NAME}(nn.Module)`; the judge instantiates "
                       f"{CLASS_NAME} from model_new.py"),)
    aliases = _import_aliases(tree)
    verdict = _derives_from_module(model_new, classes, aliases, seen=set())
    if verdict is False:
        return (_error(f"`class {CLASS_NAME}` does not subclass torch.nn.Module; write "
                       f"`class {CLASS_NAME}(nn.Module)` (with `import torch.nn as nn`)", model_new.lineno),)
    return ()


def _derives_from_module(
    cls: ast.ClassDef, classes: dict[str, ast.ClassDef], aliases: dict[str, str], seen: set[str],
) -> bool | None:
    """True when a base is ``torch.nn.*``, False when provably not, None when it cannot be told statically."""
    seen.add(cls.name)
    unknown = False
    for base in cls.bases:
        name = _resolve(_dotted(base), aliases)
        if name.startswith("torch.nn."):
            return True
        local = classes.get(name)
        if local is not None and local.name not in seen:
            verdict = _derives_from_module(local, classes, aliases, seen)
            if verdict is not False:
                return verdict
        elif name in _BUILTIN_BASES or (local is not None):
            continue
        else:
            unknown = True  # imported from elsewhere, or an expression: only running it would tell
    return None if unknown else False


_BUILTIN_BASES = frozenset({"object", "int", "float", "str", "dict", "list", "tuple", "set", "Exception"})


def _dotted(node: ast.AST) -> str:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return ""


def _import_aliases(tree: ast.Module) -> dict[str, str]:
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                local = alias.asname or alias.name.split(".")[0]
                aliases[local] = alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def _resolve(name: str, aliases: dict[str, str]) -> str:
    head, _, rest = name.partition(".")
    target = aliases.get(head, head)
    return f"{target}.{rest}" if rest else target


def _imported(tree: ast.Module) -> Iterator[tuple[str, int]]:
    """``(dotted name, line)`` of every absolute import (``from a import b`` gives ``a`` and ``a.b``)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module, node.lineno
            for alias in node.names:
                yield f"{node.module}.{alias.name}", node.lineno


def _forbidden_imports(tree: ast.Module, format_name: str, rules: FormatImports) -> Iterator[Diagnostic]:
    reported: set[tuple[str, int]] = set()
    for name, line in _imported(tree):
        for banned in rules.forbidden:
            if (name == banned or name.startswith(banned + ".")) and (banned, line) not in reported:
                reported.add((banned, line))
                yield _error(f"imports {banned}, which the {format_name} format does not load; "
                             f"{rules.use_instead}", line)


def with_python_checks(result: BuildResult, diagnostics: tuple[Diagnostic, ...]) -> BuildResult:
    """``result`` with the checks' findings first; a build that was OK becomes ``INVALID`` on an error."""
    if not diagnostics:
        return result
    status = result.status
    message = result.message
    if has_errors(diagnostics) and result.ok:
        status = BuildStatus.INVALID
        message = f"{PYTHON_FILE} has errors (the kernels built); fix them before verify"
    return dataclasses.replace(result, status=status, message=message,
                               diagnostics=(*diagnostics, *result.diagnostics))


def failed_python_checks(format_name: str, diagnostics: tuple[Diagnostic, ...]) -> BuildResult:
    """The result for a format whose build runs ``model_new.py`` (``inline``) when it does not compile."""
    return BuildResult(BuildStatus.INVALID, format_name, diagnostics=diagnostics,
                       message=f"{PYTHON_FILE} has errors; nothing was built")


__all__ = ["FORMAT_IMPORTS", "FormatImports", "check_model_new", "failed_python_checks", "has_errors",
           "not_python", "with_python_checks"]
