"""The rollout layer: run_episode, EpisodeRecord JSON, thread and vector-env rollouts, agent errors."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from conftest import write_bundled_tree
from conftest_env import SOLUTION, TOKENIZER, act, small_kernelbench
from cudagym.baselines.scripted import JUDGE_STEPS, ScriptedAgent
from fakes import FakeJudge

from cudagym.env import CudaKernelEnv
from cudagym.errors import ConfigError
from cudagym.rollout import (
    Agent,
    AgentError,
    EpisodeRecord,
    EpisodeSpec,
    ReportsUsage,
    run_episode,
    run_episodes,
    run_vector_episodes,
    unbatch_info,
)

TASK = "bundled/L1/01_ReLU"


@pytest.fixture
def bundled(tmp_path: Path) -> Path:
    return write_bundled_tree(tmp_path / "bundled")


def bundled_env(root: Path, judge: FakeJudge | None = None, **kwargs: Any) -> CudaKernelEnv:
    return CudaKernelEnv("bundled", suite_options={"root": str(root)}, judge=judge or FakeJudge(),
                         token_counter=TOKENIZER, **kwargs)


class WriteThenSubmit:
    """Writes the test solution, then submits; reports a fixed model usage per action."""

    def __init__(self) -> None:
        self.actions: list[str] = []
        self.seen: list[Mapping[str, Any]] = []

    def reset(self) -> None:
        self.actions = [*(act("write_file", path=p, content=t) for p, t in SOLUTION.items()), act("submit")]

    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        self.seen.append(info)
        return self.actions.pop(0)

    def last_usage(self) -> Mapping[str, int]:
        return {"prompt_tokens": 10, "completion_tokens": 3}


def test_run_episode_records_tools_tokens_verdicts_and_timings(bundled: Path) -> None:
    env = bundled_env(bundled)
    record = run_episode(env, ScriptedAgent.from_bundled(TASK, _source(bundled)), options={"task": TASK})
    assert record.tools == ["write_file"] * 3 + list(JUDGE_STEPS)
    assert (record.task_id, record.reward, record.terminated, record.evaluated) == (TASK, 2.0, True, True)
    assert record.episode_end == "submit" and record.agent == "ScriptedAgent" and not record.agent_error
    assert record.prompt.startswith("# Task:") and record.prompt_tokens > 0
    assert record.prompt_tokens + sum(t.tokens for t in record.turns) == record.tokens_used
    assert record.tokens_used == record.turns[-1].info["tokens_used"]
    assert all(t.tokens > 0 and t.agent_time_s >= 0 and t.env_time_s > 0 for t in record.turns)
    # verdicts only on the turns that evaluated
    assert [bool(t.verdict) for t in record.turns] == [False] * 4 + [True] * 3
    assert record.turns[-1].verdict["status"] == "ok" and record.last_eval["speedup_vs_eager"] > 1
    assert json.loads(record.turns[0].action)["name"] == "write_file"
    env.close()


def test_episode_record_round_trips_through_json(bundled: Path) -> None:
    env = bundled_env(bundled)
    record = run_episode(env, WriteThenSubmit(), options={"task": TASK})
    env.close()
    text = record.to_json()
    again = EpisodeRecord.from_json(text)
    assert again == record
    assert again.model_tokens == {"prompt_tokens": 40, "completion_tokens": 12}
    assert again.turns[0].usage == {"prompt_tokens": 10, "completion_tokens": 3}


@pytest.mark.parametrize(("text", "match"), [
    ("not json", "not JSON"), ("[1]", "an object"), ('{"task_id": "x"}', "EpisodeRecord dict"),
])
def test_bad_record_json_is_a_clear_error(text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        EpisodeRecord.from_json(text)


class Broken:
    """Acts once, then its endpoint is gone."""

    def __init__(self) -> None:
        self.calls = 0

    def reset(self) -> None:
        self.calls = 0

    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        self.calls += 1
        if self.calls > 1:
            raise AgentError("endpoint http://127.0.0.1:1 failed 3 times: connection refused")
        return act("list_files")


def test_an_agent_error_ends_the_episode_with_the_reason(bundled: Path) -> None:
    env = bundled_env(bundled)
    record = run_episode(env, Broken(), options={"task": TASK})
    assert record.episode_end == "agent_error" and "connection refused" in record.agent_error
    assert record.tools == ["list_files"] and not record.terminated and not record.truncated
    env.close()


def test_max_steps_stops_an_endless_agent(bundled: Path) -> None:
    class Lister:
        def reset(self) -> None: ...

        def act(self, observation: str, info: Mapping[str, Any]) -> str:
            return act("list_files")

    env = bundled_env(bundled)
    record = run_episode(env, Lister(), options={"task": TASK}, max_steps=3)
    assert record.episode_end == "max_steps" and len(record.turns) == 3
    with pytest.raises(ConfigError, match="max_steps"):
        run_episode(env, Lister(), options={"task": TASK}, max_steps=0)
    env.close()


def test_the_protocols_match_the_agents() -> None:
    assert isinstance(WriteThenSubmit(), Agent) and isinstance(WriteThenSubmit(), ReportsUsage)
    assert isinstance(ScriptedAgent({"model_new.py": "m"}), Agent)
    assert not isinstance(Broken(), ReportsUsage)


def test_run_episodes_over_threads_shares_one_judge(bundled: Path) -> None:
    judge = FakeJudge()
    made: list[CudaKernelEnv] = []
    threads: set[str] = set()

    def make_env() -> CudaKernelEnv:
        made.append(bundled_env(bundled, judge))
        return made[-1]

    records = run_episodes(make_env, WriteThenSubmit, [EpisodeSpec.for_task(TASK, seed=i) for i in range(5)],
                           max_workers=2, on_episode=lambda r: threads.add(threading.current_thread().name))
    assert [r.task_id for r in records] == [TASK] * 5
    assert all(r.terminated and r.reward == 2.0 for r in records)
    assert 1 <= len(made) <= 2 and all(e.workspace is None for e in made)  # closed at the end
    assert len(judge.evaluations("submit")) == 5
    assert all(name.startswith("cudagym-rollout") for name in threads)
    with pytest.raises(ConfigError, match="max_workers"):
        run_episodes(make_env, WriteThenSubmit, 1, max_workers=0)


def test_run_episodes_by_count_draws_tasks_from_the_seeds(bundled: Path) -> None:
    records = run_episodes(lambda: bundled_env(bundled), WriteThenSubmit, 3, max_workers=3)
    assert len(records) == 3 and all(r.task_id.startswith("bundled/") for r in records)


def test_run_vector_episodes_over_a_sync_vector_env(tmp_path: Path) -> None:
    tree = small_kernelbench(tmp_path / "kb")
    venv = gym.make_vec("CudaKernel-L1-v0", num_envs=2, vectorization_mode="sync", judge=FakeJudge(),
                        token_counter=TOKENIZER, suite_options={"root": str(tree)})
    agents = [WriteThenSubmit(), WriteThenSubmit()]
    records = run_vector_episodes(venv, agents, episodes=3, seed=0)
    venv.close()
    assert len(records) == 3
    assert all(r.tools == ["write_file"] * 3 + ["submit"] and r.reward == 2.0 for r in records)
    assert all(r.prompt.startswith("# Task:") and r.task_id.startswith("L1/") for r in records)
    assert records[0].prompt_tokens + sum(t.tokens for t in records[0].turns) == records[0].tokens_used
    with pytest.raises(ConfigError, match="one agent per sub-env"):
        run_vector_episodes(venv, agents[:1], episodes=1)


def test_unbatch_info_follows_the_masks() -> None:
    import numpy as np

    infos = {"turn": np.array([1, 2]), "_turn": np.array([True, True]), "tool": np.array(["a", ""], dtype=object),
             "_tool": np.array([True, False]), "last_eval": {"status": np.array(["ok", "x"]),
                                                            "_status": np.array([False, True])},
             "_last_eval": np.array([True, True])}
    assert unbatch_info(infos, 0) == {"turn": 1, "tool": "a", "last_eval": {}}
    assert unbatch_info(infos, 1) == {"turn": 2, "last_eval": {"status": "x"}}


def _source(root: Path) -> Any:
    from cudagym.sources.bundled import BundledSource

    return BundledSource(root=root)
