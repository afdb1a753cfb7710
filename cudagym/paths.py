"""The user cache folder of cudagym: one home for where builds, baselines and downloaded data sets live."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_DIR_ENV = "CUDAGYM_CACHE_DIR"


def user_cache_dir() -> Path:
    """``$CUDAGYM_CACHE_DIR``, else ``$XDG_CACHE_HOME/cudagym``, else ``~/.cache/cudagym`` (not created here)."""
    explicit = os.environ.get(CACHE_DIR_ENV)
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "cudagym"
