"""Child process of the ``inline`` builder: run model_new.py with ``load_inline`` replaced by a recorder.

``python -m cudagym.judge.build.inline_record MODEL_NEW.py OUT.json`` runs the candidate's module (the
parent starts it in the judge's sandbox with a private copy as cwd, no visible GPU and a timeout: see
:func:`cudagym.judge.build.process.run_sandboxed_tool`) and writes every
``load_inline(...)`` call's arguments, normalised, to ``OUT.json`` as
``{"calls": [...], "error": "<traceback or empty>"}``. The recorder returns a placeholder module, so
code after the call (``fn = module.relu_forward``) keeps running; calling a placeholder function raises.
"""

from __future__ import annotations

import inspect
import json
import os
import runpy
import sys
import traceback
import types
from typing import Any


class _Placeholder(types.ModuleType):
    """Stands in for a module that the judge builds later."""

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)

        def _not_built(*_args: Any, **_kwargs: Any) -> Any:
            raise RuntimeError(f"{self.__name__}.{attr}: load_inline modules are built after recording; "
                               "do not call them at import time")

        return _not_built


def main(argv: list[str]) -> int:
    """Record the load_inline calls of one model_new.py (see the module docstring)."""
    model_path, out_path = argv
    import torch.utils.cpp_extension as cpp_extension

    from cudagym.judge.build.inline_calls import MAX_ERROR_CHARS, normalize_call

    original = cpp_extension.load_inline
    signature = inspect.signature(original)
    calls: list[dict[str, Any]] = []

    def recording_load_inline(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        call = normalize_call(dict(bound.arguments))
        calls.append(call)
        return _Placeholder(call["name"]) if call["is_python_module"] else None

    def unsupported_load(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("torch.utils.cpp_extension.load(sources=[...]) is not supported in the inline format; "
                           "pass the sources as strings to load_inline, or use the extension format")

    cpp_extension.load_inline = recording_load_inline
    cpp_extension.load = unsupported_load
    error = ""
    sys.path.insert(0, os.path.dirname(os.path.abspath(model_path)))
    try:
        runpy.run_path(model_path, run_name="model_new")
    except BaseException as exc:  # noqa: B902 - candidate code: anything it raises is data for the report
        error = _candidate_traceback(exc, model_path)[-MAX_ERROR_CHARS:]  # its end says what was raised
    finally:
        cpp_extension.load_inline = original
    with open(out_path, "w", encoding="utf-8") as handle:
        json.dump({"calls": calls, "error": error}, handle)
    return 0


def _candidate_traceback(exc: BaseException, model_path: str) -> str:
    """The traceback of ``exc`` with only the frames of model_new.py (the judge's own files are never shown)."""
    name = os.path.basename(model_path)
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if os.path.basename(f.filename) == name and os.path.dirname(os.path.abspath(f.filename))
              == os.path.dirname(os.path.abspath(model_path))][-8:]
    for frame in frames:
        frame.filename = name
    lines = ["Traceback (model_new.py's frames):", *traceback.format_list(frames),
             *traceback.format_exception_only(type(exc), exc)]
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
