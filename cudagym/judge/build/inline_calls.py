"""The ``inline`` format's recorded ``load_inline`` calls: their canonical form and the rules they must pass.

The recorder (:mod:`cudagym.judge.build.inline_record`) runs candidate code, so the file it leaves is the
candidate's word, whatever shape it has: a model_new.py can write its own record and exit. The judge reads
at most :data:`MAX_RECORD_BYTES` of it, as a regular file, and accepts only this exact shape; anything else
is the candidate's failure (``INVALID``, the rule named), never a judge error:

- ``{"calls": [call, ...], "error": str}``: at most :data:`MAX_CALLS` calls, ``error`` (model_new.py's
  traceback) at most :data:`MAX_ERROR_CHARS` characters;
- a call has exactly the keys :func:`normalize_call` writes: ``name`` a Python identifier of at most
  :data:`MAX_NAME_CHARS` characters (torch names the extension module after it, and the judge a folder);
  ``cpp_sources``/``cuda_sources`` lists of strings, at most :data:`MAX_SOURCE_CHARS` in all calls together;
  ``functions`` ``null`` or a map of C++ names (``f``, ``ns::f``) to docstrings; the ``extra_*`` flag lists
  of strings (checked again by :mod:`cudagym.judge.build.flags`); three booleans; ``unsupported`` ``""`` or
  ``"sycl_sources"``.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudagym.judge.build.cache import content_key

MAX_RECORD_BYTES = 16 << 20
MAX_CALLS = 64
MAX_NAME_CHARS = 100
MAX_SOURCE_CHARS = 4 << 20  # all calls' sources together
MAX_FUNCTIONS = 512
MAX_DOC_CHARS = 4096
MAX_FLAGS = 256  # per list
MAX_FLAG_CHARS = 1024
MAX_ERROR_CHARS = 16_000
LIST_FIELDS = ("extra_cflags", "extra_cuda_cflags", "extra_ldflags", "extra_include_paths")
_SOURCE_FIELDS = ("cpp_sources", "cuda_sources")
_BOOL_FIELDS = ("with_pytorch_error_handling", "no_implicit_headers", "is_python_module")
CALL_KEYS = frozenset({"name", "functions", "unsupported", *_SOURCE_FIELDS, *_BOOL_FIELDS, *LIST_FIELDS})
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FUNCTION = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*")


def normalize_call(args: Mapping[str, Any]) -> dict[str, Any]:
    """A load_inline call's arguments in canonical JSON form (the recorder and the loader share this)."""
    def as_list(value: Any) -> list[str]:
        if value is None:
            return []
        return [value] if isinstance(value, str) else [str(v) for v in value]

    functions = args.get("functions")
    if isinstance(functions, str):
        functions = {functions: functions}
    elif functions is not None and not isinstance(functions, Mapping):
        functions = {f: f for f in functions}
    call = {
        "name": str(args["name"]),
        "cpp_sources": as_list(args.get("cpp_sources")),
        "cuda_sources": as_list(args.get("cuda_sources")),
        "functions": {str(k): str(v) for k, v in functions.items()} if functions is not None else None,
        "with_pytorch_error_handling": bool(args.get("with_pytorch_error_handling", True)),
        "no_implicit_headers": bool(args.get("no_implicit_headers", False)),
        "is_python_module": bool(args.get("is_python_module", True)),
        "unsupported": "sycl_sources" if as_list(args.get("sycl_sources")) else "",
    }
    for field in LIST_FIELDS:
        call[field] = [f for f in as_list(args.get(field)) if f.strip()]
    return call


def call_key(call: Mapping[str, Any]) -> str:
    """Content key of a normalised call: how the loader finds its prebuilt module."""
    return content_key("inline-call", dict(call))


@dataclass(frozen=True)
class Recording:
    """A recorder's file, checked: the calls, or why the judge refuses it.

    Attributes:
        calls: The normalised calls, in order (empty when ``problem`` is set).
        error: model_new.py's traceback after its calls, ``""`` when it ran to the end.
        problem: The rule the record breaks, ``""`` when it passes: the candidate's failure.
    """

    calls: tuple[dict[str, Any], ...] = ()
    error: str = ""
    problem: str = ""

    def to_json(self) -> bytes:
        """The judge's own copy (what the build cache keeps): the checked record and its verdict."""
        return json.dumps({"calls": list(self.calls), "error": self.error, "problem": self.problem}).encode()


def read_recording(path: Path, *, judged: bool = False) -> Recording:
    """The record at ``path``, checked against the rules (see the module docstring); never raises for its content.

    Args:
        path: The recorder's file (written by candidate code), or the judge's copy (``judged``).
        judged: The file is :meth:`Recording.to_json`'s, which also holds the verdict.
    """
    raw = _read_capped(path)
    if isinstance(raw, str):
        return Recording(problem=raw)
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return Recording(problem="the record is not JSON in UTF-8 (model_new.py wrote over it?)")
    if judged and isinstance(data, dict) and data.get("problem"):
        return Recording(problem=str(data["problem"]))
    if judged and isinstance(data, dict):
        data = {k: v for k, v in data.items() if k != "problem"}
    return check_record(data)


def _read_capped(path: Path) -> bytes | str:
    """At most :data:`MAX_RECORD_BYTES` of a regular file (no link, FIFO or device is followed), or why not."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        return f"the record cannot be opened ({exc.strerror}); it must be a regular file"
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return "the record is not a regular file"
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(MAX_RECORD_BYTES + 1)
    if len(data) > MAX_RECORD_BYTES:
        return f"the record is larger than {MAX_RECORD_BYTES >> 20} MiB"
    return data


def check_record(data: Any) -> Recording:
    """A parsed record as a :class:`Recording`: its calls if it keeps every rule, else the first rule broken."""
    if not isinstance(data, dict) or set(data) != {"calls", "error"}:
        return Recording(problem=f"expected the record to be an object with keys 'calls' and 'error', got "
                                 f"{_brief(sorted(data) if isinstance(data, dict) else type(data).__name__)}")
    calls, error = data["calls"], data["error"]
    if not isinstance(error, str) or len(error) > MAX_ERROR_CHARS:
        return Recording(problem=f"expected 'error' to be text of at most {MAX_ERROR_CHARS} characters")
    if not isinstance(calls, list) or len(calls) > MAX_CALLS:
        return Recording(problem=f"expected at most {MAX_CALLS} load_inline calls, got "
                                 f"{len(calls) if isinstance(calls, list) else _brief(type(calls).__name__)}")
    for index, call in enumerate(calls, 1):
        problem = _call_problem(call)
        if problem:
            return Recording(problem=f"load_inline call {index}: {problem}")
    total = sum(len(s) for call in calls for field in _SOURCE_FIELDS for s in call[field])
    if total > MAX_SOURCE_CHARS:
        return Recording(problem=f"expected at most {MAX_SOURCE_CHARS >> 20} Mi characters of cpp_sources and "
                                 f"cuda_sources in all calls together, got {total}")
    return Recording(calls=tuple(calls), error=error)


def _call_problem(call: Any) -> str:
    """The first rule a recorded call breaks, or ``""``."""
    if not isinstance(call, dict) or set(call) != CALL_KEYS:
        got = sorted(set(call) ^ CALL_KEYS) if isinstance(call, dict) else type(call).__name__
        return f"expected an object with exactly the keys {sorted(CALL_KEYS)}, got {_brief(got)} (missing or extra)"
    name = call["name"]
    if not isinstance(name, str) or len(name) > MAX_NAME_CHARS or not _NAME.fullmatch(name):
        return (f"name: expected a valid Python identifier (letters, digits and _, not starting with a digit, "
                f"at most {MAX_NAME_CHARS} characters: the extension module is named after it), got {_brief(name)}")
    for field in (*_SOURCE_FIELDS, *LIST_FIELDS):
        problem = _strings_problem(call[field], field in LIST_FIELDS)
        if problem:
            return f"{field}: {problem}"
    if any(not isinstance(call[field], bool) for field in _BOOL_FIELDS):
        return f"expected {', '.join(_BOOL_FIELDS)} to be true or false"
    if call["unsupported"] not in ("", "sycl_sources"):
        return f"unsupported: expected '' or 'sycl_sources', got {_brief(call['unsupported'])}"
    return _functions_problem(call["functions"])


def _strings_problem(value: Any, flags: bool) -> str:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return "expected a list of strings"
    if flags and (len(value) > MAX_FLAGS or any(len(v) > MAX_FLAG_CHARS for v in value)):
        return f"expected at most {MAX_FLAGS} flags of at most {MAX_FLAG_CHARS} characters each"
    return ""


def _functions_problem(functions: Any) -> str:
    if functions is None:
        return ""
    if not isinstance(functions, dict) or len(functions) > MAX_FUNCTIONS:
        return f"functions: expected null or a map of at most {MAX_FUNCTIONS} C++ function names to docstrings"
    for name, doc in functions.items():
        if len(name) > MAX_NAME_CHARS or not _FUNCTION.fullmatch(name):
            return f"functions: expected C++ function names (f or ns::f), got {_brief(name)}"
        if not isinstance(doc, str) or len(doc) > MAX_DOC_CHARS:
            return f"functions: expected the docstring of {name} to be text of at most {MAX_DOC_CHARS} characters"
    return ""


def _brief(value: Any) -> str:
    """``repr(value)``, cut to 80 characters (a message names the offending value, never quotes a blob)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
