"""A sub-env of ``gym.make_vec`` whose step raises: the others' results come back, the failed one ends clearly."""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from conftest_env import TOKENIZER, act, small_kernelbench
from fakes import FakeJudge

from cudagym.env import CudaKernelEnv
from cudagym.rollout import unbatch_info
from cudagym.tokens import get_token_counter

MARKER = "TOKENIZER-CHOKES-HERE"  # the counter below raises on any text holding it


class ChokingCounter:
    """A user's token counter (a callable, as ``token_counter`` accepts) that raises on one kind of text.

    The env counts each action after running its tool, so a step with the marker in its action raises from inside
    ``CudaKernelEnv.step``: a fault of the env's collaborators on the CPU path, not of the action.
    """

    def __init__(self) -> None:
        self._shipped = get_token_counter(TOKENIZER)

    def __call__(self, text: str) -> int:
        if MARKER in text:
            raise RuntimeError("the tokenizer choked")
        return self._shipped.count(text)


@pytest.fixture
def kwargs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tree = small_kernelbench(tmp_path_factory.mktemp("kb"))
    return {"judge": FakeJudge(), "token_counter": ChokingCounter(), "suite_options": {"root": str(tree)}}


def write(content: str) -> str:
    return act("write_file", path="model_new.py", content=content)


# the failing sub-env's action: a file tool, and a judge tool (its step waits on the judge: another code path)
FAILING = {"file_tool": write(f"# {MARKER}\n"),
           "judge_tool": f"{MARKER} <tool_call>{json.dumps({'name': 'compile'})}</tool_call>"}


@pytest.mark.parametrize("failing", sorted(FAILING))
def test_one_sub_env_raising_keeps_the_others_results_and_cuts_its_own_episode_off(
        kwargs: dict[str, Any], failing: str) -> None:
    venv = gym.make_vec("CudaKernel-L1-v0", num_envs=3, **kwargs)
    alone = [CudaKernelEnv("kernelbench", level=1, **kwargs) for _ in range(3)]
    venv.reset(seed=0)
    for i, env in enumerate(alone):
        env.reset(seed=i)
    task_id = venv.unwrapped.envs[1].unwrapped.task.id
    actions = [write("x = 0\n"), FAILING[failing], act("compile")]
    assert venv.unwrapped.envs[1].unwrapped.waits_on_judge(actions[1]) is (failing == "judge_tool")
    obs, reward, terminated, truncated, info = venv.step(actions)

    # the others' steps came back whole, as each sub-env stepped alone gives them
    for i in (0, 2):
        want_obs, want_reward, want_terminated, want_truncated, want_info = alone[i].step(actions[i])
        assert (obs[i], reward[i], terminated[i], truncated[i]) == (want_obs, want_reward, want_terminated,
                                                                   want_truncated)
        assert unbatch_info(info, i) == want_info
    assert unbatch_info(info, 0)["tool"] == "write_file" and unbatch_info(info, 2)["tool"] == "compile"
    # the failed one: cut off, reward 0, not evaluated, and it says what failed and that the action did not
    assert (reward[1], terminated[1], truncated[1]) == (0.0, False, True)
    assert "RuntimeError: the tokenizer choked" in obs[1] and "not the action's fault" in obs[1]
    assert unbatch_info(info, 1) == {
        "task_id": task_id, "tool": "", "ok": False, "error": "env_error", "evaluated": False,
        "episode_end": "env_error", "env_error": "RuntimeError: the tokenizer choked"}

    # NEXT_STEP autoreset: the failed sub-env starts a new episode, the others go on
    obs, reward, terminated, truncated, info = venv.step([act("list_files")] * 3)
    assert obs[1].startswith("# Task:") and list(info["turn"]) == [2, 0, 2] and not np.any(truncated)
    venv.close()
    for env in alone:
        env.close()
