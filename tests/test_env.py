"""CudaKernelEnv with a FakeJudge: reset, the tools through step(), episode ends, rewards, info, pickling."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
from conftest_env import SOLUTION, act, make_env, small_kernelbench, write_solution_actions
from fakes import FakeJudge, host_bound_result, incorrect_result, ok_build, timed_result
from gymnasium.error import ResetNeeded

from cudagym.env import JUDGES, CudaKernelEnv
from cudagym.errors import ConfigError, UnknownTaskError
from cudagym.judge.interface import EvalMode
from cudagym.judge.protocol import DEFAULT_PROTOCOL, get_protocol
from cudagym.judge.records import EvalStatus, to_dict
from cudagym.reward import RewardConfig
from cudagym.solution import Solution
from cudagym.task import Task


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_kernelbench(tmp_path_factory.mktemp("kb"))


@pytest.fixture
def env(tree: Path, tmp_path: Path) -> CudaKernelEnv:
    e = make_env(tree, workspace_dir=str(tmp_path))
    yield e
    e.close()


def run(env: CudaKernelEnv, actions: list[str]) -> list[tuple[str, float, bool, bool, dict]]:
    return [env.step(a) for a in actions]


def test_reset_prompt_and_info(env: CudaKernelEnv) -> None:
    obs, info = env.reset(seed=0, options={"task": "L1/1_Sigmoid"})
    task = env.task
    assert task is not None and task.id == "L1/1_Sigmoid"
    assert task.source.strip() in obs
    assert "NVIDIA H200" in obs
    assert "Baselines are plain fp32, TF32 off" in obs
    assert "|out - ref| <= 0.0001 + 0.0001 * |ref|" in obs
    assert "more than 5% faster than eager" in obs
    for name in env.tool_names:
        assert f"`{name}(" in obs
    assert obs in env.observation_space
    assert info == {
        "task_id": "L1/1_Sigmoid", "suite": "kernelbench", "level": 1, "turn": 0, "tool": "", "ok": True,
        "error": "", "tokens_used": info["tokens_used"], "token_budget": 131072,
        "token_counter": "cudagym:code-bpe-16k", "max_turns": 200, "solution_format": "extension",
        "protocol_id": DEFAULT_PROTOCOL.id, "gpu": "NVIDIA H200", "evaluated": False,
    }
    assert info["tokens_used"] > 100
    assert env.workspace is not None
    assert env.workspace.read_text("INSTRUCTIONS.md") == obs


def test_tasks_are_drawn_from_the_seed(env: CudaKernelEnv) -> None:
    first = [env.reset(seed=s)[1]["task_id"] for s in range(12)]
    again = [env.reset(seed=s)[1]["task_id"] for s in range(12)]
    assert first == again
    assert set(first) == {t.id for t in env.tasks}  # 12 draws over 4 tasks reach them all
    assert len(env.tasks) == 4


def test_task_selection_options(tree: Path, tmp_path: Path) -> None:
    env = make_env(tree, tasks=["L1/3_Softmax", "L1/2_Tanh"], workspace_dir=str(tmp_path))
    assert [t.id for t in env.tasks] == ["L1/3_Softmax", "L1/2_Tanh"]
    with pytest.raises(UnknownTaskError, match="expected one of this env's 2 tasks"):
        env.reset(options={"task": "L1/1_Sigmoid"})
    env.close()
    env = make_env(tree, task_filter=lambda t: "Tanh" in t.name, workspace_dir=str(tmp_path))
    assert [t.id for t in env.tasks] == ["L1/2_Tanh"]
    env.close()
    env = make_env(tree, level=2, workspace_dir=str(tmp_path))
    assert {t.level for t in env.tasks} == {2}
    env.close()
    with pytest.raises(UnknownTaskError, match="no task"):
        make_env(tree, task_filter=lambda t: False).reset()


def test_a_task_record_can_be_passed_directly(env: CudaKernelEnv) -> None:
    task = env.tasks[0]
    custom = Task(**{**task.to_dict(), "id": "custom/x", "metadata": {}})
    obs, info = env.reset(options={"task": custom})
    assert info["task_id"] == "custom/x"


def test_full_episode_tier_two_with_the_fake_judge(env: CudaKernelEnv) -> None:
    env.reset(seed=1)
    steps = run(env, [*write_solution_actions(), act("compile"), act("verify"), act("profile")])
    assert all(r == 0.0 and not te and not tr for _, r, te, tr, _ in steps)
    assert [i["tool"] for *_, i in steps] == ["write_file"] * 3 + ["compile", "verify", "profile"]
    assert all(i["ok"] for *_, i in steps)
    assert "last_eval" not in steps[3][4]
    assert steps[4][4]["last_eval"]["status"] == "ok"
    obs, reward, terminated, truncated, info = env.step(act("submit"))
    assert (reward, terminated, truncated) == (2.0, True, False)
    assert info["evaluated"] is True and info["episode_end"] == "submit" and info["turn"] == 7
    assert info["last_eval"]["speedup_vs_eager"] == pytest.approx(100 / 90)
    assert "Episode over. Reward 2 (tier 2" in obs
    json.dumps(info)
    judge = env._judge
    assert isinstance(judge, FakeJudge)
    assert [c[2] for c in judge.evaluations()] == ["verify", "profile", "submit"]


@pytest.mark.parametrize(("protocol", "reward"), [(None, 1.0), ("cudagym-v5", 2.0)])
def test_a_tier_inside_the_timings_own_interval_is_not_paid_under_the_default(
        tree: Path, tmp_path: Path, protocol: str | None, reward: float) -> None:
    # the same code, host-bound, 1.24x against its runner's yardstick with 95% intervals of 13% and 15%
    judge = FakeJudge(eval_fn=lambda *a: host_bound_result(), protocol=get_protocol(protocol))
    env = make_env(tree, judge, workspace_dir=str(tmp_path), **({"protocol": protocol} if protocol else {}))
    first, _ = env.reset(seed=0)
    assert ("Each step up must hold beyond the timing's own 95% interval too" in first) is (reward == 1.0)  # it says so
    for action in write_solution_actions():
        env.step(action)
    obs, paid, terminated, _, info = env.step(act("submit"))
    assert terminated and paid == reward, obs
    assert info["last_eval"]["speedup_vs_eager"] == pytest.approx(17488.8 / 14084.3)  # the verdict's, either way
    assert f"Episode over. Reward {reward:g} (tier {reward:g}" in obs
    assert ("a tier step must also clear the timing's own 95% interval, +-20.2% here" in obs) is (reward == 1.0)
    env.close()


def test_the_judge_sees_exactly_the_snapshot(tree: Path, tmp_path: Path) -> None:
    seen: list[Solution] = []

    def eval_fn(task: Task, solution: Solution, mode: EvalMode):
        seen.append(solution)
        return timed_result(50.0)

    env = make_env(tree, FakeJudge(eval_fn=eval_fn), workspace_dir=str(tmp_path))
    env.reset(seed=0)
    run(env, [*write_solution_actions(), act("submit")])
    assert dict(seen[-1].files) == SOLUTION
    env.close()


def test_step_before_reset_and_after_the_end_raise_reset_needed(env: CudaKernelEnv) -> None:
    with pytest.raises(ResetNeeded):
        env.step(act("compile"))
    env.reset(seed=0)
    env.step(act("submit"))
    with pytest.raises(ResetNeeded, match="after the episode ended"):
        env.step(act("compile"))


@pytest.mark.parametrize("action", [None, 42, b"bytes", ["list"], "", "not a call", '{"name": "x"}'])
def test_any_action_gives_an_observation_and_counts_as_a_turn(env: CudaKernelEnv, action: object) -> None:
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(action)  # type: ignore[arg-type]
    assert obs.startswith("Error:") and "Expected one tool call per action" in obs
    assert (reward, terminated, truncated, info["ok"], info["turn"]) == (0.0, False, False, False, 1)
    assert info["error"] in ("not_text", "no_tool_call", "unknown_tool")


def test_failed_tool_calls_say_why(env: CudaKernelEnv) -> None:
    env.reset(seed=0)
    obs, *_, info = env.step(act("write_file", path="../outside.py", content="x"))
    assert "'..' is not allowed" in obs and info["error"] == "refused"
    obs, *_, info = env.step(act("read_file", path="model.py", offset=0))
    assert "expected offset >= 1" in obs and info["error"] == "bad_arguments"
    obs, *_, info = env.step(act("read_file", path="model.py", offset=9999))
    assert "past the end" in obs and not info["ok"]
    obs, *_, info = env.step(act("edit_file", path="model_new.py", old="a", new="b"))
    assert "does not exist" in obs


def test_wrong_solution_scores_minus_one(tree: Path, tmp_path: Path) -> None:
    env = make_env(tree, FakeJudge(eval_fn=lambda *a: incorrect_result()), workspace_dir=str(tmp_path))
    env.reset(seed=0)
    env.step(write_solution_actions()[0])
    obs, reward, terminated, _, info = env.step(act("submit"))
    assert (reward, terminated, info["evaluated"]) == (-1.0, True, True)
    assert "FAIL" in obs and "(0, 17)" in obs
    env.close()


def test_submit_without_files_is_a_failed_build(env: CudaKernelEnv) -> None:
    env.reset(seed=0)
    obs, reward, terminated, _, info = env.step(act("submit"))
    assert (reward, terminated) == (-1.0, True)
    assert info["last_eval"]["status"] == "build_failed"
    assert "model_new.py is missing" in obs


def test_without_a_gpu_compile_runs_and_evaluations_say_so(tree: Path, tmp_path: Path) -> None:
    judge = FakeJudge(gpu="none")
    env = make_env(tree, judge, workspace_dir=str(tmp_path))
    obs, info = env.reset(seed=0)
    assert "No GPU is available to this judge" in obs and info["gpu"] == "none"
    run(env, write_solution_actions())
    obs, _, _, _, info = env.step(act("compile"))
    assert obs.startswith("Build OK") and info["ok"]
    for tool in ("verify", "profile"):
        obs, reward, terminated, _, info = env.step(act(tool))
        assert obs.startswith(f"{tool.capitalize()}: NOT RUN: no GPU is available")
        assert "Build OK" in obs  # the build still ran and is reported
        assert (reward, terminated, info["ok"], info["error"]) == (0.0, False, False, "no_gpu")
    obs, reward, terminated, truncated, info = env.step(act("submit"))
    assert (reward, terminated, truncated, info["evaluated"]) == (0.0, True, False, False)
    assert info["last_eval"]["status"] == "no_gpu"
    assert "not evaluated" in obs
    assert judge.evaluations() == []  # never asked a GPU-less judge to evaluate
    assert len([c for c in judge.calls if c[0] == "build"]) == 4
    env.close()


def test_truncation_at_max_turns_judges_the_files(tree: Path, tmp_path: Path) -> None:
    judge = FakeJudge()
    env = make_env(tree, judge, max_turns=4, workspace_dir=str(tmp_path))
    env.reset(seed=0)
    steps = run(env, write_solution_actions())
    assert not any(te or tr for _, _, te, tr, _ in steps)
    obs, reward, terminated, truncated, info = env.step(act("list_files"))
    assert (terminated, truncated, reward, info["episode_end"]) == (False, True, 2.0, "max_turns")
    assert "cut off (max_turns)" in obs and "Final evaluation" in obs
    assert [c[2] for c in judge.evaluations()] == ["submit"]
    env.close()


def test_truncation_without_evaluation(tree: Path, tmp_path: Path) -> None:
    judge = FakeJudge()
    env = make_env(tree, judge, max_turns=1, evaluate_on_truncation=False, workspace_dir=str(tmp_path))
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(act("list_files"))
    assert (reward, terminated, truncated, info["evaluated"]) == (0.0, False, True, False)
    assert judge.evaluations() == []
    env.close()


def test_truncation_at_the_token_budget(tree: Path, tmp_path: Path) -> None:
    env = make_env(tree, token_budget=10_000, workspace_dir=str(tmp_path))
    _, info = env.reset(seed=0)
    budget_left = 10_000 - info["tokens_used"]
    assert budget_left > 0
    big = "x = 1  # " + "word " * budget_left + "\n"  # at least one token per word
    obs, reward, terminated, truncated, info = env.step(act("write_file", path="model_new.py", content=big))
    assert truncated and info["episode_end"] == "token_budget" and info["tokens_used"] >= 10_000
    assert "cut off (token_budget)" in obs
    env.close()


def test_tokens_count_prompt_actions_and_observations(env: CudaKernelEnv) -> None:
    _, info = env.reset(seed=0)
    counter = env._token_counter()
    action = act("list_files")
    obs, *_, after = env.step(action)
    assert after["tokens_used"] == info["tokens_used"] + counter.count(action) + counter.count(obs)


def test_scoring_best_rejudges_the_best_state_in_submit_mode(tree: Path, tmp_path: Path) -> None:
    def eval_fn(task: Task, solution: Solution, mode: EvalMode):
        return timed_result(50.0) if "fast" in solution.files["model_new.py"] else incorrect_result()

    for scoring, expected, submits in (("final", -1.0, 1), ("best", 3.0, 2)):
        judge = FakeJudge(eval_fn=eval_fn)
        env = make_env(tree, judge, scoring=scoring, workspace_dir=str(tmp_path))
        env.reset(seed=0)
        run(env, [act("write_file", path="model_new.py", content="# fast"), act("profile"),
                  act("write_file", path="model_new.py", content="# broken")])
        obs, reward, terminated, _, info = env.step(act("submit"))
        assert (reward, terminated) == (expected, True), scoring
        assert len(judge.evaluations("submit")) == submits
        if scoring == "best":
            assert "judged again in submit mode" in obs and info["last_eval"]["status"] == "ok"
        env.close()


def test_speedup_reward_mode(tree: Path, tmp_path: Path) -> None:
    env = make_env(tree, FakeJudge(eval_fn=lambda *a: timed_result(45.0, 100.0, 90.0)), reward="speedup",
                   workspace_dir=str(tmp_path))
    env.reset(seed=0)
    env.step(write_solution_actions()[0])
    _, reward, *_ = env.step(act("submit"))
    assert reward == pytest.approx(2.0)
    assert env.reward_config == RewardConfig(mode="speedup", interval=True)  # the default protocol asks it
    env.close()


def test_reward_thresholds_follow_the_protocol(tree: Path) -> None:
    protocol = get_protocol(None).with_changes(id="strict", threshold=0.2)
    env = make_env(tree, FakeJudge(protocol=protocol))
    assert env.reward_config.threshold_vs_eager == 0.2 == env.reward_config.threshold_vs_compile
    assert make_env(tree, reward={"threshold_vs_compile": 0.3}).reward_config.threshold_vs_compile == 0.3


def test_a_judge_that_raises_is_reported_not_propagated(tree: Path, tmp_path: Path) -> None:
    def boom(*args: object):
        raise RuntimeError("worker pool is gone")

    env = make_env(tree, FakeJudge(eval_fn=boom), workspace_dir=str(tmp_path))
    env.reset(seed=0)
    env.step(write_solution_actions()[0])
    obs, reward, terminated, _, info = env.step(act("submit"))
    assert (reward, terminated, info["evaluated"]) == (0.0, True, False)
    assert "the judge failed: RuntimeError: worker pool is gone" in obs
    assert info["last_eval"]["status"] == EvalStatus.INFRA_ERROR.value
    env.close()


def test_long_tool_results_are_truncated_with_a_marker(env: CudaKernelEnv) -> None:
    env.reset(seed=0)
    env.step(act("write_file", path="model_new.py", content="".join(f"line {i}\n" for i in range(5000))))
    obs, _, _, truncated, _ = env.step(act("read_file", path="model_new.py", limit=5000))
    assert not truncated
    assert len(obs) <= env.max_result_chars
    assert "characters truncated ...]" in obs
    assert obs.startswith("model_new.py (lines 1-5000 of 5000)")
    assert obs.rstrip().endswith("line 4999")


def test_configuration_errors(tree: Path) -> None:
    with pytest.raises(ConfigError, match="max_turns"):
        make_env(tree, max_turns=0)
    with pytest.raises(ConfigError, match="render_mode"):
        make_env(tree, render_mode="human")
    with pytest.raises(ConfigError, match="protocol to match the judge"):
        make_env(tree, protocol="cuda-agent")
    with pytest.raises(ConfigError, match="unknown solution format"):
        make_env(tree, solution_format="ptx")
    with pytest.raises(ConfigError, match="scoring"):
        make_env(tree, scoring="median")
    with pytest.raises(ConfigError, match="expected judge"):
        CudaKernelEnv("kernelbench", level=1, suite_options={"root": str(tree)}, judge="remote",
                      token_counter="cudagym:code-bpe-16k").reset()


def test_judge_registry_and_ownership(tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[FakeJudge] = []

    def factory(protocol):
        made.append(FakeJudge(protocol=protocol))
        return made[-1]

    monkeypatch.setitem(JUDGES, "fake", factory)
    env = make_env(tree, judge="fake", protocol="kernelbench", workspace_dir=str(tmp_path))
    env.reset(seed=0)
    assert made[0].protocol.id == "kernelbench-v0.9"
    env.close()
    env.close()
    assert made[0].closed == 1  # the env made it, so the env closes it (once)
    passed = FakeJudge()
    env = make_env(tree, passed, workspace_dir=str(tmp_path))
    env.reset(seed=0)
    env.close()
    assert passed.closed == 0  # the caller's judge is the caller's to close


def test_close_removes_the_workspace_and_is_idempotent(env: CudaKernelEnv, tmp_path: Path) -> None:
    env.reset(seed=0)
    root = env.workspace.root
    assert root.parent == tmp_path
    env.reset(seed=1)
    assert not root.exists()  # reset cleans the previous episode
    env.close()
    env.close()
    assert list(tmp_path.iterdir()) == []


def test_pickled_env_continues_in_its_own_workspace(env: CudaKernelEnv, tree: Path) -> None:
    env.reset(seed=0)
    env.step(write_solution_actions()[0])
    clone = pickle.loads(pickle.dumps(env))
    try:
        assert clone.workspace.root != env.workspace.root
        obs, *_ = clone.step(act("read_file", path="model_new.py"))
        assert "cuda_extension.relu" in obs
        clone.step(act("write_file", path="model_new.py", content="changed"))
        assert "changed" not in env.workspace.read_text("model_new.py")
        _, reward, terminated, *_ = clone.step(act("submit"))
        assert terminated
    finally:
        clone.close()
        clone.close()
    never_reset = pickle.loads(pickle.dumps(make_env(tree)))
    assert never_reset.workspace is None
    never_reset.close()


def test_render_ansi_and_tool_schemas(tree: Path, tmp_path: Path) -> None:
    env = make_env(tree, render_mode="ansi", workspace_dir=str(tmp_path))
    obs, _ = env.reset(seed=0)
    assert env.render() == obs
    obs, *_ = env.step(act("list_files"))
    assert env.render() == obs
    names = [s["function"]["name"] for s in env.tool_schemas]
    assert tuple(names) == env.tool_names
    env.close()
    assert make_env(tree).render() is None


def test_info_last_eval_is_the_records_dict(env: CudaKernelEnv) -> None:
    env.reset(seed=0)
    run(env, write_solution_actions())
    *_, info = env.step(act("profile"))
    assert info["last_eval"] == to_dict(timed_result(90.0))
    assert json.loads(json.dumps(info)) == info


def test_an_action_of_a_million_spaces_is_an_observation_not_an_exception(env: CudaKernelEnv) -> None:
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(" " * 1_000_000)
    assert obs.startswith("Error:") and info["ok"] is False and reward == 0.0
    assert not terminated and info["tokens_used"] > 0


def test_an_unknown_judge_name_fails_at_construction(tree: Path) -> None:
    import gymnasium as gym

    with pytest.raises(ConfigError, match=r"expected judge to be a Judge or one of \['local', 'ray'\], got 'rya'"):
        gym.make("CudaKernel-L1-v0", suite_options={"root": str(tree)}, judge="rya")


def test_judge_options_must_be_plain_data_and_go_with_a_backend_name(tree: Path) -> None:
    import gymnasium as gym

    with pytest.raises(ConfigError, match="plain data"):
        gym.make("CudaKernel-L1-v0", suite_options={"root": str(tree)}, judge_options={"build_fn": print})
    with pytest.raises(ConfigError, match="one or the other"):
        gym.make("CudaKernel-L1-v0", suite_options={"root": str(tree)}, judge=FakeJudge(),
                 judge_options={"devices": "none"})


def test_a_task_name_without_its_prefix_gets_a_did_you_mean(env: CudaKernelEnv) -> None:
    full = env.tasks[1].id  # e.g. L1/2_Name
    with pytest.raises(UnknownTaskError, match=f"did you mean '{full}'"):
        env.reset(options={"task": full.split("/", 1)[1]})
    with pytest.raises(UnknownTaskError, match=f"did you mean '{full}'"):
        env.reset(options={"task": full + "x"})


def test_a_reset_during_a_running_step_keeps_the_new_episode(tree: Path, tmp_path: Path) -> None:
    import threading

    started, release = threading.Event(), threading.Event()

    def blocking_build(task, solution):
        started.set()
        assert release.wait(30)
        return ok_build(solution.format)

    env = make_env(tree, FakeJudge(build_fn=blocking_build), workspace_dir=str(tmp_path), render_mode="ansi")
    try:
        first, second = env.tasks[0].id, env.tasks[1].id
        env.reset(options={"task": first})
        env.step(act("write_file", path="model_new.py", content="import cuda_extension\n"))
        old: dict = {}
        worker = threading.Thread(target=lambda: old.update(zip(("obs", "r", "te", "tr", "info"),
                                                                env.step(act("compile")), strict=True)))
        worker.start()
        assert started.wait(30)
        prompt, info = env.reset(options={"task": second})
        release.set()
        worker.join(30)
        assert old["info"]["task_id"] == first and old["obs"].startswith("Build OK")
        assert env.render() == prompt and env.task.id == second and info["turn"] == 0
        obs, *_ = env.step(act("list_files"))  # the new episode goes on from its own state
        assert "model_new.py" not in obs
    finally:
        release.set()
        env.close()
