"""Where cudagym keeps things: the user cache folder (builds, baselines, data sets); output paths checked up front."""

from __future__ import annotations

import os
from pathlib import Path

from cudagym.errors import ConfigError

CACHE_DIR_ENV = "CUDAGYM_CACHE_DIR"
MODEL_CACHE_ENV = "CUDAGYM_MODEL_CACHE"


def user_cache_dir() -> Path:
    """``$CUDAGYM_CACHE_DIR``, else ``$XDG_CACHE_HOME/cudagym``, else ``~/.cache/cudagym`` (not created here)."""
    explicit = os.environ.get(CACHE_DIR_ENV)
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "cudagym"


def model_cache_dir() -> Path:
    """The Hugging Face hub cache that judged processes may read.

    ``$CUDAGYM_MODEL_CACHE``, else ``models/`` under :func:`user_cache_dir` (where ``cudagym tasks
    fetch-models`` puts KernelBench level 4's models). A folder of its own, not the user's whole hub cache:
    candidate code can read everything in it.
    """
    explicit = os.environ.get(MODEL_CACHE_ENV)
    return Path(explicit).expanduser() if explicit else user_cache_dir() / "models"



# The folders under the cache root that a judge writes into (build entries, their locks and staging, baselines).
CACHE_WRITTEN = ("build", "build/locks", "build/tmp", "baselines")


def writable_cache_dir(root: str | os.PathLike[str]) -> Path:
    """The cache folder ``root`` a judge will write, created when missing, checked before any job.

    The folder and those of :data:`CACHE_WRITTEN` that exist must be writable: a cache left read-only (a read-only
    mount, folders another user made) fails every build and baseline write later, each as an infrastructure error.

    Raises:
        ConfigError: A folder cannot be created or written; the message names it and :data:`CACHE_DIR_ENV`.
    """
    where = Path(root).expanduser()
    hint = f"the cudagym cache folder; set {CACHE_DIR_ENV} to a writable folder"
    _make_dir(where, hint)
    for sub in CACHE_WRITTEN:
        folder = where / sub
        if folder.is_dir() and not os.access(folder, os.W_OK | os.X_OK):
            raise ConfigError(f"cannot write into the folder {folder} ({hint}): "
                              f"{'read-only file system' if _read_only_fs(folder) else 'permission denied'}")
    return where


def _read_only_fs(folder: Path) -> bool:
    """Whether ``folder`` lies on a filesystem mounted read-only."""
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


# Paths given on the command line, checked before any work so a bad one fails at once, with its option named.

def writable_dir(path: str | os.PathLike[str], option: str) -> Path:
    """The folder ``path``, created with its parents when missing.

    Raises:
        ConfigError: ``path`` is a file, or the folder cannot be created or written; the message names ``option``.
    """
    where = Path(path)
    if where.exists() and not where.is_dir():
        raise ConfigError(f"expected {option} to be a folder, but {path} is a file")
    _make_dir(where, option)
    return where


def writable_file(path: str | os.PathLike[str], option: str) -> Path:
    """The file path ``path``, its folder created when missing (the file itself is not touched).

    Raises:
        ConfigError: ``path`` is a folder, or its folder cannot be created or written; the message names ``option``.
    """
    where = Path(path)
    if where.is_dir():
        raise ConfigError(f"expected {option} to be a file, but {path} is a folder")
    _make_dir(where.parent, f"{option} {path}")
    if where.exists() and not os.access(where, os.W_OK):
        raise ConfigError(f"cannot write {path} ({option}): permission denied")
    return where


def _make_dir(where: Path, what: str) -> None:
    """Create ``where`` and its parents; a ConfigError that says why not, for ``what``."""
    try:
        where.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        blocker = next((p for p in (where, *where.parents) if p.exists() and not p.is_dir()), None)
        why = f"{blocker} is a file, not a folder" if blocker is not None else exc.strerror or str(exc)
        raise ConfigError(f"cannot create the folder {where} ({what}): {why}") from exc
    if not os.access(where, os.W_OK | os.X_OK):
        why = "read-only file system" if _read_only_fs(where) else "permission denied"
        raise ConfigError(f"cannot write into the folder {where} ({what}): {why}")
