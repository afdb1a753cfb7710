"""10,000 fuzzed actions: step() never raises, always answers in its spaces, and touches nothing outside.

One env is reused for every example (reset when an episode ends). Actions mix free text, JSON and tagged
tool calls whose arguments aim at escapes (``..``, absolute paths, the sentinel folder, protected files,
NUL bytes, lone surrogates, huge or negative numbers), and values that are not strings at all.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from conftest_env import make_env, small_kernelbench
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cudagym.env import CudaKernelEnv
from cudagym.toolcalls import TOOL_NAMES

EXAMPLES = 1000
ACTIONS_PER_EXAMPLE = 10  # 10,000 actions in all


def tree_digest(root: Path, skip: Path) -> dict[str, str]:
    """Relative path -> content hash (or a marker for folders and links) of everything under ``root``."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        if here == skip or skip in here.parents:
            dirnames[:] = []
            continue
        for name in dirnames:
            out[str((here / name).relative_to(root))] = "dir"
        for name in filenames:
            path = here / name
            rel = str(path.relative_to(root))
            out[rel] = "link" if path.is_symlink() else hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@pytest.fixture(scope="module")
def arena(tmp_path_factory: pytest.TempPathFactory) -> tuple[CudaKernelEnv, Path, Path, Path]:
    base = tmp_path_factory.mktemp("arena")
    sentinel = base / "sentinel"
    sentinel.mkdir()
    (sentinel / "file.txt").write_text("do not touch")
    (sentinel / "model_new.py").write_text("not yours")
    workspaces = base / "workspaces"
    workspaces.mkdir()
    tree = small_kernelbench(base / "kb")
    env = make_env(tree, max_turns=60, token_budget=40_000, workspace_dir=str(workspaces))
    env.reset(seed=0)
    yield env, base, sentinel, workspaces
    env.close()


def nasty_paths(sentinel: Path) -> list[str]:
    return [
        "model_new.py", "kernels/a.cu", "kernels/a_binding.cpp", "kernels/b.cuh", "kernels/c.h", "kernels/./d.cu",
        "kernels//e.cu", "./model_new.py", "kernels", ".", "", " ", "model.py", "INSTRUCTIONS.md", "binding.cpp",
        "binding_registry.h", "../x.py", "../../x.py", "kernels/../../x.cu", "kernels/../model_new.py",
        "../sentinel/file.txt", "../../sentinel/model_new.py", str(sentinel / "file.txt"), str(sentinel),
        "/etc/passwd", "/dev/zero", "/proc/self/environ", "~/.bashrc", "C:/x.py", "kernels\\a.cu",
        "kernels/\x00.cu", "kernels/\udc80.cu", "kernels/sub/x.cu", "a/b/c/d/e/f/g.cu", "k" * 300,
    ]


def _call(name: object, arguments: object) -> dict[str, object]:
    return {"name": name, "arguments": arguments}


def _string_arguments(call: dict[str, object]) -> str:
    return json.dumps({**call, "arguments": json.dumps(call["arguments"])})


def _tagged(before: str, call: dict[str, object], after: str) -> str:
    return f"{before}<tool_call>{json.dumps(call)}</tool_call>{after}"


def _cut(text: str, at: int) -> str:
    return text[:at]


def actions(sentinel: Path) -> st.SearchStrategy[object]:
    path = st.sampled_from(nasty_paths(sentinel)) | st.text(max_size=40)
    text = st.text(max_size=300) | st.sampled_from(["", "\x00", "a\udc80b", "x" * 5000, "import torch\n"])
    number = st.integers(min_value=-5, max_value=10**6) | st.sampled_from([0, 10**30, -(10**30)])
    anything = st.none() | st.booleans() | number | st.floats(allow_nan=True) | text | st.just([1, 2])
    arguments = st.fixed_dictionaries(
        {},
        optional={"path": path | anything, "content": text | anything, "old": text, "new": text,
                  "offset": number | anything, "limit": number | anything, "replace_all": anything,
                  "bogus": anything},
    )
    name = st.sampled_from([*TOOL_NAMES, "", "rm", "exec", "READ_FILE"]) | st.text(max_size=10)
    call = st.builds(_call, name, arguments | st.text(max_size=30))
    as_json = call.map(json.dumps)
    as_string_args = call.map(_string_arguments)
    tagged = st.builds(_tagged, st.text(max_size=50), call, st.text(max_size=50))
    broken = st.builds(_cut, as_json, st.integers(0, 60))
    not_text = st.sampled_from([None, 0, -1, 3.5, b"{}", ["list"], {"name": "compile"}])
    return st.one_of(st.text(max_size=200), as_json, as_string_args, tagged, broken, not_text)


def test_fuzzed_actions_never_raise_and_stay_inside(arena: tuple[CudaKernelEnv, Path, Path, Path]) -> None:
    env, base, sentinel, workspaces = arena
    before = tree_digest(base, skip=workspaces)
    count = {"steps": 0, "episodes": 0}

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.lists(actions(sentinel), min_size=ACTIONS_PER_EXAMPLE, max_size=ACTIONS_PER_EXAMPLE))
    def run(batch: list[object]) -> None:
        for action in batch:
            obs, reward, terminated, truncated, info = env.step(action)  # type: ignore[arg-type]
            count["steps"] += 1
            assert obs in env.observation_space
            assert isinstance(reward, float) and isinstance(terminated, bool) and isinstance(truncated, bool)
            json.dumps(info)
            assert [p.name for p in workspaces.iterdir()] == [env.workspace.root.name]
            if terminated or truncated:
                count["episodes"] += 1
                env.reset()

    run()
    assert count["steps"] == EXAMPLES * ACTIONS_PER_EXAMPLE
    assert count["episodes"] > 0
    assert tree_digest(base, skip=workspaces) == before
    assert (sentinel / "file.txt").read_text() == "do not touch"
    env.close()
    assert list(workspaces.iterdir()) == []
