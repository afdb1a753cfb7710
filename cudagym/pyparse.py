"""Thread-safe wrappers around ``ast.parse`` and ``compile`` of a syntax tree."""

from __future__ import annotations

import ast
import threading
from types import CodeType

# CPython gh-106905: the AST converter's recursion-depth counter is shared by the whole interpreter, so two
# threads converting trees at once (ast.parse, or compile() of a tree) can corrupt it when the GIL changes
# hands mid-conversion (e.g. a finalizer runs during GC) and raise "SystemError: AST constructor recursion
# depth mismatch". Fixed in later 3.12 and 3.11 releases; until then every conversion in the process must be
# serialised, hence one process-wide lock rather than one per caller (re-entrant: a finalizer that parses while
# its thread holds the lock must not deadlock).
_AST_LOCK = threading.RLock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """The syntax tree of ``source``, as ``ast.parse`` returns it (its exceptions propagate unchanged)."""
    with _AST_LOCK:
        return ast.parse(source, filename=filename)


def compile_tree(tree: ast.Module, filename: str, mode: str = "exec", *, dont_inherit: bool = True) -> CodeType:
    """The code object of ``tree``, as the built-in ``compile`` returns it (its exceptions propagate unchanged)."""
    with _AST_LOCK:
        code: CodeType = compile(tree, filename, mode, dont_inherit=dont_inherit)
        return code
