"""Hugging Face data sets as local parquet files: download, local cache, and row reading.

Shared by the hub-backed sources (KernelBench and CUDA-Agent-Ops-6K). ``huggingface_hub`` and ``pyarrow``
are optional (the ``hf`` extra) and imported only when a hub source loads. Neither ``datasets`` nor the
network is needed once the files are in the cache or a local parquet path is given.

Caching is cache-first: a snapshot already in the cache is used without asking the network; the network is
asked only on a cache miss (or with ``refresh=True``). ``CUDAGYM_OFFLINE=1`` or ``HF_HUB_OFFLINE=1`` forbids
the network entirely.
Errors raised inside ``huggingface_hub`` or ``pyarrow`` are caught here and re-raised as
:class:`~cudagym.errors.DataUnavailableError` saying how to provide the data.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudagym.errors import DataUnavailableError, TaskFormatError

logger = logging.getLogger(__name__)

INSTALL_HINT = 'pip install "cudagym[hf]"'
OFFLINE_ENV_VARS = ("CUDAGYM_OFFLINE", "HF_HUB_OFFLINE")
_TRUE = {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class HubDataset:
    """Where one data set lives on the Hugging Face hub and how a user can provide it by hand.

    Attributes:
        repo_id: Hub repository, e.g. ``ScalingIntelligence/KernelBench``.
        allow_patterns: Files of the repository to fetch (fnmatch patterns on the repo path).
        path_env: Environment variable that points at local parquet files instead.
        path_arg: Name of the suite option (``suite_options`` key, source argument) that does the same.
        suite: Suite name, for the ``cudagym tasks`` command in messages.
        env_id: An env id of the suite, for the ``gym.make`` call in messages.
        other_ways: Further ways to provide the data, named before the parquet and hub ones (a checkout).
    """

    repo_id: str
    allow_patterns: tuple[str, ...]
    path_env: str
    path_arg: str = "path"
    suite: str = ""
    env_id: str = ""
    other_ways: tuple[str, ...] = ()

    def how_to_provide(self) -> str:
        """Every way to make this data set available, in ``gym.make``, CLI and environment terms."""
        parquet = "a local parquet file or folder of the data set: " + provide_option(
            self.env_id, self.suite, self.path_arg, self.path_env)
        ways = [*self.other_ways, parquet, self._hub_way()]
        numbered = "; ".join(f"({n}) {way}" for n, way in enumerate(ways, start=1))
        return f"provide the data in one of these ways: {numbered}"

    def _hub_way(self) -> str:
        steps = []
        missing = [name for name in ("huggingface_hub", "pyarrow") if not _installed(name)]
        if missing:
            steps.append(f"install {' and '.join(missing)} ({INSTALL_HINT})")
        offline = [name for name in OFFLINE_ENV_VARS if _is_true(os.environ.get(name))]
        if offline:
            steps.append(f"unset {' and '.join(offline)} to allow the one download")
        needs = f" ({'; '.join(steps)})" if steps else ""
        return (
            f"the Hugging Face hub copy {self.repo_id}, downloaded once into {hub_cache_dir()}{needs}; or fetched "
            f"on a machine with network access with `hf download {self.repo_id} --repo-type dataset --cache-dir "
            f"{hub_cache_dir()}` (`huggingface-cli download` on huggingface_hub < 0.34) and the folder copied here"
        )


def _installed(module: str) -> bool:
    """True when ``module`` can be imported (checked without importing it)."""
    if module in sys.modules:
        return sys.modules[module] is not None  # None: import blocked on purpose
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def provide_option(env_id: str, suite: str, option: str, env_var: str, what: str = "<path>") -> str:
    """``gym.make(..., suite_options={option: ...})``, ``cudagym tasks list --suite S --option``, or the env var."""
    options = f'suite_options={{"{option}": "{what}"}}'
    make = f'gym.make("{env_id}", {options})' if env_id else options
    cli = f"`cudagym tasks list --suite {suite} --{option} {what}`" if suite else ""
    return ", ".join(part for part in (make, cli, f"or {env_var}={what}") if part)


def cache_dir() -> Path:
    """The cache folder: ``$CUDAGYM_CACHE_DIR``, else ``$XDG_CACHE_HOME/cudagym``, else ``~/.cache/cudagym``."""
    from cudagym.paths import user_cache_dir

    return user_cache_dir()


def hub_cache_dir() -> Path:
    """Where hub snapshots are kept (``huggingface_hub``'s own layout, under :func:`cache_dir`)."""
    return cache_dir() / "hf"


def hub_offline() -> bool:
    """True when ``CUDAGYM_OFFLINE`` or ``HF_HUB_OFFLINE`` forbids network access."""
    return any(_is_true(os.environ.get(name)) for name in OFFLINE_ENV_VARS)


def _is_true(value: str | None) -> bool:
    return (value or "").strip().lower() in _TRUE


def fetch_snapshot(dataset: HubDataset, *, revision: str | None = None, refresh: bool = False) -> Path:
    """A local folder holding the data set's files, from the cache or downloaded into it.

    Args:
        dataset: Which data set.
        revision: A branch, tag or commit of the hub repository; the default branch when None.
        refresh: Ask the network even when a cached snapshot exists.

    Raises:
        DataUnavailableError: ``huggingface_hub`` is missing, or the files are neither cached nor
            downloadable (offline, no network, unknown repository); the message says how to provide them.
    """
    hub = _import_hub(dataset)
    cache = hub_cache_dir()
    if not refresh:
        try:
            cached = Path(_snapshot(hub, dataset, revision, cache, local_only=True))
        except Exception as exc:  # any failure of the cache lookup just means "not cached"
            logger.debug("no cached snapshot of %s in %s: %s", dataset.repo_id, cache, exc)
        else:
            if any(cached.rglob("*.parquet")):
                return cached
    if hub_offline():
        raise DataUnavailableError(
            f"{dataset.repo_id} is not in the cache ({cache}) and nothing is downloaded while "
            f"{' or '.join(n for n in OFFLINE_ENV_VARS if _is_true(os.environ.get(n)))} is set; "
            f"{dataset.how_to_provide()}"
        )
    logger.info("downloading %s (%s) into %s", dataset.repo_id, ", ".join(dataset.allow_patterns), cache)
    try:
        return Path(_snapshot(hub, dataset, revision, cache, local_only=False))
    except Exception as exc:  # the boundary: no stack trace from inside huggingface_hub
        raise DataUnavailableError(
            f"could not download {dataset.repo_id} from the Hugging Face hub "
            f"({type(exc).__name__}: {_one_line(exc)}); {dataset.how_to_provide()}"
        ) from None


def _snapshot(hub: Any, dataset: HubDataset, revision: str | None, cache: Path, *, local_only: bool) -> str:
    # looked up on the module at call time, so tests can monkeypatch huggingface_hub.snapshot_download
    return str(
        hub.snapshot_download(
            dataset.repo_id,
            repo_type="dataset",
            revision=revision,
            cache_dir=str(cache),
            allow_patterns=list(dataset.allow_patterns),
            local_files_only=local_only,
        )
    )


def _import_hub(dataset: HubDataset) -> Any:
    try:
        import huggingface_hub
    except ImportError:
        raise DataUnavailableError(
            f"loading {dataset.repo_id} from the hub needs huggingface_hub, which is not installed; "
            f"{dataset.how_to_provide()}"
        ) from None
    return huggingface_hub


def parquet_files(root: str | Path, *, how_to: str) -> list[Path]:
    """The parquet files at ``root`` (the file itself, or every ``*.parquet`` below a folder), sorted.

    Raises:
        DataUnavailableError: ``root`` does not exist or holds no parquet file.
    """
    root = Path(root).expanduser()
    if root.is_file():
        return [root]
    if root.is_dir():
        found = sorted(p for p in root.rglob("*.parquet") if p.is_file())
        if found:
            return found
        raise DataUnavailableError(f"expected parquet files under {root}, found none; {how_to}")
    raise DataUnavailableError(f"expected a parquet file or folder at {root}, but it does not exist; {how_to}")


def files_for_split(files: Sequence[Path], split: str) -> list[Path]:
    """The files whose path names ``split`` as a whole word (``level_1`` matches, ``level_10`` does not).

    The hub lays splits out as ``data/<split>-00000-of-00001.parquet`` (or ``<split>/0000.parquet`` in
    its converted branch); either matches. Falls back to every file when none names the split.
    """
    pattern = re.compile(rf"(?<![A-Za-z0-9]){re.escape(split)}(?![0-9])")
    named = [f for f in files if pattern.search(f.as_posix())]
    return named or list(files)


def read_rows(
    files: Iterable[Path], columns: Sequence[str], *, how_to: str, optional: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """Every row of the parquet files, in file order, as dicts of the named columns.

    Args:
        files: Parquet files to read in turn.
        columns: Columns every file must have.
        how_to: How to provide correct data, for error messages.
        optional: Columns read when present (None where absent).

    Raises:
        DataUnavailableError: ``pyarrow`` is missing, a file cannot be read, or lacks a required column.
    """
    pq = _import_pyarrow(how_to)
    rows: list[dict[str, Any]] = []
    for path in files:
        try:
            schema_names = set(pq.read_schema(path).names)
        except Exception as exc:  # the boundary: no stack trace from inside pyarrow
            raise DataUnavailableError(
                f"could not read parquet file {path} ({type(exc).__name__}: {_one_line(exc)}); {how_to}"
            ) from None
        missing = [c for c in columns if c not in schema_names]
        if missing:
            raise DataUnavailableError(
                f"{path}: expected columns {', '.join(columns)}, got {', '.join(sorted(schema_names))} "
                f"(missing {', '.join(missing)}); is this the right data set? {how_to}"
            )
        wanted = list(columns) + [c for c in optional if c in schema_names]
        try:
            table = pq.read_table(path, columns=wanted)
        except Exception as exc:  # the boundary, as above
            raise DataUnavailableError(
                f"could not read parquet file {path} ({type(exc).__name__}: {_one_line(exc)}); {how_to}"
            ) from None
        for row in table.to_pylist():
            rows.append({name: row.get(name) for name in (*columns, *optional)})
    return rows


def source_cell(value: object, *, column: str, origin: str) -> str:
    """A cell that should hold Python source, as text: a str, or UTF-8 bytes (a ``binary`` column).

    Raises:
        TaskFormatError: The cell is null, of another type, or bytes that are not UTF-8 (naming the row).
    """
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise TaskFormatError(
                f"{origin}: expected the {column} column to hold UTF-8 text (Python source), got byte "
                f"{bytes(value[exc.start:exc.start + 1])!r} at offset {exc.start}"
            ) from None
    got = "null" if value is None else type(value).__name__
    raise TaskFormatError(f"{origin}: expected the {column} column to hold Python source (text), got {got}")


def _import_pyarrow(how_to: str) -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataUnavailableError(
            f"reading parquet files needs pyarrow, which is not installed: {INSTALL_HINT}; {how_to}"
        ) from None
    return pq


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] + ("..." if len(text) > 300 else "")
