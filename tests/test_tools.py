"""The tool registry and handlers, run directly on a workspace with a FakeJudge."""

from __future__ import annotations

import errno
import inspect
from pathlib import Path

import pytest
from fakes import FakeJudge, failed_build, timed_result

from cudagym.judge.interface import EvalMode
from cudagym.judge.records import BuildStatus, EvalStatus, Hardware
from cudagym.task import make_task
from cudagym.toolcalls import TOOL_NAMES, ActionError, ToolCall, parse_action
from cudagym.tools import TOOLS, ToolContext, ToolResult, run_tool
from cudagym.workspace import Workspace

SOURCE = (
    "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
    "        return torch.relu(x)\n\n\ndef get_inputs():\n    return [torch.rand(4, 4)]\n\n\n"
    "def get_init_inputs():\n    return []\n"
)
TASK = make_task(SOURCE, id="L1/19_ReLU", suite="kernelbench", level=1, name="19_ReLU", origin="test")


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    ws = Workspace.create(instructions="# prompt\n", reference=SOURCE, parent=tmp_path)
    judge = FakeJudge()
    context = ToolContext(ws, TASK, judge, judge.hardware())
    yield context
    ws.close()


def tool(ctx: ToolContext, name: str, **arguments: object) -> ToolResult:
    return run_tool(ToolCall(name, arguments), ctx)


def test_registry_matches_the_schemas_and_shares_one_signature() -> None:
    assert tuple(TOOLS) == TOOL_NAMES
    for handler in TOOLS.values():
        assert list(inspect.signature(handler).parameters) == ["ctx", "args"]
        assert handler.__doc__


def test_read_file_numbers_lines_and_pages(ctx: ToolContext) -> None:
    result = tool(ctx, "read_file", path="model.py")
    assert result.ok and result.text.startswith("model.py (lines 1-15 of 15)\n 1\timport torch")
    page = tool(ctx, "read_file", path="model.py", offset=5, limit=2)
    assert page.text.splitlines() == [
        "model.py (lines 5-6 of 15)", "5\tclass Model(nn.Module):", "6\t    def forward(self, x):",
        "[9 more lines: read_file with offset=7]",
    ]
    ctx.read_lines = 3
    assert "(lines 1-3 of 15)" in tool(ctx, "read_file", path="model.py").text
    past = tool(ctx, "read_file", path="model.py", offset=16)
    assert not past.ok and past.error == "refused" and "offset 16 is past the end" in past.text


def test_write_edit_and_list(ctx: ToolContext) -> None:
    assert tool(ctx, "write_file", path="kernels/relu.cu", content="a\nb\n").text == (
        "Created kernels/relu.cu (4 bytes, 2 lines).")
    assert tool(ctx, "write_file", path="kernels/relu.cu", content="a").text == (
        "Overwrote kernels/relu.cu (1 byte, 1 line).")
    tool(ctx, "write_file", path="model_new.py", content="x = 1\ny = 1\n")
    edit = tool(ctx, "edit_file", path="model_new.py", old="= 1", new="= 2", replace_all=True)
    assert edit.ok and edit.text == "Edited model_new.py: replaced 2 occurrences (lines 1, 2)."
    listing = tool(ctx, "list_files", path="kernels")
    assert listing.ok and listing.text == "kernels/relu.cu  1 B"
    root = tool(ctx, "list_files").text.splitlines()
    size = {p: len(ctx.workspace.read_text(p).encode()) for p in ("binding.cpp", "binding_registry.h")}
    assert root == [
        "INSTRUCTIONS.md  9 B  (read-only)", f"binding.cpp  {size['binding.cpp']} B  (read-only)",
        f"binding_registry.h  {size['binding_registry.h']} B  (read-only)", "kernels/",
        "kernels/relu.cu  1 B", f"model.py  {len(SOURCE)} B  (read-only)", "model_new.py  12 B",
    ]


def test_refusals_are_results(ctx: ToolContext) -> None:
    result = tool(ctx, "write_file", path="/etc/passwd", content="x")
    assert (result.ok, result.error, result.tool) == (False, "refused", "write_file")
    assert result.text.startswith("Error: write_file refused: absolute paths are not allowed")


def test_action_errors_become_results(ctx: ToolContext) -> None:
    result = run_tool(ActionError("unknown_tool", "unknown tool 'rm'"), ctx)
    assert (result.ok, result.error, result.tool) == (False, "unknown_tool", "")
    assert "Expected one tool call per action" in result.text
    result = run_tool(parse_action('{"name": "read_file", "arguments": {}}'), ctx)
    assert result.tool == "read_file" and "Call it as read_file(path, offset?, limit?)" in result.text


def test_disk_errors_become_results(ctx: ToolContext, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ctx.workspace, "write_text", full)
    result = tool(ctx, "write_file", path="model_new.py", content="x")
    assert (result.ok, result.error) == (False, "os_error")
    assert "No space left on device" in result.text


def test_ignored_calls_are_noted(ctx: ToolContext) -> None:
    result = run_tool(ToolCall("list_files", {}, form="tagged", ignored_calls=2), ctx)
    assert result.text.startswith("Note: 2 more tool call(s) in this action were ignored")


def test_compile_builds_the_snapshot(ctx: ToolContext) -> None:
    missing = tool(ctx, "compile")
    assert (missing.ok, missing.error) == (False, "invalid") and "model_new.py is missing" in missing.text
    tool(ctx, "write_file", path="model_new.py", content="m")
    built = tool(ctx, "compile")
    assert built.ok and built.build is not None and built.build.ok
    assert built.solution is not None and dict(built.solution.files) == {"model_new.py": "m"}
    assert built.evaluation is None and not built.ends_episode
    assert "relu_kernel    16" in built.text


def test_compile_errors_are_located(ctx: ToolContext) -> None:
    ctx.judge = FakeJudge(build_fn=lambda task, sol: failed_build())
    tool(ctx, "write_file", path="model_new.py", content="m")
    result = tool(ctx, "compile")
    assert (result.ok, result.error) == (False, "compile_error")
    assert 'kernels/relu.cu:12:5: error: identifier "x" is undefined [nvcc]' in result.text


@pytest.mark.parametrize(("name", "mode"), [("verify", EvalMode.VERIFY), ("profile", EvalMode.PROFILE),
                                            ("submit", EvalMode.SUBMIT)])
def test_evaluations_use_their_mode(ctx: ToolContext, name: str, mode: EvalMode) -> None:
    tool(ctx, "write_file", path="model_new.py", content="m")
    result = tool(ctx, name)
    assert result.ok and result.evaluation is not None and result.evaluation.correct
    assert ctx.judge.evaluations() == [("evaluate", "L1/19_ReLU", mode.value)]  # type: ignore[attr-defined]
    assert result.ends_episode is (name == "submit")
    assert result.text.startswith(f"{name.capitalize()}: PASS")


def test_without_a_gpu_evaluations_build_and_say_so(ctx: ToolContext) -> None:
    judge = FakeJudge(gpu="none")
    ctx.judge, ctx.hardware = judge, judge.hardware()
    tool(ctx, "write_file", path="model_new.py", content="m")
    for name in ("verify", "profile", "submit"):
        result = tool(ctx, name)
        assert result.evaluation is not None and result.evaluation.status is EvalStatus.NO_GPU
        assert result.evaluation.build.ok and not result.ok and result.error == "no_gpu"
        assert "No GPU is available" in result.text
    assert judge.evaluations() == []


def test_a_raising_judge_is_reported(ctx: ToolContext) -> None:
    def boom(*args: object) -> None:
        raise RuntimeError("lost the worker")

    ctx.judge = FakeJudge(build_fn=boom, eval_fn=boom)
    tool(ctx, "write_file", path="model_new.py", content="m")
    built = tool(ctx, "compile")
    assert built.build is not None and built.build.status is BuildStatus.TOOL_ERROR
    assert "lost the worker" in built.text
    judged = tool(ctx, "verify")
    assert judged.evaluation is not None and judged.evaluation.status is EvalStatus.INFRA_ERROR


def test_hardware_is_the_contexts(ctx: ToolContext) -> None:
    assert ctx.has_gpu
    ctx.hardware = Hardware()
    assert not ctx.has_gpu
    assert timed_result(50.0).correct


ARGUMENTS = {"read_file": {"path": "model_new.py"}, "write_file": {"path": "model_new.py", "content": "x = 2\n"},
             "edit_file": {"path": "model_new.py", "old": "x", "new": "y"}}


@pytest.mark.parametrize("name", TOOL_NAMES)
def test_judge_tools_are_the_tools_that_call_the_judge(ctx: ToolContext, name: str) -> None:
    from cudagym.toolcalls import JUDGE_TOOLS

    ctx.workspace.write_text("model_new.py", "x = 1\n")
    assert tool(ctx, name, **ARGUMENTS.get(name, {})).error != "bad_arguments"
    assert bool(ctx.judge.calls) == (name in JUDGE_TOOLS)


@pytest.mark.parametrize("name", TOOL_NAMES)
def test_the_hand_off_hook_runs_before_the_judge_is_called(ctx: ToolContext, name: str) -> None:
    from cudagym.tools import judge_waits_on_this_thread

    ctx.workspace.write_text("model_new.py", "x = 1\n")
    seen: list[int] = []  # how many judge calls had been made each time the hook ran
    with judge_waits_on_this_thread(lambda: seen.append(len(ctx.judge.calls))):
        tool(ctx, name, **ARGUMENTS.get(name, {}))
    assert seen == ([0] if ctx.judge.calls else [])
    tool(ctx, name, **ARGUMENTS.get(name, {}))  # outside the block the hook is gone
    assert len(seen) == (1 if ctx.judge.calls else 0)
