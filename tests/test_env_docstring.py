"""The env's docstring is its spec: check what it documents against the real env."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest
from conftest_env import make_env, small_kernelbench

from cudagym.env import CudaKernelEnv
from cudagym.judge.protocol import DEFAULT_PROTOCOL
from cudagym.registration import MAX_EPISODE_STEPS
from cudagym.reward import NOT_EVALUATED, TIER_VALUES
from cudagym.toolcalls import TOOL_NAMES, signature

SECTIONS = ("Description", "Action Space", "Observation Space", "Rewards", "Starting State", "Episode End",
            "Arguments", "Version History")


def sections() -> dict[str, str]:
    doc = inspect.cleandoc(CudaKernelEnv.__doc__ or "")
    parts = re.split(r"^## (.+)$", doc, flags=re.MULTILINE)
    return {title.strip(): body.strip() for title, body in zip(parts[1::2], parts[2::2], strict=True)}


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> CudaKernelEnv:
    e = make_env(small_kernelbench(tmp_path_factory.mktemp("kb")))
    yield e
    e.close()


def test_sections_in_cartpole_order() -> None:
    assert tuple(sections()) == SECTIONS


def test_spaces_match(env: CudaKernelEnv) -> None:
    doc = sections()
    assert f"``{env.action_space!r}``" in doc["Action Space"]
    assert f"``{env.observation_space!r}``" in doc["Observation Space"]


def test_every_tool_is_documented_with_its_signature(env: CudaKernelEnv) -> None:
    text = sections()["Action Space"]
    for name in TOOL_NAMES:
        assert f"``{signature(name)}``" in text
    assert "env.unwrapped.tool_schemas" in text
    assert len(env.tool_schemas) == len(TOOL_NAMES)
    documented = re.findall(r"``([a-z_]+)\(", text)
    assert set(documented) == set(TOOL_NAMES)


def test_reward_values_and_threshold() -> None:
    text = sections()["Rewards"]
    values = {float(v) for v in re.findall(r"^- (-?\d+):", text, flags=re.MULTILINE)}
    assert values == {*TIER_VALUES, NOT_EVALUATED}
    assert f"{DEFAULT_PROTOCOL.threshold:.0%}" == "5%"
    assert text.count("5%") >= 3


def test_episode_end_items_are_marked() -> None:
    items = re.findall(r"^\d+\. (Termination|Truncation): (.+)$", sections()["Episode End"], flags=re.MULTILINE)
    kinds = [k for k, _ in items]
    assert kinds == ["Termination", "Truncation", "Truncation"]
    assert "submit()" in items[0][1]
    assert "max_turns" in items[1][1] and "token_budget" in items[2][1]


def _table_rows(text: str) -> list[list[str]]:
    rows = [line for line in text.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]]


def test_argument_table_matches_the_constructor() -> None:
    text = sections()["Arguments"]
    assert "gym.make(" in text
    params = {
        name: p for name, p in inspect.signature(CudaKernelEnv.__init__).parameters.items() if name != "self"
    }
    rows = _table_rows(text)
    assert [r[0] for r in rows] == list(params)
    for name, _type, default, description in rows:
        assert description, name
        assert ast.literal_eval(default) == params[name].default, name


def test_defaults_quoted_in_prose_are_the_real_ones() -> None:
    params = inspect.signature(CudaKernelEnv.__init__).parameters
    assert params["max_turns"].default == MAX_EPISODE_STEPS == 200
    assert params["token_budget"].default == 131072
    version = sections()["Version History"]
    assert "200 turns" in version and "131,072 tokens" in version
    assert re.search(r"^\* v0:", version, flags=re.MULTILINE)


def test_docstring_example_runs_on_a_fixture(tmp_path: Path) -> None:
    env = make_env(small_kernelbench(tmp_path / "kb"))
    obs, info = env.reset(seed=0, options={"task": "L1/1_Sigmoid"})
    assert info["task_id"] == "L1/1_Sigmoid" and obs
    env.close()
