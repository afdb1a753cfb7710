"""Reading a solution's source for the static checks: Python names resolved through imports, C++ calls.

Static checks are a fast first line with precise file:line messages; the run-time checks are the
authority (an exploit can always hide from a text scan). They read ``model_new.py`` with :mod:`ast`
(never executing it) and the ``.cu``/``.cpp``/``.h`` files as text with comments and string literals
removed.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from cudagym import pyparse
from cudagym.task import dotted_name as dotted

PYTHON_FILE = "model_new.py"
CPP_SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".h", ".hpp")


@dataclass(frozen=True)
class PyCall:
    """A call in Python source with its callee resolved through the file's imports."""

    name: str  # canonical dotted name, e.g. ``torch.nn.functional.relu`` for ``F.relu``
    line: int
    node: ast.Call


@functools.lru_cache(maxsize=16)
def parse_python(text: str) -> ast.Module | None:
    """The syntax tree, or None when the file does not parse (loading reports the syntax error).

    Memoised: every static guard reads model_new.py, so one evaluation parses it once. Callers must not
    modify the tree.
    """
    try:
        return pyparse.parse(text)
    except (SyntaxError, ValueError):
        return None


def import_aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> the dotted module or object it was imported as (``F`` -> ``torch.nn.functional``)."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    root = alias.name.split(".")[0]
                    aliases[root] = root
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def resolve(name: str, aliases: Mapping[str, str]) -> str:
    """Replace the first component of a dotted name by what it was imported as."""
    head, _, rest = name.partition(".")
    base = aliases.get(head)
    if base is None:
        return name
    return f"{base}.{rest}" if rest else base


def python_calls(tree: ast.Module) -> Iterator[PyCall]:
    """Every call whose callee is a dotted name, resolved through the imports."""
    aliases = import_aliases(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = dotted(node.func)
            if name:
                yield PyCall(resolve(name, aliases), node.lineno, node)


def imported_modules(tree: ast.Module) -> Iterator[tuple[str, int]]:
    """``(module, line)`` for every import statement (``from a.b import c`` gives ``a.b`` and ``a.b.c``)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            yield module, node.lineno
            for alias in node.names:
                yield f"{module}.{alias.name}", node.lineno


# ----------------------------------------------------------------------------------------------- C++

_CPP_TOKENS = re.compile(
    r"""//[^\n]*                         # line comment
      | /\*.*?\*/                        # block comment
      | R"(?P<delim>[^(\s]*)\(.*?\)(?P=delim)"   # raw string
      | "(?:\\.|[^"\\\n])*"              # string literal
      | '(?:\\.|[^'\\\n])*'              # char literal
    """,
    re.DOTALL | re.VERBOSE,
)


def strip_cpp(text: str) -> str:
    """C/C++/CUDA source with comments and string/char literals blanked (newlines kept, so lines still match)."""

    def blank(match: re.Match[str]) -> str:
        return "".join("\n" if ch == "\n" else " " for ch in match.group(0))

    return _CPP_TOKENS.sub(blank, text)


_NAMESPACED_CALL = re.compile(r"\b(torch|at)\s*::\s*((?:\w+\s*::\s*)*\w+)\s*(?:<[^<>;{}]*>)?\s*\(")
_METHOD_CALL = re.compile(r"(?:\.|->)\s*(\w+)\s*\(")


@dataclass(frozen=True)
class CppCall:
    """A ``torch::``/``at::`` function call or a method call found in C++ source."""

    namespace: str  # "torch", "at", or "" for a method call
    name: str  # ``empty_like``, ``cuda::getCurrentCUDAStream``, or the method name
    line: int


def cpp_calls(text: str) -> Iterator[CppCall]:
    """``torch::``/``at::`` calls and ``.method(`` calls in C++ source (comments and strings ignored)."""
    clean = strip_cpp(text)
    for match in _NAMESPACED_CALL.finditer(clean):
        name = re.sub(r"\s+", "", match.group(2))
        yield CppCall(match.group(1), name, clean.count("\n", 0, match.start()) + 1)
    for match in _METHOD_CALL.finditer(clean):
        yield CppCall("", match.group(1), clean.count("\n", 0, match.start()) + 1)


def cpp_identifiers(text: str) -> set[str]:
    """Every identifier in C++ source outside comments and strings."""
    return set(re.findall(r"\b[A-Za-z_]\w*\b", strip_cpp(text)))


def cpp_files(sources: Mapping[str, str]) -> Iterator[tuple[str, str]]:
    """``(path, text)`` of the C/C++/CUDA files of a solution."""
    for path, text in sorted(sources.items()):
        if path.endswith(CPP_SUFFIXES):
            yield path, text


def python_sources(sources: Mapping[str, str]) -> Iterator[tuple[str, ast.Module]]:
    """``(path, tree)`` of the Python files of a solution that parse."""
    for path, text in sorted(sources.items()):
        if path.endswith(".py"):
            tree = parse_python(text)
            if tree is not None:
                yield path, tree


_CPP_MARKERS = ("#include", "__global__", "torch::", "at::", "PYBIND11_MODULE")


def embedded_cpp(tree: ast.Module) -> list[tuple[int, str]]:
    """``(line, text)`` of the string constants that hold C++/CUDA (``load_inline`` sources)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if any(marker in node.value for marker in _CPP_MARKERS):
                found.append((node.lineno, node.value))
    return found


def all_cpp(sources: Mapping[str, str]) -> Iterator[tuple[str, int, str]]:
    """``(path, first line, text)`` of every piece of C++: the kernel files and ``load_inline`` strings."""
    for path, text in cpp_files(sources):
        yield path, 1, text
    for path, tree in python_sources(sources):
        for line, text in embedded_cpp(tree):
            yield path, line, text
