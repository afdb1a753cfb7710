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


def test_batched_infos_match_folding_gymnasiums_add_info(kwargs: dict[str, object]) -> None:
    import numpy as np

    venv = gym.make_vec("CudaKernel-L1-v0", num_envs=4, **kwargs).unwrapped
    infos = [
        {"a": 1, "b": "x", "nested": {"p": 1.5, "q": None, "deeper": {"r": 1}}, "arr": np.arange(3), "all": 1},
        {"b": "y", "a": 2.7, "c": True, "all": True, "lists": [1, 2]},
        {"all": 3, "f32": np.float32(0.5), "nested": {}},
        {"a": 3, "nested": {"q": "z"}, "final_obs": "obs", "arr": np.ones(3), "all": 4, "lists": (3,)},
    ]
    expected: dict[str, object] = {}
    for i, info in enumerate(infos):
        expected = venv._add_info(expected, info, i)
    assert_same_infos(venv._batch_infos(infos), expected)
    venv.close()


def assert_same_infos(got: dict[str, object], want: dict[str, object]) -> None:
    import numpy as np

    assert list(got) == list(want)
    for key, value in want.items():
        if isinstance(value, dict):
            assert_same_infos(got[key], value)  # type: ignore[arg-type]
        else:
            assert isinstance(value, np.ndarray) and isinstance(got[key], np.ndarray), key
            assert got[key].dtype == value.dtype and got[key].shape == value.shape, key
            assert [repr(x) for x in got[key].tolist()] == [repr(x) for x in value.tolist()], key


# every kind of action: judge tools, file tools, a file whose text names a judge tool, a judge tool with bad
# arguments (it never reaches the judge), malformed text; the third step is the last turn (max_turns=3), so
# its file tools end in a final evaluation
ACTIONS = [
    ['{"name": "compile"}', '{"name": "write_file", "arguments": {"path": "model_new.py", "content": "torch.compile"}}',
     '{"name": "compile", "arguments": {"bogus": 1}}', "no call here"],
    ['{"name": "verify"}', '{"name": "profile"}', '{"name": "list_files"}',
     '{"name": "read_file", "arguments": {"path": "model.py"}}'],
    ['{"name": "list_files"}', '{"name": "submit"}', '{"name": "write_file", "arguments": {"path": "model_new.py", '
     '"content": "x = 1"}}', '{"name": "compile"}'],
]


def test_vector_steps_match_stepping_each_sub_env_alone(kwargs: dict[str, object]) -> None:
    import numpy as np

    from cudagym.env import CudaKernelEnv

    venv = gym.make_vec("CudaKernel-L1-v0", num_envs=4, max_turns=3, max_episode_steps=10, **kwargs)
    alone = [CudaKernelEnv("kernelbench", level=1, max_turns=3, **kwargs) for _ in range(4)]  # type: ignore[arg-type]
    obs, _ = venv.reset(seed=7)
    assert list(obs) == [env.reset(seed=7 + i)[0] for i, env in enumerate(alone)]
    for actions in ACTIONS:
        obs, reward, terminated, truncated, info = venv.step(actions)
        each = [env.step(a) for env, a in zip(alone, actions, strict=True)]
        assert list(obs) == [e[0] for e in each]
        assert list(reward) == [e[1] for e in each]
        assert list(terminated) == [e[2] for e in each] and list(truncated) == [e[3] for e in each]
        assert list(info["tokens_used"]) == [e[4]["tokens_used"] for e in each]
    assert bool(np.all(terminated | truncated))
    venv.close()
    for env in alone:
        env.close()


def test_a_sub_env_told_its_action_is_judged_steps_it_as_parsed(kwargs: dict[str, object]) -> None:
    from cudagym.env import CudaKernelEnv

    env = CudaKernelEnv("kernelbench", level=1, **kwargs)  # type: ignore[arg-type]
    assert not env.waits_on_judge('{"name": "compile"}')  # no episode yet
    env.reset(seed=0)
    compile_call = '{"name": "compile"}'
    assert env.waits_on_judge(compile_call)
    assert not env.waits_on_judge('{"name": "list_files"}')
    assert not env.waits_on_judge('{"name": "compile", "arguments": {"bogus": 1}}')
    assert env.step(compile_call)[4]["tool"] == "compile"
    listing = '{"name": "list_files"}'
    assert env.waits_on_judge('{"name": "verify"}') and env.step(listing)[4]["tool"] == "list_files"  # another
    env.close()
