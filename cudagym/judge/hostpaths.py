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
from collections.abc import Sequence
from pathlib import Path

from cudagym.judge.records import BuildResult, EvalResult

PLACEHOLDERS = ("<workspace>", "<torch>", "<cuda>", "<python>", "<cudagym>", "<cache>", "<home>", "<tmp>",
                "<system>")


# the variables the prefixes depend on: a judge that changes one (a test's HOME) scrubs by the new ones
_PREFIX_ENV = ("CUDA_HOME", "CUDA_PATH", "CUDAGYM_CACHE_DIR", "XDG_CACHE_HOME", "HOME")


def _prefixes() -> tuple[tuple[str, str], ...]:
    """Known host prefixes and their placeholders, longest first, as this process's environment has them now."""
    return _prefixes_for(tuple(os.environ.get(name, "") for name in _PREFIX_ENV), tempfile.gettempdir())


@functools.lru_cache(maxsize=8)
def _prefixes_for(_environment: tuple[str, ...], tmp: str) -> tuple[tuple[str, str], ...]:
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
    add(tmp, "<tmp>")
    add(os.path.expanduser("~"), "<home>")
    add("/usr", "<system>")
    # longest first, so /usr/local/cuda/include wins over a shorter prefix of it
    return tuple(sorted(set(pairs), key=lambda pair: -len(pair[0])))


# Characters that end a path in tool output: a compiler's ``file:line``, quotes, brackets, commas, whitespace.
_STOP = r"\s'\"`:;,()<>\[\]{}"


def scrub(text: str, *, workspace: str | os.PathLike[str] | None = None,
          more: Sequence[tuple[str, str]] = ()) -> str:
    """``text`` with every known host prefix replaced by its placeholder (``workspace``: ``<workspace>``).

    Each path is rewritten once, by the longest known prefix it starts with (a whole path component), so a
    prefix that recurs inside it stays as it is: ``/tmp/x/tmp/cc.s`` reads ``<tmp>/x/tmp/cc.s``.

    Args:
        text: Tool output, a message or a traceback.
        workspace: The agent's folder, shown as ``<workspace>``.
        more: Further ``(host prefix, replacement)`` pairs; an empty replacement makes the rest of the path
            relative (a build folder stripped: ``/stage/kernels/a.cu`` reads ``kernels/a.cu``).
    """
    if not text or "/" not in text:
        return text
    pairs = [(os.path.abspath(p).rstrip("/"), r) for p, r in more if p and os.path.abspath(p) != "/"]
    if workspace:
        pairs.append((os.path.abspath(workspace).rstrip("/"), "<workspace>"))
    table = dict(sorted([*_prefixes(), *pairs], key=lambda pair: len(pair[0])))  # the longer pair wins a tie

    def replace(m: re.Match[str]) -> str:
        if m["known"] is None:
            return m[0]  # a path no known prefix starts: consumed whole, so nothing inside it is replaced
        placeholder, rest = table[m["known"]], m["rest"]
        return placeholder + rest if placeholder else (rest.lstrip("/") or ".")

    return _pattern(tuple(sorted(table, key=len, reverse=True))).sub(replace, text)


@functools.lru_cache(maxsize=64)
def _pattern(prefixes: tuple[str, ...]) -> re.Pattern[str]:
    """A path: a known prefix (longest first) ending at a component boundary, with the rest; or any other, whole."""
    known = "|".join(re.escape(p) for p in prefixes) or "(?!)"
    return re.compile(rf"(?P<known>{known})(?P<rest>(?:/[^{_STOP}]*)?)(?=[{_STOP}]|$)|/[^{_STOP}]*")


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


def scrub_build_result(result: BuildResult) -> BuildResult:
    """A build verdict with host paths replaced in every text the agent reads (message, log, diagnostics).

    ``artifact_path`` is the judge's own field (the worker loads it) and stays as it is.
    """
    return dataclasses.replace(
        result, message=scrub(result.message), log=scrub(result.log),
        diagnostics=tuple(dataclasses.replace(d, file=scrub(d.file), message=scrub(d.message))
                          for d in result.diagnostics),
    )
