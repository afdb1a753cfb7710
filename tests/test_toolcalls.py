"""Parsing actions into tool calls: both forms, the first-call rule, argument checks, and the schemas."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudagym.toolcalls import (
    EXPECTED_FORM,
    TOOL_NAMES,
    TOOL_SCHEMAS,
    ActionError,
    ToolCall,
    check_arguments,
    parse_action,
    signature,
    tool_schemas,
)
from cudagym.tools import TOOLS


def call(action: object) -> ToolCall:
    parsed = parse_action(action)
    assert isinstance(parsed, ToolCall), parsed
    return parsed


def error(action: object, kind: str) -> ActionError:
    parsed = parse_action(action)
    assert isinstance(parsed, ActionError), parsed
    assert parsed.kind == kind, parsed
    return parsed


def test_openai_json_object() -> None:
    c = call('{"name": "read_file", "arguments": {"path": "model.py", "offset": 3, "limit": 10}}')
    assert (c.name, dict(c.arguments), c.form, c.ignored_calls) == (
        "read_file", {"path": "model.py", "offset": 3, "limit": 10}, "json", 0,
    )


def test_arguments_as_a_json_string_as_openai_sends_them() -> None:
    c = call(json.dumps({"name": "write_file", "arguments": json.dumps({"path": "a.py", "content": "x\n"})}))
    assert dict(c.arguments) == {"path": "a.py", "content": "x\n"}


def test_chat_completions_tool_call_entry_and_aliases() -> None:
    entry = {"id": "call_1", "type": "function", "function": {"name": "compile", "arguments": "{}"}}
    assert call(json.dumps(entry)).name == "compile"
    assert call('{"name": "list_files", "parameters": {"path": "kernels"}}').arguments["path"] == "kernels"
    assert dict(call('{"name": "verify"}').arguments) == {}
    assert dict(call('{"name": "verify", "arguments": ""}').arguments) == {}
    assert dict(call('{"name": "verify", "arguments": null}').arguments) == {}


def test_whitespace_and_code_fences_are_ignored() -> None:
    assert call('  \n{"name": "profile", "arguments": {}}\n ').name == "profile"
    assert call('```json\n{"name": "submit", "arguments": {}}\n```').name == "submit"


def test_tagged_call_after_reasoning() -> None:
    c = call('Let me build it first.\n<tool_call>\n{"name": "compile", "arguments": {}}\n</tool_call>')
    assert (c.name, c.form) == ("compile", "tagged")


def test_first_tagged_call_runs_and_the_rest_are_counted() -> None:
    action = (
        'Plan: <tool_call>{"name": "write_file", "arguments": {"path": "model_new.py", "content": "a"}}</tool_call>'
        ' then <tool_call>{"name": "compile", "arguments": {}}</tool_call>'
        ' and <tool_call>{"name": "submit", "arguments": {}}</tool_call>'
    )
    c = call(action)
    assert (c.name, c.ignored_calls) == ("write_file", 2)


def test_closing_tag_inside_a_string_value_is_harmless() -> None:
    content = "// writes </tool_call> in a comment\n"
    payload = json.dumps({"name": "write_file", "arguments": {"path": "k.cu", "content": content}})
    action = f"<tool_call>{payload}</tool_call>"
    assert call(action).arguments["content"] == content


def test_missing_closing_tag_at_the_end_is_accepted() -> None:
    assert call('<tool_call>{"name": "compile", "arguments": {}}').name == "compile"


def test_whole_json_holding_a_tag_in_content_is_one_json_call() -> None:
    action = json.dumps({"name": "write_file", "arguments": {"path": "n.md", "content": "<tool_call>x</tool_call>"}})
    c = call(action)
    assert (c.form, c.ignored_calls) == ("json", 0)


@pytest.mark.parametrize(
    ("action", "kind"),
    [
        (None, "not_text"),
        (42, "not_text"),
        (b'{"name": "compile"}', "not_text"),
        ("", "no_tool_call"),
        ("please compile my code", "no_tool_call"),
        ('{"name": "compile", ', "bad_json"),
        ("<tool_call>{not json}</tool_call>", "bad_json"),
        ('<tool_call>{"name": "compile"} trailing</tool_call>', "bad_json"),
        ("[1, 2]", "no_tool_call"),
        ('<tool_call>[1, 2]</tool_call>', "bad_shape"),
        ('{"name": 5}', "bad_shape"),
        ('{"tool": "compile"}', "bad_shape"),
        ('{"name": "compile", "arguments": {}, "extra": 1}', "bad_shape"),
        ('{"name": "rm_rf", "arguments": {}}', "unknown_tool"),
        ('{"name": "compile", "arguments": [1]}', "bad_arguments"),
        ('{"name": "compile", "arguments": "{not json"}', "bad_arguments"),
    ],
)
def test_malformed_actions_are_errors_not_exceptions(action: object, kind: str) -> None:
    err = error(action, kind)
    assert err.message


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ({}, "needs path"),
        ({"path": "a", "bogus": 1}, "takes no bogus"),
        ({"path": 3}, "expected path to be string, got an integer"),
        ({"path": "a", "offset": "3"}, "expected offset to be integer, got a string"),
        ({"path": "a", "offset": True}, "expected offset to be integer, got a boolean"),
        ({"path": "a", "offset": 1.5}, "expected offset to be integer, got a number"),
        ({"path": "a", "offset": 0}, "expected offset >= 1, got 0"),
        ({"path": "a", "limit": -2}, "expected limit >= 1"),
    ],
)
def test_read_file_argument_checks(arguments: dict[str, object], fragment: str) -> None:
    err = error(json.dumps({"name": "read_file", "arguments": arguments}), "bad_arguments")
    assert fragment in err.message
    assert err.tool == "read_file"


def test_edit_file_replace_all_must_be_boolean() -> None:
    bad = {"path": "a", "old": "x", "new": "y", "replace_all": "yes"}
    assert "expected replace_all to be boolean" in check_arguments("edit_file", bad)
    assert check_arguments("edit_file", {**bad, "replace_all": True}) == ""


def test_too_long_actions_are_refused() -> None:
    parsed = parse_action('{"name": "compile"}' + " " * 100, max_chars=50)
    assert isinstance(parsed, ActionError) and parsed.kind == "too_long"


def test_pathological_json_never_raises() -> None:
    assert error("[" * 100_000, "no_tool_call")
    assert error("{" * 100_000, "bad_json")
    assert error("<tool_call>" + "[" * 100_000, "bad_json")
    assert error('{"name": "read_file", "arguments": {"path": "a", "offset": ' + "9" * 5000 + "}}", "bad_json")
    assert error('{"name": "read_file", "arguments": "' + "[" * 50_000 + '"}', "bad_arguments")


def test_expected_form_and_signatures() -> None:
    assert all(name in EXPECTED_FORM for name in TOOL_NAMES)
    assert signature("read_file") == "read_file(path, offset?, limit?)"
    assert signature("edit_file") == "edit_file(path, old, new, replace_all?)"
    assert signature("compile") == "compile()"


def test_schemas_cover_exactly_the_registered_tools() -> None:
    assert TOOL_NAMES == ("read_file", "write_file", "edit_file", "list_files", "compile", "verify", "profile",
                          "submit")
    assert set(TOOLS) == set(TOOL_NAMES)
    for schema in TOOL_SCHEMAS:
        assert schema["type"] == "function"
        fn = schema["function"]
        assert fn["description"]
        params = fn["parameters"]
        assert params["type"] == "object" and params["additionalProperties"] is False
        assert set(params["required"]) <= set(params["properties"])
        for prop in params["properties"].values():
            assert prop["type"] in ("string", "integer", "boolean") and prop["description"]
    json.dumps(TOOL_SCHEMAS)


def test_tool_schemas_returns_a_copy() -> None:
    copy = tool_schemas()
    copy[0]["function"]["name"] = "changed"
    assert TOOL_SCHEMAS[0]["function"]["name"] == "read_file"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_any_text_parses_to_a_call_or_an_error(text: str) -> None:
    assert isinstance(parse_action(text), (ToolCall, ActionError))
    assert isinstance(parse_action("<tool_call>" + text), (ToolCall, ActionError))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=120, deadline=None)
@given(name=st.sampled_from([*TOOL_NAMES, "nope"]), arguments=json_values)
def test_any_json_arguments_parse_to_a_call_or_an_error(name: str, arguments: object) -> None:
    parsed = parse_action(json.dumps({"name": name, "arguments": arguments}))
    if isinstance(parsed, ToolCall):
        assert parsed.name == name and check_arguments(name, parsed.arguments) == ""
    else:
        assert parsed.kind in ("unknown_tool", "bad_arguments")


@pytest.mark.parametrize("action", [
    '{"name": "compile"}', '<tool_call>{"name": "verify", "arguments": {}}</tool_call>',
    '{"name": "\\u0073ubmit"}', '{"name": "profile", "arguments": "{}"}',
])
def test_a_judge_call_always_passes_the_cheap_pre_check(action: str) -> None:
    from cudagym.toolcalls import JUDGE_TOOLS, may_name_judge_tool

    call = parse_action(action)
    assert isinstance(call, ToolCall) and call.name in JUDGE_TOOLS
    assert may_name_judge_tool(action)


def test_the_pre_check_rules_out_file_tools_without_parsing() -> None:
    from cudagym.toolcalls import may_name_judge_tool

    assert not may_name_judge_tool('{"name": "read_file", "arguments": {"path": "model.py"}}')
    assert may_name_judge_tool('{"name": "write_file", "arguments": {"path": "a", "content": "torch.compile(m)"}}')
