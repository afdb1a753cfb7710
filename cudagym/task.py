"""The task record: one PyTorch reference module in KernelBench format, frozen and content-hashed.

A task file defines, at module level, ``class Model(nn.Module)``, ``def get_inputs()`` and
``def get_init_inputs()``. It is parsed with :mod:`ast` and never executed here: the env process must stay
free of task and candidate code (the judge runs them in its own worker processes).
"""

from __future__ import annotations

import ast
import hashlib
import io
import os
import tokenize
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from cudagym import pyparse
from cudagym.errors import TaskFormatError

REQUIRED_NAMES = ("Model", "get_inputs", "get_init_inputs")

# torch namespaces whose calls count as operators in a task's ops list
_OP_NAMESPACES = {"nn", "F", "torch", "functional"}


@dataclass(frozen=True)
class Task:
    """One kernel-optimisation problem.

    Attributes:
        id: Stable id, ``<suite prefix>/<name>``, e.g. ``L1/19_ReLU`` or ``bundled/L2/03_gemm_bias_gelu``.
        suite: Suite name, e.g. ``kernelbench``, ``ops6k``, ``bundled``.
        level: Difficulty level (KernelBench's 1-4; bundled 1-3; Ops-6K: number of composed ops).
        name: Human-readable name, e.g. ``19_ReLU``.
        source: The reference module's Python source (KernelBench format).
        content_hash: sha256 of the source's syntax tree; comments and whitespace do not change it.
        metadata: Extra facts (``ops``: operator names; ``origin``: where the task came from; ...).
    """

    id: str
    suite: str
    level: int
    name: str
    source: str = field(repr=False)
    content_hash: str
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        # freeze the metadata too: a Task is shared between envs and must not change under them
        object.__setattr__(self, "metadata", MappingProxyType(dict(self.metadata)))

    def __reduce__(self) -> tuple[Any, ...]:
        # the read-only metadata view does not pickle; rebuild from a plain dict (workers receive Tasks)
        return (Task, (self.id, self.suite, self.level, self.name, self.source, self.content_hash, dict(self.metadata)))

    @property
    def short_hash(self) -> str:
        """First 12 hex digits of the content hash."""
        return self.content_hash[:12]

    @property
    def ops(self) -> tuple[str, ...]:
        """Operator names the reference composes (from the data set, or read off the source)."""
        return tuple(self.metadata.get("ops", ()))

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (the source included)."""
        return {
            "id": self.id,
            "suite": self.suite,
            "level": self.level,
            "name": self.name,
            "content_hash": self.content_hash,
            "metadata": dict(self.metadata),
            "source": self.source,
        }


def make_task(
    source: str,
    *,
    id: str,
    suite: str,
    level: int,
    name: str,
    origin: str,
    metadata: Mapping[str, Any] | None = None,
) -> Task:
    """Parse and check a KernelBench-format source, and build its :class:`Task`.

    Args:
        source: Python source of the task file.
        id: Stable task id.
        suite: Suite name.
        level: Level number.
        name: Task name.
        origin: Where the source came from (a path or ``repo:split:row``); named in errors.
        metadata: Extra metadata; ``ops`` is filled from the source when absent.

    Raises:
        TaskFormatError: The source does not parse, or lacks ``Model``, ``get_inputs`` or
            ``get_init_inputs`` at module level; or ``id``, ``suite``, ``name``, ``level`` or ``metadata``
            is not of its type (an id must be one line of printable text).
    """
    _check_identity(id=id, suite=suite, name=name, level=level, origin=origin)
    if metadata is not None and not isinstance(metadata, Mapping):
        raise TaskFormatError(f"{origin}: expected metadata to be a mapping (dict) or None, got "
                              f"{type(metadata).__name__}")
    tree = parse_task_source(source, origin=origin)
    meta = dict(metadata or {})
    if isinstance(meta.get("ops"), str):  # one op name, not its letters
        meta["ops"] = [meta["ops"]]
    meta.setdefault("ops", list(find_ops(tree)))
    meta.setdefault("origin", origin)
    return Task(
        id=id, suite=suite, level=level, name=name, source=source,
        content_hash=content_hash_of_tree(tree), metadata=meta,
    )


def _check_identity(*, id: object, suite: object, name: object, level: object, origin: str) -> None:
    """Raise TaskFormatError unless the id, suite and name are one-line strings and the level an int >= 0."""
    for label, value in (("id", id), ("suite", suite), ("name", name)):
        if not isinstance(value, str) or not value.strip():
            raise TaskFormatError(f"{origin}: expected the task {label} to be a non-empty str, got "
                                  f"{type(value).__name__} {value!r:.80}")
        if not value.isprintable():
            raise TaskFormatError(f"{origin}: expected the task {label} to be one line of printable text, got "
                                  f"{value!r:.80}")
    if isinstance(level, bool) or not isinstance(level, int) or level < 0:
        raise TaskFormatError(f"{origin}: expected the task level to be an int >= 0, got "
                              f"{type(level).__name__} {level!r:.80}")


def read_task_file(path: str | os.PathLike[str]) -> str:
    """The text of a task file, decoded as Python decodes a module (UTF-8, a BOM or a ``coding:`` line).

    Raises:
        TaskFormatError: The file's bytes are not text in its encoding (naming the file and the byte).
        OSError: The file cannot be read.
    """
    data = Path(path).read_bytes()
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        if "invalid or missing encoding" not in str(exc.msg):  # an unknown coding: name, or one contradicting a BOM
            raise TaskFormatError(f"{path}: not valid Python ({exc.msg})") from None
        encoding = "utf-8"  # no coding: line and a non-UTF-8 byte in the first two lines: named below
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        byte = data[exc.start:exc.start + 1]
        raise TaskFormatError(f"{path}: expected {exc.encoding} text (Python source), got byte {byte!r} at offset "
                              f"{exc.start}; save the file as UTF-8") from None
    # what Python compiles: the BOM is not part of the source
    return text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


def parse_task_source(source: str, *, origin: str) -> ast.Module:
    """Parse a task file without executing it and check its KernelBench shape.

    Raises:
        TaskFormatError: Naming ``origin`` and what is wrong or missing.
    """
    if not isinstance(source, str):
        raise TaskFormatError(f"{origin}: expected KernelBench-format Python source (str), got "
                              f"{type(source).__name__}{'; decode it first' if isinstance(source, bytes) else ''}")
    if not source.strip():
        raise TaskFormatError(f"{origin}: expected KernelBench-format Python source, got an empty file")
    try:
        source.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise TaskFormatError(f"{origin}: expected text, got an undecodable character {source[exc.start]!r} at "
                              f"offset {exc.start} (a file read with errors='surrogateescape'?)") from None
    try:
        tree = pyparse.parse(source, filename=origin)
    except SyntaxError as exc:
        raise TaskFormatError(f"{origin}: not valid Python (line {exc.lineno}: {exc.msg})") from None
    except (RecursionError, MemoryError) as exc:
        raise TaskFormatError(f"{origin}: an expression is nested too deeply to parse ({type(exc).__name__})") from None
    defined = _module_level_names(tree)
    missing = [n for n in REQUIRED_NAMES if n not in defined]
    if missing:
        raise TaskFormatError(
            f"{origin}: expected module-level {', '.join(REQUIRED_NAMES)} (KernelBench format); "
            f"missing {', '.join(missing)}"
        )
    if defined["Model"] != "class":
        raise TaskFormatError(f"{origin}: expected `Model` to be a class, got a {defined['Model']}")
    for fn in ("get_inputs", "get_init_inputs"):
        if defined[fn] != "function":
            raise TaskFormatError(f"{origin}: expected `{fn}` to be a function, got a {defined[fn]}")
    model = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model")
    if not any(isinstance(n, ast.FunctionDef) and n.name == "forward" for n in model.body):
        raise TaskFormatError(f"{origin}: expected `Model` to define `forward`")
    return tree


def content_hash(source: str) -> str:
    """sha256 of the source's syntax tree: equal for sources that differ only in comments and layout."""
    return content_hash_of_tree(pyparse.parse(source))


def content_hash_of_tree(tree: ast.AST) -> str:
    """sha256 of a canonical serialisation of ``tree`` (stable across Python versions)."""
    digest = hashlib.sha256()
    for token in _canonical_tokens(tree):
        digest.update(token.encode("utf-8"))
        digest.update(b"\x00")
    return digest.hexdigest()


def _canonical_tokens(root: Any) -> Iterator[str]:
    # ast.dump changes between Python versions (3.12 added type_params, 3.13 hides empty fields), and
    # the baseline cache is keyed by this hash across hosts; so write our own: node type, then each field
    # that is set, skipping None and empty lists, without positions. Walked with a stack, not recursion:
    # a long chain such as ``1 + 1 + ... + 1`` is valid Python deeper than the interpreter's recursion limit.
    stack: list[Any] = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, _Token):
            yield node.text
        elif isinstance(node, ast.AST):
            parts: list[Any] = [_Token(type(node).__name__)]
            for name, value in ast.iter_fields(node):
                if value is None or value == [] or name == "type_comment":
                    continue
                parts += [_Token(f".{name}"), value]
            parts.append(_Token(")"))
            stack.extend(reversed(parts))
        elif isinstance(node, list):
            stack.extend(reversed([_Token("["), *node, _Token("]")]))
        else:
            yield f"{type(node).__name__}:{node!r}"


@dataclass(frozen=True)
class _Token:
    """A token already written, queued among the nodes still to walk."""

    text: str


def _module_level_names(tree: ast.Module) -> dict[str, str]:
    names: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names[node.name] = "class"
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = "function"
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    names[target.id] = "variable"
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = "import"
    return names


def find_ops(tree: ast.Module) -> tuple[str, ...]:
    """Operator names called inside ``Model`` (``nn.Conv2d``, ``torch.matmul``, ``F.relu``...), in order."""
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    if model is None:
        return ()
    seen: dict[str, None] = {}
    for node in ast.walk(model):
        if isinstance(node, ast.Call):
            name = dotted_name(node.func)
            if name and name.split(".")[0] in _OP_NAMESPACES:
                seen.setdefault(name.split(".")[-1], None)
    return tuple(seen)


def dotted_name(node: ast.AST) -> str:
    """``a.b.c`` for a chain of attributes on a name; ``""`` for anything else."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""
