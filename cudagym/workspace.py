"""The episode's workspace: a fresh directory the agent reads and writes through tool calls, and nothing else.

Layout (``extension`` format)::

    INSTRUCTIONS.md        read-only: the task prompt
    model.py               read-only: the reference (KernelBench format)
    binding.cpp            read-only: the format's protected files
    binding_registry.h
    model_new.py           writable
    kernels/               writable: the format's editable globs (kernels/*.cu, ...)

Every path an action names is checked before use: relative, no ``..``, no symlinks anywhere on the way
(never followed, even inside), regular files only (no devices or fifos), writes only to the format's
editable paths, text only (valid UTF-8, no NUL), a size cap per file and a cap on the number of files.
The directory is removed on :meth:`Workspace.close`; nothing is ever written outside it. File permissions
mark the read-only files too, but the checks here are what enforce it (the env may run as root).

A refused operation raises :class:`FileRefused`, whose message is the observation the agent sees; the
tool layer turns it into data, so it never leaves ``step()``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import stat
import tempfile
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudagym.errors import ConfigError
from cudagym.solution import Solution, SolutionFormat, get_format

logger = logging.getLogger(__name__)

INSTRUCTIONS = "INSTRUCTIONS.md"
REFERENCE = "model.py"
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)


class FileRefused(Exception):  # noqa: N818 - reads as what happened: "FileRefused: ..."
    """An agent's file operation was refused; the message says why and what is allowed."""


@dataclass(frozen=True)
class WorkspaceLimits:
    """Caps on what an agent may store.

    Attributes:
        max_file_bytes: Largest file an agent may write, in bytes (UTF-8).
        max_files: Most writable files that may exist at once.
        max_path_chars: Longest path an action may name.
        max_depth: Deepest folder nesting below the root.
        max_read_bytes: Largest file ``read_file`` returns.
    """

    max_file_bytes: int = 256 * 1024
    max_files: int = 64
    max_path_chars: int = 200
    max_depth: int = 4
    max_read_bytes: int = 1024 * 1024

    def __post_init__(self) -> None:
        # Every cap is a count or a size; 0 or less would refuse every write (or read), and max_depth >= 1 since
        # every format's layout has kernels/ one folder down.
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"expected workspace_limits.{f.name} to be a positive int, got {value!r}")

    @classmethod
    def of(cls, spec: WorkspaceLimits | Mapping[str, Any] | None) -> WorkspaceLimits:
        """The limits ``spec`` gives: a WorkspaceLimits, a dict of some of its fields (the rest default), or None.

        Raises:
            ConfigError: Another type, an unknown key, or a value that is not a positive int.
        """
        if spec is None:
            return cls()
        if isinstance(spec, cls):
            return spec
        if not isinstance(spec, Mapping):
            raise ConfigError(f"expected workspace_limits to be a WorkspaceLimits, a dict of its fields or None, got "
                              f"{type(spec).__name__} {spec!r}")
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(str(k) for k in spec if k not in known)
        if unknown:
            raise ConfigError(f"expected workspace_limits keys among {', '.join(known)}, got unknown {unknown}")
        return cls(**spec)


@dataclass(frozen=True)
class FileEntry:
    """One entry of a listing."""

    path: str
    size_bytes: int
    is_dir: bool
    writable: bool


class Workspace:
    """A per-episode directory with safe, text-only file operations.

    Create one with :meth:`create`; ``root`` is where it lives. Picklable: a copy gets its own fresh
    directory holding the same files, so two envs never share (or delete) one directory.
    """

    def __init__(self, root: Path, fmt: SolutionFormat, limits: WorkspaceLimits, readonly: frozenset[str]) -> None:
        self.root = root
        self.format = fmt
        self.limits = limits
        self.readonly = readonly
        self._real_root = os.path.realpath(root)
        self.closed = False
        self._finalizer: weakref.finalize[Any, Any] | None = None

    # -- lifecycle -------------------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        *,
        instructions: str,
        reference: str,
        fmt: SolutionFormat | str | None = None,
        limits: WorkspaceLimits | None = None,
        parent: str | os.PathLike[str] | None = None,
        files: Mapping[str, str] | None = None,
    ) -> Workspace:
        """A fresh directory with the instructions, the reference and the format's protected files.

        Args:
            instructions: Text of ``INSTRUCTIONS.md`` (the task prompt).
            reference: Source of ``model.py``.
            fmt: Solution format (name or record); the default format when None.
            limits: Caps; the defaults when None.
            parent: Where to make the directory; the system temp dir when None.
            files: Writable files to start with (used when unpickling).
        """
        fmt = get_format(fmt)
        protected = fmt.template_files()
        readonly = frozenset({INSTRUCTIONS, REFERENCE, *protected})
        root = Path(tempfile.mkdtemp(prefix="cudagym-ws-", dir=parent))
        ws = cls(root, fmt, limits or WorkspaceLimits(), readonly)
        # removed when garbage-collected or at interpreter exit, if nobody called close()
        ws._finalizer = weakref.finalize(ws, _remove_leftover, root, os.getpid())
        for rel, text in {INSTRUCTIONS: instructions, REFERENCE: reference, **protected}.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            path.chmod(0o444)
        for folder in sorted({p.split("/")[0] for p in fmt.editable if "/" in p}):
            (root / folder).mkdir(exist_ok=True)
        for rel, text in (files or {}).items():
            ws.write_text(rel, text)
        logger.debug("workspace %s created (%s format)", root, fmt.name)
        return ws

    def close(self) -> None:
        """Remove the directory; safe to call twice."""
        if self.closed:
            return
        self.closed = True
        if self._finalizer is not None:
            self._finalizer.detach()
        try:
            shutil.rmtree(self.root)
        except FileNotFoundError:
            pass
        except OSError as exc:  # keep close() quiet; a leftover temp dir is worth a warning, not a crash
            logger.warning("could not remove workspace %s: %s", self.root, exc)

    def __getstate__(self) -> dict[str, Any]:
        files = {} if self.closed else {e.path: self.read_text(e.path) for e in self._walk("") if e.writable}
        instructions = "" if self.closed else (self.root / INSTRUCTIONS).read_text(encoding="utf-8")
        reference = "" if self.closed else (self.root / REFERENCE).read_text(encoding="utf-8")
        return {"format": self.format.name, "limits": self.limits, "files": files, "closed": self.closed,
                "instructions": instructions, "reference": reference, "parent": str(self.root.parent)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        if state["closed"]:  # a closed workspace stays closed: no directory to recreate
            self.root = Path(state["parent"])
            self.format = get_format(state["format"])
            self.limits = state["limits"]
            self.readonly = frozenset()
            self._real_root = ""
            self.closed = True
            self._finalizer = None
            return
        parent = state["parent"] if os.path.isdir(state["parent"]) else None
        fresh = Workspace.create(
            instructions=state["instructions"], reference=state["reference"], fmt=state["format"],
            limits=state["limits"], parent=parent, files=state["files"],
        )
        if fresh._finalizer is not None:
            fresh._finalizer.detach()  # the directory now belongs to self: tie its cleanup to self
        self.__dict__.update(fresh.__dict__)
        self._finalizer = weakref.finalize(self, _remove_leftover, self.root, os.getpid())

    # -- file operations (each raises FileRefused with the agent-facing reason) ------------------------

    def read_text(self, path: str) -> str:
        """The text of a file of the workspace."""
        rel = self._relpath(path)
        if not rel:
            raise FileRefused("expected a file path, got the workspace root; use list_files to see the files")
        target = self._locate(rel, want="file")
        fd = os.open(target, _READ_FLAGS)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise FileRefused(f"{rel} is not a regular file")
            with os.fdopen(fd, "rb", closefd=False) as fh:
                data = fh.read(self.limits.max_read_bytes + 1)
        finally:
            os.close(fd)
        if len(data) > self.limits.max_read_bytes:
            raise FileRefused(f"{rel} is larger than {self.limits.max_read_bytes} bytes; it cannot be read")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise FileRefused(f"{rel} is not UTF-8 text") from None

    def write_text(self, path: str, content: str) -> tuple[int, bool]:
        """Create or overwrite a writable file; returns (bytes written, whether it was created)."""
        rel = self._relpath(path)
        self._check_writable(rel)
        data = self._encode(rel, content)
        target = self._locate(rel, want="file", must_exist=False)
        created = not os.path.lexists(target)
        if created and self.count_writable_files() >= self.limits.max_files:
            raise FileRefused(
                f"the workspace already holds {self.limits.max_files} writable files (the cap); "
                "overwrite or reuse an existing file"
            )
        self._make_parents(rel)
        # Overwrite in place, then cut to length: ext4 (auto_da_alloc) forces block allocation when a
        # file is truncated to zero and rewritten, which made every write_file cost milliseconds.
        fd = os.open(target, _WRITE_FLAGS, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.ftruncate(fd, len(data))
        finally:
            os.close(fd)
        return len(data), created

    def edit(self, path: str, old: str, new: str, replace_all: bool = False) -> tuple[int, tuple[int, ...]]:
        """Replace exact text in a writable file; returns (replacements, 1-based lines where ``old`` began)."""
        rel = self._relpath(path)
        self._check_writable(rel)
        if old == "":
            raise FileRefused("old must not be empty; to create or replace a whole file use write_file")
        if old == new:
            raise FileRefused("old and new are the same; nothing to change")
        text = self.read_text(rel)
        lines = _match_lines(text, old)
        if not lines:
            raise FileRefused(
                f"old text not found in {rel}; it must match exactly (whitespace and indentation included); "
                "read_file the file and copy the text"
            )
        if len(lines) > 1 and not replace_all:
            where = ", ".join(str(n) for n in lines[:10])
            raise FileRefused(
                f"old text occurs {len(lines)} times in {rel} (lines {where}); include more surrounding text "
                "to make it unique, or pass replace_all=true"
            )
        # The size the edit would give, before making it: replace_all of a short text by a long one in a full
        # file would otherwise build a string of up to max_file_bytes times the action's length in memory.
        size = len(text.encode("utf-8")) + len(lines) * (_utf8_len(new) - _utf8_len(old))
        if size > self.limits.max_file_bytes:
            raise FileRefused(
                f"{rel}: expected at most {self.limits.max_file_bytes} bytes, got {size} after the edit; split or "
                "shorten it"
            )
        updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
        self.write_text(rel, updated)
        return len(lines), lines

    def listing(self, path: str = "") -> list[FileEntry]:
        """Entries under a folder (the root by default), depth first, sorted."""
        rel = self._relpath(path)
        if rel:
            self._locate(rel, want="dir")
        return list(self._walk(rel))

    def snapshot(self) -> Solution:
        """The agent's files as the judge receives them (editable paths only).

        The same files and text as :meth:`Solution.from_dir` on the root (symlinks skipped, undecodable
        bytes replaced, newlines read as text), from the workspace's own walk: a third of the time.
        """
        files: dict[str, str] = {}
        for entry in self._walk(""):
            if not entry.is_dir and self.format.is_editable(entry.path):
                with open(os.path.join(self.root, entry.path), encoding="utf-8", errors="replace") as fh:
                    files[entry.path] = fh.read()
        return Solution(format=self.format.name, files=files)

    def count_writable_files(self) -> int:
        """Writable files that exist now."""
        return sum(1 for e in self._walk("") if e.writable and not e.is_dir)

    def normalize(self, path: str) -> str:
        """The checked, normalised relative form of a path an agent named (``./kernels//a.cu`` -> ``kernels/a.cu``)."""
        return self._relpath(path)

    def is_writable(self, rel: str) -> bool:
        """True when the agent may write this (normalised, relative) path."""
        return rel not in self.readonly and self.format.is_editable(rel)

    # -- path checks ----------------------------------------------------------------------------------

    def _relpath(self, path: str) -> str:
        if self.closed:
            raise FileRefused("the workspace is closed; call reset() to start an episode")
        if not isinstance(path, str):
            raise FileRefused(f"expected the path to be a string, got {type(path).__name__}")
        if len(path) > self.limits.max_path_chars:
            raise FileRefused(f"expected a path of at most {self.limits.max_path_chars} characters")
        if any(ord(c) < 32 or c == "\\" for c in path):
            raise FileRefused("paths may not contain control characters or backslashes; use / between folders")
        try:
            path.encode("utf-8")
        except UnicodeEncodeError:
            raise FileRefused("the path is not valid Unicode text") from None
        text = path.strip()
        if text.startswith(("/", "~")) or (len(text) > 1 and text[1] == ":"):
            raise FileRefused(
                f"absolute paths are not allowed, got {text[:60]!r}; use a path relative to the workspace "
                "root such as kernels/relu.cu"
            )
        parts = [p for p in text.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise FileRefused(f"'..' is not allowed in paths, got {text[:60]!r}; stay inside the workspace")
        if len(parts) > self.limits.max_depth + 1:
            raise FileRefused(f"expected at most {self.limits.max_depth} nested folders")
        return "/".join(parts)

    def _locate(self, rel: str, *, want: str, must_exist: bool = True) -> str:
        # Walk from the root one component at a time with lstat: a symlink anywhere on the way is refused,
        # so nothing is ever followed out of (or inside) the workspace.
        current = str(self.root)
        parts = rel.split("/") if rel else []
        for i, part in enumerate(parts):
            current = os.path.join(current, part)
            last = i == len(parts) - 1
            try:
                mode = os.lstat(current).st_mode
            except FileNotFoundError:
                if must_exist:
                    raise FileRefused(f"{rel} does not exist; use list_files to see the files") from None
                break
            except OSError as exc:
                raise FileRefused(f"{rel} cannot be accessed ({exc.strerror})") from None
            if stat.S_ISLNK(mode):
                raise FileRefused(f"{'/'.join(parts[: i + 1])} is a symlink; symlinks are not followed")
            if not last and not stat.S_ISDIR(mode):
                raise FileRefused(f"{'/'.join(parts[: i + 1])} is not a folder")
            if last and want == "file" and not stat.S_ISREG(mode):
                kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file"
                raise FileRefused(f"{rel} is {kind}")
            if last and want == "dir" and not stat.S_ISDIR(mode):
                raise FileRefused(f"{rel} is not a folder")
        real = os.path.realpath(current)
        if real != self._real_root and not real.startswith(self._real_root + os.sep):
            raise FileRefused(f"{rel} resolves outside the workspace")
        return current

    def _check_writable(self, rel: str) -> None:
        if not rel:
            raise FileRefused("expected a file path, got the workspace root")
        if rel in self.readonly:
            raise FileRefused(f"{rel} is read-only; writable files: {', '.join(self.format.editable)}")
        if not self.format.is_editable(rel):
            raise FileRefused(
                f"{rel} is not writable in the {self.format.name} format; writable paths match "
                f"{', '.join(self.format.editable)}"
            )

    def _encode(self, rel: str, content: str) -> bytes:
        if "\x00" in content:
            raise FileRefused(f"{rel}: files must be text; the content holds NUL bytes")
        try:
            data = content.encode("utf-8")
        except UnicodeEncodeError:
            raise FileRefused(f"{rel}: the content is not valid Unicode text (lone surrogates)") from None
        if len(data) > self.limits.max_file_bytes:
            raise FileRefused(
                f"{rel}: expected at most {self.limits.max_file_bytes} bytes, got {len(data)}; split or shorten it"
            )
        return data

    def _make_parents(self, rel: str) -> None:
        current = str(self.root)
        for part in rel.split("/")[:-1]:
            current = os.path.join(current, part)
            if not os.path.lexists(current):
                os.mkdir(current, 0o755)

    def _walk(self, rel: str) -> Iterator[FileEntry]:
        base = os.path.join(str(self.root), rel) if rel else str(self.root)
        try:
            entries = sorted(os.scandir(base), key=lambda e: e.name)
        except OSError:
            return
        for entry in entries:
            sub = f"{rel}/{entry.name}" if rel else entry.name
            if entry.is_symlink():
                continue
            if entry.is_dir(follow_symlinks=False):
                yield FileEntry(sub, 0, True, False)
                yield from self._walk(sub)
            elif entry.is_file(follow_symlinks=False):
                size = entry.stat(follow_symlinks=False).st_size
                yield FileEntry(sub, size, False, self.is_writable(sub))


def _match_lines(text: str, needle: str) -> tuple[int, ...]:
    """1-based lines where each non-overlapping occurrence of ``needle`` begins (one pass over ``text``)."""
    lines: list[int] = []
    line, counted = 1, 0
    start = text.find(needle)
    while start != -1:
        line += text.count("\n", counted, start)  # newlines since the previous match only: linear, not quadratic
        counted = start
        lines.append(line)
        start = text.find(needle, start + len(needle))
    return tuple(lines)


def _utf8_len(text: str) -> int:
    """Bytes of ``text`` in UTF-8 (lone surrogates counted as 3, as the write refuses them anyway)."""
    return len(text.encode("utf-8", errors="surrogatepass"))


def _remove_leftover(root: Path, owner_pid: int) -> None:
    """Remove a workspace its env never closed (only in the process that made it: never in a forked child)."""
    if os.getpid() == owner_pid:
        shutil.rmtree(root, ignore_errors=True)
