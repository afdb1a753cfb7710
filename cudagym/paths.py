"""The user cache folder of cudagym: one home for where builds, baselines and downloaded data sets live."""

from __future__ import annotations

import os
from pathlib import Path

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
