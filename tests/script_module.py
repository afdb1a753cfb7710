"""Load a script of the repository (``benchmarks/``, ``examples/``) as a module, for its tests."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_script(relpath: str, name: str) -> types.ModuleType:
    """The script at ``ROOT / relpath`` executed as module ``name``.

    It is in ``sys.modules`` while it executes (dataclasses look their module up there), and removed after.
    """
    spec = importlib.util.spec_from_file_location(name, ROOT / relpath)
    assert spec is not None and spec.loader is not None, relpath
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[name]
    return module
