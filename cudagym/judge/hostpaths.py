"""Host paths out of everything the agent reads: stable placeholders instead of where things are installed.

Compiler messages and tracebacks name files by absolute path (``/root/.pyenv/.../torch/include/...``), which
tells the agent the host's layout, user and tool versions. :func:`scrub` rewrites them to placeholders that
are the same on every host, ``<torch>/include/ATen/Tensor.h``, ``<cuda>/include/cuda_fp16.h``,
``<python>/...``, ``<cudagym>/...``, ``<cache>/...``, ``<home>/...``, ``<tmp>/...``; and
:func:`is_toolchain_file` tells a header of the toolchain from the agent's own files.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
import re
import sys
import sysconfig
import tempfile
from pathlib import Path

from cudagym.judge.records import EvalResult

PLACEHOLDERS = ("<workspace>", "<torch>", "<cuda>", "<python>", "<cudagym>", "<cache>", "<home>", "<tmp>",
                "<system>")


@functools.lru_cache(maxsize=1)
def _prefixes() -> tuple[tuple[str, str], ...]:
    pairs: list[tuple[str, str]] = []

    def add(path: str | os.PathLike[str] | None, placeholder: str) -> None:
        if not path:
            return
        for p in {os.path.abspath(path), os.path.realpath(path)}:
            if len(p) > 1:
                pairs.append((p.rstrip("/"), placeholder))

    spec = importlib.util.find_spec("torch")
    for loc in (spec.submodule_search_locations or []) if spec else []:
        add(loc, "<torch>")
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda", "/usr/local/nvidia"):
        if home and os.path.isdir(home):
            add(home, "<cuda>")
    for path in {sys.prefix, sys.base_prefix, sysconfig.get_paths()["purelib"], sysconfig.get_paths()["include"]}:
        add(path, "<python>")
    add(Path(__file__).resolve().parents[1], "<cudagym>")
    from cudagym.judge.build.cache import default_cache_root

    add(default_cache_root(), "<cache>")
    add(tempfile.gettempdir(), "<tmp>")
    add(os.path.expanduser("~"), "<home>")
    add("/usr", "<system>")
    # longest first, so /usr/local/cuda/include wins over a shorter prefix of it
    return tuple(sorted(set(pairs), key=lambda pair: -len(pair[0])))


def scrub(text: str, *, workspace: str | os.PathLike[str] | None = None) -> str:
    """``text`` with every known host prefix replaced by its placeholder (``workspace``: ``<workspace>``)."""
    if not text or "/" not in text:
        return text
    extra = [(os.path.abspath(workspace).rstrip("/"), "<workspace>")] if workspace else []
    for prefix, placeholder in [*extra, *_prefixes()]:
        if prefix in text:
            text = re.sub(re.escape(prefix) + r"(?=[/\s'\":),]|$)", placeholder, text)
    return text


def is_toolchain_file(path: str) -> bool:
    """Whether a (scrubbed) path is a header of the toolchain or the system, not one of the agent's files."""
    return path.startswith(("<torch>", "<cuda>", "<python>", "<cudagym>", "/usr/", "<system>"))


def scrub_result(result: EvalResult, *, workspace: str | os.PathLike[str] | None = None) -> EvalResult:
    """A verdict with host paths replaced in every text the agent reads (messages, log, checks, violations)."""
    def clean(text: str) -> str:
        return scrub(text, workspace=workspace)

    return dataclasses.replace(
        result, message=clean(result.message), log=clean(result.log),
        checks=tuple(dataclasses.replace(c, message=clean(c.message)) for c in result.checks),
        violations=tuple(dataclasses.replace(v, message=clean(v.message)) for v in result.violations),
    )
