"""A content-addressed cache of build artifacts on disk, shared by processes through file locks.

Every entry is a directory named by a sha256 key of everything that determines its contents (sources,
flags, target arch, compiler and torch versions, protected files). An entry is written in a private
temporary directory and renamed into place, so readers see a whole entry or none; a per-key file lock
makes concurrent builders of the same key wait for the first instead of compiling twice. Each entry lists
its files, sizes and sha256 (``.contents.json``); an entry with a file missing, truncated or changed since (a
cleaner of temporary files, a partial copy of the cache, a write by anything but the judge) counts as a
miss and is removed, so it is rebuilt rather than handed to a loader. Only the judge's own process writes
here: compilers and candidate code run confined, with no view of the cache
(:mod:`cudagym.judge.confine`); a compiler writes into its unit's staging folder, which the judge commits.

Layout under the root (``CUDAGYM_CACHE_DIR``, else ``$XDG_CACHE_HOME/cudagym``, else
``~/.cache/cudagym``)::

    build/<kind>/<key[:2]>/<key>/...   entries (kind: obj, pch, ext, cubin, inline, ...)
    build/locks/<key>.lock             per-key locks
    build/tmp/                         entries being written (same filesystem, so rename is atomic)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import stat
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from cudagym.errors import ConfigError

logger = logging.getLogger(__name__)

CACHE_DIR_ENV = "CUDAGYM_CACHE_DIR"
CONTENTS = ".contents.json"  # {relative path: [size in bytes, sha256]} of every file of an entry, at commit
HASHED_BYTES = 64 << 20  # files up to this size are checked by content at lookup; larger ones (a torch PCH) by size


def default_cache_root() -> Path:
    """The user cache directory of cudagym (``CUDAGYM_CACHE_DIR``, ``$XDG_CACHE_HOME/cudagym``, ``~/.cache``)."""
    from cudagym.paths import user_cache_dir

    return user_cache_dir()


def content_key(*parts: Any) -> str:
    """sha256 hex of a canonical JSON encoding of ``parts`` (strings, numbers, lists, dicts)."""
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8", errors="surrogateescape")).hexdigest()


@dataclass(frozen=True)
class CacheStats:
    """Hit and miss counts of one cache object since it was created (or last reset)."""

    hits: int = 0
    misses: int = 0


class BuildCache:
    """Content-addressed build artifacts under one root directory.

    Args:
        root: Cache root; ``None`` uses :func:`default_cache_root`. Entries go under ``root/build``.
    """

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = (Path(root).expanduser() if root is not None else default_cache_root()) / "build"
        self._counts: dict[str, list[int]] = {}
        self._counts_lock = threading.Lock()
        try:
            for sub in ("locks", "tmp"):
                (self.root / sub).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"expected a writable build cache directory, got {self.root} ({exc}); "
                f"set {CACHE_DIR_ENV} to a writable path"
            ) from None

    def entry_dir(self, kind: str, key: str) -> Path:
        """Where the entry ``kind``/``key`` lives (whether or not it exists)."""
        return self.root / kind / key[:2] / key

    def lookup(self, kind: str, key: str) -> Path | None:
        """The entry's directory if it is complete, else ``None``; counts a hit or a miss for ``kind``."""
        path = self.entry_dir(kind, key)
        found = path.is_dir() and self._intact(path)
        self._count(kind, hit=found)
        if found:
            with contextlib.suppress(OSError):
                os.utime(path)  # recency for prune()
        return path if found else None

    @contextlib.contextmanager
    def lock(self, key: str, timeout_s: float) -> Iterator[bool]:
        """Hold the key's lock (across processes) for up to ``timeout_s``; yields False if it timed out."""
        lock = FileLock(str(self.root / "locks" / f"{key}.lock"))
        try:
            lock.acquire(timeout=max(timeout_s, 0.0))
        except Timeout:
            yield False
            return
        try:
            yield True
        finally:
            lock.release()

    @contextlib.contextmanager
    def staging(self, prefix: str = "stage-") -> Iterator[Path]:
        """A private scratch directory on the cache's filesystem, removed afterwards."""
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=self.root / "tmp"))
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def commit(self, kind: str, key: str, staged: Path) -> Path:
        """Move a fully written directory into place as entry ``kind``/``key`` (atomic rename).

        If the entry appeared meanwhile (another process won), the staged copy is discarded and the
        existing entry is returned: both hold the same content by construction. What a tool wrote there is
        made plain data first (:func:`_plain_files_only`): an entry holds folders and regular files only.
        """
        final = self.entry_dir(kind, key)
        final.parent.mkdir(parents=True, exist_ok=True)
        _plain_files_only(staged)
        listing = {p.relative_to(staged).as_posix(): [p.stat().st_size, _sha256(p)]
                   for p in sorted(staged.rglob("*")) if p.is_file() and not p.is_symlink()}
        (staged / CONTENTS).write_text(json.dumps(listing, sort_keys=True))
        try:
            os.rename(staged, final)
        except OSError:
            if not final.is_dir():
                raise
            shutil.rmtree(staged, ignore_errors=True)
        return final

    def stats(self, kind: str) -> CacheStats:
        """Hits and misses of :meth:`lookup` for one kind of entry."""
        with self._counts_lock:
            hits, misses = self._counts.get(kind, [0, 0])
        return CacheStats(hits=hits, misses=misses)

    def reset_stats(self) -> None:
        """Zero every hit and miss counter."""
        with self._counts_lock:
            self._counts.clear()

    def size_bytes(self) -> int:
        """Total size of all entries."""
        return sum(p.stat().st_size for p in self.root.rglob("*") if p.is_file() and not p.is_symlink())

    def prune(self, max_bytes: int) -> int:
        """Remove least recently used entries until the cache holds at most ``max_bytes``; returns bytes freed."""
        entries = []
        for kind_dir in self.root.iterdir():
            if kind_dir.name in ("locks", "tmp") or not kind_dir.is_dir():
                continue
            for entry in kind_dir.glob("*/*"):
                size = sum(p.stat().st_size for p in entry.rglob("*") if p.is_file())
                entries.append((entry.stat().st_mtime, size, entry))
        total = sum(size for _, size, _ in entries)
        freed = 0
        for _, size, entry in sorted(entries, key=lambda e: e[0]):
            if total - freed <= max_bytes:
                break
            shutil.rmtree(entry, ignore_errors=True)
            freed += size
        return freed

    def _intact(self, path: Path) -> bool:
        """Whether the entry still matches its listing (:func:`verify_entry`); else remove it."""
        problem = verify_entry(path, hash_limit=HASHED_BYTES)
        if not problem:
            return True
        logger.warning("build cache entry %s fails its check (%s): removing it, it will be rebuilt", path, problem)
        with contextlib.suppress(OSError):
            aside = Path(tempfile.mkdtemp(prefix="broken-", dir=self.root / "tmp"))
            os.rename(path, aside / "entry")
            shutil.rmtree(aside, ignore_errors=True)
        return False

    def _count(self, kind: str, *, hit: bool) -> None:
        with self._counts_lock:
            counts = self._counts.setdefault(kind, [0, 0])
            counts[0 if hit else 1] += 1


def verify_entry(path: Path, *, hash_limit: int = 1 << 62) -> str:
    """What is wrong with a cache entry against the listing written at commit, or ``""``.

    Every listed file must exist, a regular file (not a link), with its size and, up to ``hash_limit`` bytes,
    its sha256 (an entry with the older size-only listing is rebuilt). Files the judge adds after the commit
    (the PCH's header) are not listed; nothing unlisted is ever handed to a job (:mod:`.artifact`).
    """
    try:
        listing = json.loads((path / CONTENTS).read_text())
        for rel, recorded in listing.items():
            if not isinstance(recorded, list):
                return "it predates content hashes"
            size, digest = recorded
            file = path / rel
            if not stat.S_ISREG(file.lstat().st_mode):
                return f"{rel} is not a regular file"
            if file.stat().st_size != size:
                return f"{rel} changed size"
            if size <= hash_limit and _sha256(file) != digest:
                return f"{rel} changed content"
    except FileNotFoundError as exc:
        return f"{Path(exc.filename or '?').name} is missing"
    except (OSError, ValueError, AttributeError, TypeError) as exc:
        return f"its listing is unreadable ({exc})"
    return ""


def _plain_files_only(staged: Path) -> None:
    """Make a staged entry plain data: only folders and regular files, each file its own, plain modes.

    Links, fifos, sockets and devices are removed, hard links broken into files of their own, and modes reduced
    to ``0o644``/``0o755`` (no setuid, setgid or sticky bits, no group or other write), links never followed.

    A tool that wrote its output there runs confined, but the entry outlives it and is copied into jobs: a
    link would be followed at that copy, in the judge's process (a host file, ``/proc/self/environ``, handed
    to the job), and a fifo made that copy fail (the worker's ``infra_error``: reward 0, not the candidate's -1).
    """
    for folder, dirs, files in os.walk(staged):
        for name in [*dirs, *files]:
            path = Path(folder) / name
            info = path.lstat()
            if stat.S_ISDIR(info.st_mode):
                os.chmod(path, 0o755)
            elif not stat.S_ISREG(info.st_mode):
                logger.warning("build cache: dropping %s from a staged entry (not a regular file)", name)
                path.unlink()
            else:
                if info.st_nlink > 1:  # another name could change it after the entry was checked
                    copy = path.with_name(f".{name}.unlinked")
                    shutil.copyfile(path, copy, follow_symlinks=False)
                    os.replace(copy, path)
                os.chmod(path, 0o755 if info.st_mode & 0o111 else 0o644)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_atomic(path: Path, data: bytes) -> None:
    """Write a file so readers see the old content or the new, never half (temp file + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o644)  # mkstemp makes it owner-only; cache files are plain readable data
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
