"""TRL's environment_factory class: tools from type hints and docstrings, reset(**row), get_reward, pickling."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from conftest import write_bundled_tree
from conftest_env import TOKENIZER
from fakes import FakeJudge

from cudagym.integrations.trl import CudaKernelTools
from cudagym.sources.bundled import BundledSource
from cudagym.toolcalls import TOOL_SCHEMAS

TASK = "bundled/L1/01_ReLU"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return write_bundled_tree(tmp_path / "bundled")


def tools(root: Path, **kwargs: object) -> CudaKernelTools:
    return CudaKernelTools("bundled", suite_options={"root": str(root)}, judge=kwargs.pop("judge", FakeJudge()),
                           token_counter=TOKENIZER, **kwargs)


def test_the_public_methods_are_the_envs_tools_with_matching_schemas(root: Path) -> None:
    transformers = pytest.importorskip("transformers")
    import inspect

    env = tools(root)
    names = [n for n, _ in inspect.getmembers(CudaKernelTools, predicate=inspect.isfunction)
             if not n.startswith("_") and n not in ("reset", "get_reward")]
    assert sorted(names) == sorted(s["function"]["name"] for s in TOOL_SCHEMAS)
    for spec in TOOL_SCHEMAS:
        want = spec["function"]
        got = transformers.utils.get_json_schema(getattr(env, want["name"]))["function"]
        assert set(got["parameters"].get("properties", {})) == set(want["parameters"]["properties"]), want["name"]
        assert sorted(got["parameters"].get("required", [])) == sorted(want["parameters"]["required"])
        assert got["description"] == want["description"]
    env._close()


def test_reset_takes_a_dataset_row_and_the_reward_is_the_episodes(root: Path) -> None:
    env = tools(root)
    assert env.compile().startswith("No episode is running")
    prompt = env.reset(prompt=[{"role": "user", "content": "Make it fast."}], task=TASK, extra="ignored")
    assert prompt.startswith("# Task:") and TASK in prompt
    for path, text in BundledSource(root=root).solution(TASK).files.items():
        assert "Wrote" in env.write_file(path, text) or env.info["ok"]
    assert "Build OK" in env.compile()
    env.submit()
    assert env.get_reward() == 2.0
    assert env.verify().startswith("The episode is over (reward 2)")
    # a model that never submits is scored on its files as they are
    env.reset(task_id=TASK)
    assert env.list_files(None) and env.read_file("model.py", offset=1, limit=3)
    assert env.get_reward() == -1.0  # nothing written: the build fails
    assert env.info["episode_end"] == "submit"
    env._close()


def test_it_pickles_for_the_async_trainer(root: Path) -> None:
    env = tools(root)
    env.reset(task=TASK)
    clone = pickle.loads(pickle.dumps(env))
    clone.reset(task=TASK)
    assert "model.py" in clone.list_files()
    assert clone.get_reward() == -1.0
    env._close()
    clone._close()
