"""A sub-env of ``gym.make_vec`` whose step or reset raises: the others' results come back, the failed one ends
clearly."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from conftest_env import TOKENIZER, act, small_kernelbench
from fakes import FakeJudge

from cudagym.env import CudaKernelEnv
from cudagym.rollout import run_vector_episodes, unbatch_info
from cudagym.tokens import get_token_counter

MARKER = "TOKENIZER-CHOKES-HERE"  # the counter below raises on any text holding it


class ChokingCounter:
    """A user's token counter (a callable, as ``token_counter`` accepts) that raises on one kind of text.

    The env counts each action after running its tool, so a step with the marker in its action raises from inside
    ``CudaKernelEnv.step``: a fault of the env's collaborators on the CPU path, not of the action. It counts the
    prompt too, so a marker in one task's prompt makes ``CudaKernelEnv.reset`` raise on that task (``times``: only
    that many times, a passing fault; None: every time).
    """

    def __init__(self, marker: str = MARKER, times: int | None = None) -> None:
        self._shipped = get_token_counter(TOKENIZER)
        self._marker = marker
        self._left = times

    def __call__(self, text: str) -> int:
        if self._marker in text and self._left != 0:
            self._left = None if self._left is None else self._left - 1
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


def choking_on_sub_env_1s_first_task(tree: Any) -> tuple[dict[str, Any], str]:
    """Env arguments whose counter raises once on the prompt of the task sub-env 1 draws at ``reset(seed=0)``, and
    that task's id."""
    suite = {"root": str(tree)}
    drawn = []
    for seed in range(3):  # sub-env i resets with seed i
        probe = CudaKernelEnv("kernelbench", level=1, judge=FakeJudge(), token_counter=TOKENIZER, suite_options=suite)
        probe.reset(seed=seed)
        drawn.append(probe.task)
        probe.close()
    assert drawn[1].id not in (drawn[0].id, drawn[2].id)  # only sub-env 1's prompt holds the marker
    marker = re.search(r"Problem \d+ of level 1\.", drawn[1].source)
    assert marker is not None
    counter = ChokingCounter(marker.group(0), times=1)
    return {"judge": FakeJudge(), "token_counter": counter, "suite_options": suite}, drawn[1].id


def test_one_sub_env_whose_reset_raises_keeps_the_others_resets_and_ends_its_own_episode_at_the_next_step(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    kwargs, task_id = choking_on_sub_env_1s_first_task(small_kernelbench(tmp_path_factory.mktemp("kb")))
    venv = gym.make_vec("CudaKernel-L1-v0", num_envs=3, **kwargs)
    alone = [CudaKernelEnv("kernelbench", level=1, **kwargs) for _ in range(3)]
    obs, info = venv.reset(seed=0)

    # the others' resets came back whole, as each sub-env reset alone gives them
    for i in (0, 2):
        want_obs, want_info = alone[i].reset(seed=i)
        assert obs[i] == want_obs and unbatch_info(info, i) == want_info
    # the failed one: says what failed, that nothing was evaluated and that it is not the agent's doing
    assert "RuntimeError: the tokenizer choked" in obs[1] and "not the agent's fault" in obs[1]
    assert "nothing was evaluated" in obs[1] and not obs[1].startswith("# Task:")
    failed = {"task_id": task_id, "tool": "", "ok": False, "error": "env_error", "evaluated": False,
              "env_error": "RuntimeError: the tokenizer choked"}
    assert unbatch_info(info, 1) == failed

    # a reset cannot end what it returned: the next step ends it (its action not run), the others step as usual
    actions = [act("list_files"), write("x = 0\n"), act("compile")]
    obs, reward, terminated, truncated, info = venv.step(actions)
    for i in (0, 2):
        want_obs, want_reward, want_terminated, want_truncated, want_info = alone[i].step(actions[i])
        assert (obs[i], reward[i], terminated[i], truncated[i]) == (want_obs, want_reward, want_terminated,
                                                                   want_truncated)
        assert unbatch_info(info, i) == want_info
    assert (reward[1], terminated[1], truncated[1]) == (0.0, False, True)
    assert "RuntimeError: the tokenizer choked" in obs[1] and "Episode over" in obs[1]
    assert unbatch_info(info, 1) == {**failed, "episode_end": "env_error"}

    # NEXT_STEP autoreset: the step after that starts its new episode (the fault has passed), the others go on
    obs, reward, terminated, truncated, info = venv.step([act("list_files")] * 3)
    assert obs[1].startswith("# Task:") and list(info["turn"]) == [2, 0, 2] and not np.any(truncated)
    venv.close()
    for env in alone:
        env.close()


class Submits:
    """Submits at once: every episode is one turn."""

    def reset(self) -> None:
        """Nothing to forget."""

    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        return act("submit")


def test_a_failed_reset_is_an_episode_of_its_own_in_the_rollout_records(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """What a NEXT_STEP caller's bookkeeping makes of it: one ``env_error`` episode, the next task's episode clean."""
    kwargs, task_id = choking_on_sub_env_1s_first_task(small_kernelbench(tmp_path_factory.mktemp("kb")))
    venv = gym.make_vec("CudaKernel-L1-v0", num_envs=3, **kwargs)
    records = run_vector_episodes(venv, [Submits(), Submits(), Submits()], episodes=6, seed=0)
    venv.close()
    failed = [r for r in records if r.episode_end == "env_error"]
    assert len(failed) == 1 and failed[0].task_id == task_id, [r.episode_end for r in records]
    assert (failed[0].reward, failed[0].evaluated, failed[0].truncated, failed[0].tools) == (0.0, False, True, [""])
    assert "RuntimeError: the tokenizer choked" in failed[0].prompt
    others = [r for r in records if r.episode_end != "env_error"]
    assert len(others) == 5 and all(r.prompt.startswith("# Task:") and r.tools == ["submit"] for r in others)
