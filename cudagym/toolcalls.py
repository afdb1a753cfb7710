"""Actions as text: parsing one tool call out of an agent's action string, and the tools' JSON schemas.

An action is a string holding one tool call, in either form:

- an OpenAI-style JSON object, the whole action: ``{"name": "compile", "arguments": {}}``. ``arguments``
  may be an object or a JSON string (as the OpenAI API sends it); a chat-completions ``tool_calls`` entry
  (``{"type": "function", "function": {"name": ..., "arguments": ...}}``) and ``parameters`` in place of
  ``arguments`` are accepted too. A Markdown code fence around the object is ignored.
- embedded in free text as ``<tool_call>{json}</tool_call>`` (Hermes style), so an LLM may reason first.

One tool call per step: when an action holds several ``<tool_call>`` blocks, the **first** runs and the
others are ignored, and the observation says so. The first is the call the model committed to; the later
ones were written before it saw the first one's result, so running them would act on stale assumptions.

Parsing never raises for agent input: it returns a :class:`ToolCall` or an :class:`ActionError` whose
message says what was wrong and shows the expected form.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"

# The tools, as OpenAI function-calling schemas (``env.unwrapped.tool_schemas``). Paths are relative to
# the workspace root. cudagym.tools maps each name to its handler.
_FILE_PATH = {"type": "string", "description": "Path relative to the workspace root, e.g. kernels/relu.cu"}
_TOOL_SPECS: tuple[tuple[str, str, dict[str, Any], tuple[str, ...]], ...] = (
    (
        "read_file",
        "Read a text file of the workspace, with line numbers.",
        {
            "path": _FILE_PATH,
            "offset": {"type": "integer", "minimum": 1, "description": "First line to show (1-based)."},
            "limit": {"type": "integer", "minimum": 1, "description": "Most lines to show."},
        },
        ("path",),
    ),
    (
        "write_file",
        "Create or overwrite a writable file (model_new.py, kernels/...) with the given text.",
        {"path": _FILE_PATH, "content": {"type": "string", "description": "The whole new file."}},
        ("path", "content"),
    ),
    (
        "edit_file",
        "Replace an exact string in a writable file; it must occur exactly once unless replace_all is true.",
        {
            "path": _FILE_PATH,
            "old": {"type": "string", "description": "Exact text to find (whitespace matters)."},
            "new": {"type": "string", "description": "Replacement text."},
            "replace_all": {"type": "boolean", "description": "Replace every occurrence (default false)."},
        },
        ("path", "old", "new"),
    ),
    (
        "list_files",
        "List the files of the workspace (or of one folder) with sizes and which are read-only.",
        {"path": {"type": "string", "description": "Folder relative to the workspace root (default: root)."}},
        (),
    ),
    ("compile", "Build the solution and report compiler errors, warnings and per-kernel resources.", {}, ()),
    ("verify", "Build, then check the outputs against the reference on the protocol's inputs.", {}, ()),
    ("profile", "Verify, then time candidate, eager PyTorch and torch.compile, with a per-kernel breakdown.", {}, ()),
    ("submit", "End the episode: the final evaluation scores the current files.", {}, ()),
)


def _schema(name: str, description: str, props: dict[str, Any], required: tuple[str, ...]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": props,
                "required": list(required),
                "additionalProperties": False,
            },
        },
    }


TOOL_SCHEMAS: tuple[dict[str, Any], ...] = tuple(_schema(*spec) for spec in _TOOL_SPECS)
TOOL_NAMES: tuple[str, ...] = tuple(spec[0] for spec in _TOOL_SPECS)
_PARAMS: dict[str, dict[str, Any]] = {s["function"]["name"]: s["function"]["parameters"] for s in TOOL_SCHEMAS}
# the tools that build or evaluate: their step waits on the judge (cudagym.tools runs them through it)
JUDGE_TOOLS: frozenset[str] = frozenset({"compile", "verify", "profile", "submit"})

EXPECTED_FORM = (
    'Expected one tool call per action, either a JSON object such as\n'
    '  {"name": "read_file", "arguments": {"path": "model.py"}}\n'
    'or free text with the call inside tags:\n'
    '  I will build it now. <tool_call>{"name": "compile", "arguments": {}}</tool_call>\n'
    f"Tools: {', '.join(TOOL_NAMES)}."
)

_TOP_LEVEL_KEYS = frozenset({"name", "arguments", "parameters", "id", "type", "function"})
_JSON_TYPES: dict[str, tuple[type, ...]] = {"string": (str,), "integer": (int,), "boolean": (bool,)}
_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class ToolCall:
    """One parsed tool call.

    Attributes:
        name: The tool's name (one of :data:`TOOL_NAMES`).
        arguments: Checked arguments (read-only).
        form: ``json`` (the whole action) or ``tagged`` (inside ``<tool_call>`` tags).
        ignored_calls: Further ``<tool_call>`` blocks in the action that did not run.
    """

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    form: str = "json"
    ignored_calls: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "arguments", MappingProxyType(dict(self.arguments)))


@dataclass(frozen=True)
class ActionError:
    """Why an action is not a valid tool call.

    Attributes:
        kind: ``not_text``, ``too_long``, ``no_tool_call``, ``bad_json``, ``bad_shape``, ``unknown_tool``
            or ``bad_arguments``.
        message: What was wrong, for the observation.
        tool: The tool's name when it was recognised.
    """

    kind: str
    message: str
    tool: str = ""


def parse_action(action: object, *, max_chars: int = 1 << 20) -> ToolCall | ActionError:
    """Parse one tool call out of an action (never raises for agent input).

    Args:
        action: What the agent sent; anything other than a ``str`` is an error.
        max_chars: Longest accepted action, in characters.
    """
    if not isinstance(action, str):
        return ActionError("not_text", f"expected the action to be a str, got {type(action).__name__}")
    if len(action) > max_chars:
        return ActionError("too_long", f"expected at most {max_chars} characters, got {len(action)}")
    text = _strip_fence(action.strip())
    if text.startswith("{"):
        obj, err = _loads(text)
        if not err:
            return _to_call(obj, form="json", ignored=0)
        if OPEN_TAG not in text:
            return ActionError("bad_json", f"the action is not valid JSON: {err}")
    return _parse_tagged(text)


def may_name_judge_tool(action: str) -> bool:
    r"""False when ``action`` cannot be a call of a judge tool: no judge tool's name occurs in it.

    A substring test, far cheaper than a parse (a JSON string spelling the name with ``\u`` escapes
    counts as a possible match); True says only that :func:`parse_action` must decide.
    """
    return "\\u" in action or any(name in action for name in JUDGE_TOOLS)


def _strip_fence(text: str) -> str:
    # ```json\n{...}\n``` around a whole action: LLMs often wrap JSON this way.
    if text.startswith("```") and text.endswith("```") and len(text) >= 6:
        first_newline = text.find("\n")
        if first_newline != -1:
            return text[first_newline + 1 : -3].strip()
    return text


def _loads(text: str) -> tuple[Any, str]:
    try:
        return json.loads(text), ""
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError; deep nesting recurses
        return None, _short(exc)


def _parse_tagged(text: str) -> ToolCall | ActionError:
    start = text.find(OPEN_TAG)
    if start == -1:
        return ActionError("no_tool_call", "found no tool call in the action")
    pos = start + len(OPEN_TAG)
    while pos < len(text) and text[pos].isspace():
        pos += 1
    try:
        # raw_decode stops at the end of the object, so a closing tag inside a string value is harmless
        obj, end = _DECODER.raw_decode(text, pos)
    except (ValueError, RecursionError) as exc:
        return ActionError("bad_json", f"the text inside {OPEN_TAG} is not valid JSON: {_short(exc)}")
    rest = text[end:].lstrip()
    if rest and not rest.startswith(CLOSE_TAG):
        return ActionError("bad_json", f"expected {CLOSE_TAG} right after the JSON object, got {rest[:40]!r}")
    ignored = text.count(OPEN_TAG, end)
    return _to_call(obj, form="tagged", ignored=ignored)


def _to_call(obj: Any, *, form: str, ignored: int) -> ToolCall | ActionError:
    if not isinstance(obj, dict):
        return ActionError("bad_shape", f"expected a JSON object with name and arguments, got {_json_type(obj)}")
    if isinstance(obj.get("function"), dict):  # a chat-completions tool_calls entry
        obj = obj["function"]
    unknown = sorted(set(obj) - _TOP_LEVEL_KEYS)
    if unknown:
        return ActionError("bad_shape", f"expected keys name and arguments, got unexpected {unknown}")
    name = obj.get("name")
    if not isinstance(name, str):
        return ActionError("bad_shape", f'expected "name" to be a string, got {_json_type(name)}')
    if name not in _PARAMS:
        return ActionError("unknown_tool", f"unknown tool {name[:60]!r}; expected one of {', '.join(TOOL_NAMES)}")
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # the OpenAI API sends arguments as a JSON string
        args, err = _loads(args) if args.strip() else ({}, "")
        if err:
            return ActionError("bad_arguments", f'"arguments" of {name} is a string but not JSON: {err}', name)
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return ActionError("bad_arguments", f'expected "arguments" to be an object, got {_json_type(args)}', name)
    problem = check_arguments(name, args)
    if problem:
        return ActionError("bad_arguments", problem, name)
    return ToolCall(name=name, arguments=args, form=form, ignored_calls=ignored)


def check_arguments(name: str, args: Mapping[str, Any]) -> str:
    """Check arguments against the tool's schema; returns the problem, or ``""`` when they fit."""
    params = _PARAMS[name]
    props: dict[str, Any] = params["properties"]
    missing = [p for p in params["required"] if p not in args]
    if missing:
        return f"{name} needs {', '.join(missing)}; its parameters are {signature(name)}"
    extra = sorted(_shown(str(k)[:40]) for k in args if k not in props)
    if extra:
        return f"{name} takes no {', '.join(extra)}; its parameters are {signature(name)}"
    for key, value in args.items():
        spec = props[key]
        want = spec["type"]
        ok = isinstance(value, _JSON_TYPES[want]) and not (want == "integer" and isinstance(value, bool))
        if not ok:
            return f"{name}: expected {key} to be {want}, got {_json_type(value)}"
        if want == "integer" and value < spec.get("minimum", value):
            return f"{name}: expected {key} >= {spec['minimum']}, got {value}"
    return ""


def signature(name: str) -> str:
    """``name(path, offset?, limit?)``: a tool's parameters, optional ones marked with ``?``."""
    params = _PARAMS[name]
    parts = [p if p in params["required"] else f"{p}?" for p in params["properties"]]
    return f"{name}({', '.join(parts)})"


def tool_schemas() -> list[dict[str, Any]]:
    """A fresh copy of the tool schemas (OpenAI function-calling format), safe to modify."""
    return json.loads(json.dumps(TOOL_SCHEMAS))


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "an integer",
             float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _shown(text: str) -> str:
    r"""``text`` as valid UTF-8 for an observation: a lone surrogate (``"\ud800"`` in the JSON) shows as ``\ud800``."""
    return text.encode("utf-8", errors="backslashreplace").decode("utf-8")


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:200]}"
