"""Session 29's new-user pass: bad input to the trainer adapters, the vector env and gym.make gets a clear error
(or, inside an episode, a clear observation), and leaves no half-open state behind."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from conftest import write_bundled_tree
from conftest_env import TOKENIZER
from fakes import FakeJudge
from gymnasium.error import ClosedEnvironmentError

import cudagym  # noqa: F401  (registers the ids)
from cudagym.env import CudaKernelEnv
from cudagym.errors import ConfigError, UnknownTaskError
from cudagym.integrations.trl import CudaKernelTools
from cudagym.integrations.verl import KernelSessions, play_session
from cudagym.observation import MIN_RESULT_CHARS
from cudagym.vector import CudaKernelVectorEnv

TASK = "bundled/L1/01_ReLU"
OTHER = "bundled/L2/01_gemm_bias_gelu"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_bundled_tree(tmp_path_factory.mktemp("newuser") / "bundled")


def env_kwargs(root: Path) -> dict[str, Any]:
    return {"suite": "bundled", "suite_options": {"root": str(root)}, "judge": FakeJudge(), "token_counter": TOKENIZER}


# -- verl ---------------------------------------------------------------------------------------------------------


def test_a_verl_session_whose_reset_raises_is_not_left_open(root: Path) -> None:
    made: list[CudaKernelEnv] = []

    def make() -> CudaKernelEnv:
        made.append(CudaKernelEnv(**env_kwargs(root)))
        return made[-1]

    sessions = KernelSessions(make, max_sessions=1)
    with pytest.raises(UnknownTaskError):
        sessions.open("r1", task="bundled/L9/99_Nope")
    assert len(sessions) == 0
    prompt, _ = sessions.open("r1", task=TASK)  # the id is free, and the one session allowed is not used up
    assert prompt.startswith("# Task:") and len(made) == 1  # the env went back to the idle ones
    sessions.finish("r1")
    assert len(sessions) == 0
    sessions.close()


def test_verl_max_sessions_must_be_a_positive_int(root: Path) -> None:
    with pytest.raises(ConfigError, match="expected max_sessions to be a positive int, got 0"):
        KernelSessions(lambda: CudaKernelEnv(**env_kwargs(root)), max_sessions=0)


class _TemplateFails:
    """An agent loop whose chat template raises on the first call (a tokenizer without tool support, say)."""

    async def ct_build_initial_tokens(self, messages: list[dict[str, Any]], tools: Any = None) -> list[int]:
        raise ValueError("this tokenizer's chat template takes no tools")


def test_play_session_finishes_its_session_when_the_first_tokens_cannot_be_built(root: Path) -> None:
    sessions = KernelSessions(lambda: CudaKernelEnv(**env_kwargs(root)), max_sessions=1)
    with pytest.raises(ValueError, match="chat template"):
        asyncio.run(play_session(_TemplateFails(), sessions, "r1", [], {}, task=TASK, seed=None,
                                 response_length=100, max_turns=2))
    assert len(sessions) == 0
    sessions.open("r1", task=TASK)  # neither the id nor the one session allowed is held by the failed run
    sessions.close()


# -- TRL ----------------------------------------------------------------------------------------------------------


def tools(root: Path) -> CudaKernelTools:
    return CudaKernelTools("bundled", suite_options={"root": str(root)}, judge=FakeJudge(), token_counter=TOKENIZER)


def test_trl_tools_after_a_failed_reset_say_there_is_no_episode(root: Path) -> None:
    env = tools(root)
    env.reset(task=TASK)
    with pytest.raises(UnknownTaskError):
        env.reset(task="bundled/L9/99_Nope")
    assert env.compile().startswith("No episode is running")
    assert env.get_reward() == 0.0  # the trainer scores the row; it is not a ResetNeeded out of get_reward
    env.reset(task=TASK)
    assert "model.py" in env.list_files()
    env._close()


@pytest.mark.parametrize("seed", ["abc", 1.7, -1, True])
def test_trl_a_rows_seed_must_be_a_whole_number(root: Path, seed: object) -> None:
    env = tools(root)
    with pytest.raises(ConfigError, match="expected the row's seed to be a whole number >= 0"):
        env.reset(seed=seed)
    env._close()


def test_trl_a_rows_seed_may_be_numpys_int_or_digits(root: Path) -> None:
    env = tools(root)
    env.reset(seed=np.int64(3))
    drawn = env.info["task_id"]
    env.reset(seed="3")
    assert env.info["task_id"] == drawn
    env._close()


def test_trl_a_row_whose_task_and_task_id_disagree_is_refused(root: Path) -> None:
    env = tools(root)
    with pytest.raises(ConfigError, match="task and task_id to name one task"):
        env.reset(task=TASK, task_id=OTHER)
    with pytest.raises(ConfigError, match="row's task to be a task id"):
        env.reset(task=5)
    env.reset(task=TASK, task_id=TASK)
    assert env.info["task_id"] == TASK
    env._close()


def test_trl_tool_arguments_that_are_not_json_come_back_as_an_observation(root: Path) -> None:
    env = tools(root)
    env.reset(task=TASK)
    text = env.write_file("model_new.py", b"import torch\n")  # type: ignore[arg-type]
    assert text.startswith("Error: write_file: expected JSON values") and "bytes" in text
    assert env.read_file("model_new.py").startswith("Error")  # nothing was written
    env._close()


# -- OpenEnv ------------------------------------------------------------------------------------------------------


def test_openenv_after_a_failed_reset_step_says_there_is_no_episode(root: Path) -> None:
    pytest.importorskip("openenv.core")
    from cudagym.integrations.openenv import CudaKernelEnvironment, KernelAction

    env = CudaKernelEnvironment(**env_kwargs(root))
    env.reset(task=TASK)
    with pytest.raises(UnknownTaskError):
        env.reset(task="bundled/L9/99_Nope")
    observation = env.step(KernelAction(name="list_files"))
    assert observation.error == "reset_needed" and observation.text.startswith("No episode is running")
    env.close()


def test_openenv_a_misspelt_reset_argument_is_refused_not_a_random_task(root: Path) -> None:
    pytest.importorskip("openenv.core")
    from cudagym.integrations.openenv import CudaKernelEnvironment, KernelAction

    env = CudaKernelEnvironment(**env_kwargs(root))
    with pytest.raises(ConfigError, match="unknown reset argument.*'tsk'"):
        env.reset(tsk=TASK)
    assert env.reset(task=TASK, seed=0, episode_id="e1").task_id == TASK
    with pytest.raises(ConfigError, match="arguments of read_file to be JSON data"):
        KernelAction(name="read_file", arguments={"path": b"model.py"}).to_action()
    env.close()


# -- Stable-Baselines3 launch tuning ------------------------------------------------------------------------------


@pytest.mark.parametrize("budget", ["8", None, 2.5, True, 0])
def test_sb3_budget_must_be_a_positive_int(budget: object) -> None:
    from cudagym.integrations.sb3 import LaunchTuningEnv

    with pytest.raises(ConfigError, match=f"expected budget to be a positive int, got {budget!r}"):
        LaunchTuningEnv(budget=budget, judge=FakeJudge())  # type: ignore[arg-type]


@pytest.mark.parametrize("key", ["max_turns", "tasks", "solution_format", "judge", "suite"])
def test_sb3_env_kwargs_may_not_set_what_the_tuning_env_sets(key: str) -> None:
    from cudagym.integrations.sb3 import LaunchTuningEnv

    with pytest.raises(ConfigError, match=f"expected env_kwargs without {key}: LaunchTuningEnv sets"):
        LaunchTuningEnv(judge=FakeJudge(), env_kwargs={key: "x"})
    with pytest.raises(ConfigError, match="expected env_kwargs to be a dict or None"):
        LaunchTuningEnv(judge=FakeJudge(), env_kwargs=[("protocol", "cudagym")])  # type: ignore[arg-type]


# -- the vector env -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("steps", [0, -3, "5"])
def test_make_vec_refuses_a_max_episode_steps_that_is_not_a_positive_int(root: Path, steps: object) -> None:
    # 0 read as "no TimeLimit at all", where gym.make refuses it
    with pytest.raises(ConfigError, match="expected max_episode_steps to be a positive int"):
        gym.make_vec("CudaKernel-Bundled-v0", num_envs=1, max_episode_steps=steps, **{
            k: v for k, v in env_kwargs(root).items() if k != "suite"})


def test_vector_step_wants_one_action_per_sub_env_in_a_list(root: Path) -> None:
    venv = CudaKernelVectorEnv(2, **env_kwargs(root))
    venv.reset(seed=0)
    with pytest.raises(ConfigError, match="expected a list of 2 actions .* got str"):
        venv.step('{"name": "list_files"}')  # type: ignore[arg-type]  # its letters were counted as actions
    with pytest.raises(ConfigError, match="expected a list of 2 actions .* got NoneType"):
        venv.step(None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="expected seed to be an int, None, or a list of 2"):
        venv.reset(seed="ab")  # type: ignore[arg-type]
    venv.reset(seed=np.int64(1))
    _, _, _, _, info = venv.step(np.array(['{"name": "list_files"}'] * 2))
    assert list(info["ok"]) == [True, True]
    venv.close()


def test_a_closed_vector_env_says_so(root: Path) -> None:
    venv = CudaKernelVectorEnv(2, **env_kwargs(root))
    venv.reset(seed=0)
    venv.close()
    with pytest.raises(ClosedEnvironmentError, match=r"step\(\) was called after close\(\)"):
        venv.step(['{"name": "list_files"}'] * 2)
    with pytest.raises(ClosedEnvironmentError, match=r"reset\(\) was called after close\(\)"):
        venv.reset(seed=0)


# -- gym.make options ---------------------------------------------------------------------------------------------


def test_max_result_chars_too_short_for_the_truncation_marker_is_refused(root: Path) -> None:
    with pytest.raises(ConfigError, match=f"expected max_result_chars >= {MIN_RESULT_CHARS}"):
        CudaKernelEnv(**env_kwargs(root), max_result_chars=1)
    env = CudaKernelEnv(**env_kwargs(root), max_result_chars=MIN_RESULT_CHARS)
    env.reset(options={"task": TASK})
    text = env.step(json.dumps({"name": "read_file", "arguments": {"path": "model.py"}}))[0]
    assert len(text) <= MIN_RESULT_CHARS and "characters truncated ...]" in text
    env.close()


def test_a_misspelt_judge_option_is_refused_by_gym_make(root: Path) -> None:
    options = {"suite_options": {"root": str(root)}, "token_counter": TOKENIZER}
    with pytest.raises(ConfigError, match="unknown judge_options 'device'.*did you mean 'devices'"):
        gym.make("CudaKernel-Bundled-v0", judge_options={"device": "none"}, **options)
    with pytest.raises(ConfigError, match="unknown judge_options 'adress'.*did you mean 'address'"):
        gym.make("CudaKernel-Bundled-v0", judge="ray", judge_options={"adress": "auto"}, **options)
    gym.make("CudaKernel-Bundled-v0", judge_options={"devices": "none", "build_workers": 1}, **options).close()


@pytest.mark.parametrize("devices", [-1, [0, -1], [True], 1.5])
def test_a_local_judge_refuses_devices_that_name_no_device_list_when_made(devices: object) -> None:
    from cudagym.judge.local import LocalJudge

    # before, the value was first looked at by the GPU probe of the first job (or the env's first reset)
    with pytest.raises(ConfigError, match="expected devices to be 'auto', 'none'"):
        LocalJudge(devices=devices)  # type: ignore[arg-type]


def test_the_docs_give_the_shortest_max_result_chars_as_the_code_has_it() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    assert f"`max_result_chars` is at\n  least {MIN_RESULT_CHARS}," in readme
    assert f"(at least {MIN_RESULT_CHARS})" in (CudaKernelEnv.__doc__ or "")
