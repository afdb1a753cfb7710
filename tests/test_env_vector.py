"""Vector envs: sync and async (no shared memory for Unicode text), with NEXT_STEP autoreset."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest
from conftest_env import TOKENIZER, small_kernelbench
from fakes import FakeJudge

from cudagym.errors import ConfigError


@pytest.fixture(scope="module")
def kwargs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    tree = small_kernelbench(tmp_path_factory.mktemp("kb"))
    return {"judge": FakeJudge(), "token_counter": TOKENIZER, "suite_options": {"root": str(tree)}}


def run_two_steps(venv: gym.vector.VectorEnv) -> None:
    obs, info = venv.reset(seed=0)
    assert len(obs) == 2 and all(o.startswith("# Task:") for o in obs)
    obs, reward, terminated, truncated, info = venv.step(['{"name": "list_files"}', '{"name": "submit"}'])
    assert list(terminated) == [False, True] and list(reward) == [0.0, -1.0]  # nothing written: build fails
    assert "model.py" in obs[0] and "Episode over" in obs[1]
    obs, reward, terminated, truncated, info = venv.step(['{"name": "list_files"}', '{"name": "list_files"}'])
    assert list(info["turn"]) == [2, 0]  # NEXT_STEP: the finished env was reset, its action ignored
    assert obs[1].startswith("# Task:")


def test_sync_vector_env(kwargs: dict[str, object]) -> None:
    venv = gym.make_vec("CudaKernel-L1-v0", num_envs=2, vectorization_mode="sync", **kwargs)
    run_two_steps(venv)
    venv.close()


def test_async_vector_env_without_shared_memory(kwargs: dict[str, object]) -> None:
    venv = gym.make_vec("CudaKernel-L1-v0", num_envs=2, vectorization_mode="async",
                        vector_kwargs={"shared_memory": False, "context": "spawn"}, **kwargs)
    run_two_steps(venv)
    venv.close()


def test_async_with_shared_memory_says_what_to_do(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match="shared_memory=False"):
        gym.make_vec("CudaKernel-L1-v0", num_envs=2, vectorization_mode="async", **kwargs)


def test_workspaces_are_separate(kwargs: dict[str, object], tmp_path: Path) -> None:
    venv = gym.make_vec("CudaKernel-L1-v0", num_envs=2, vectorization_mode="sync", workspace_dir=str(tmp_path),
                        **kwargs)
    venv.reset(seed=0)
    venv.step(['{"name": "write_file", "arguments": {"path": "model_new.py", "content": "a"}}',
               '{"name": "write_file", "arguments": {"path": "model_new.py", "content": "b"}}'])
    contents = sorted((p / "model_new.py").read_text() for p in tmp_path.iterdir())
    assert contents == ["a", "b"]
    venv.close()
    assert list(tmp_path.iterdir()) == []
