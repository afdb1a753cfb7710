"""Registered ids: specs, gym.make both ways, and check_env for every id on a machine without a GPU."""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from conftest import write_bundled_tree
from conftest_env import TOKENIZER
from fakes import FakeJudge
from gymnasium.utils.env_checker import check_env

import cudagym
from cudagym.env import CudaKernelEnv
from cudagym.errors import DataUnavailableError
from cudagym.registration import ENV_IDS, MAX_EPISODE_STEPS, register_envs
from cudagym.sources.bundled import BundledSource

IDS = ("CudaKernel-L1-v0", "CudaKernel-L2-v0", "CudaKernel-L3-v0", "CudaKernel-L4-v0", "CudaKernel-Ops6K-v0",
       "CudaKernel-Bundled-v0")


def test_every_id_is_registered_on_import() -> None:
    assert tuple(ENV_IDS) == IDS
    for env_id in IDS:
        spec = gym.spec(env_id)
        assert spec.entry_point == "cudagym.env:CudaKernelEnv"
        assert spec.nondeterministic is True
        assert spec.max_episode_steps == MAX_EPISODE_STEPS == 200
    assert gym.spec("CudaKernel-L3-v0").kwargs == {"suite": "kernelbench", "level": 3}
    assert gym.spec("CudaKernel-Ops6K-v0").kwargs == {"suite": "ops6k"}
    assert gym.spec("CudaKernel-Bundled-v0").kwargs == {"suite": "bundled"}
    assert cudagym.CudaKernelEnv is CudaKernelEnv


def test_registering_again_is_a_quiet_no_op() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        register_envs()


def test_make_is_cheap_and_reaches_the_env_both_ways(kernelbench_tree: Path) -> None:
    # gym.make loads no tasks, judge or tokenizer: a wrong data path only shows at reset
    env = gym.make("CudaKernel-L1-v0", suite_options={"root": "/nonexistent"})
    assert isinstance(env.unwrapped, CudaKernelEnv)
    assert env.unwrapped._pool is None and env.unwrapped._judge is None and env.unwrapped._counter is None
    with pytest.raises(DataUnavailableError):
        env.reset(seed=0)
    env.close()
    env = gym.make("cudagym:CudaKernel-L1-v0", judge=FakeJudge(), token_counter=TOKENIZER,
                   suite_options={"root": str(kernelbench_tree)})
    obs, info = env.reset(seed=0)
    assert info["task_id"].startswith("L1/") and len(env.unwrapped.tasks) == 100
    env.close()


def test_make_kwargs_override_the_spec(kernelbench_tree: Path) -> None:
    env = gym.make("CudaKernel-L2-v0", judge=FakeJudge(), token_counter=TOKENIZER, tasks=["L2/6_Linear_LayerNorm"],
                   suite_options={"root": str(kernelbench_tree)}, solution_format="inline", reward="speedup",
                   max_turns=50, max_episode_steps=50)
    inner = env.unwrapped
    assert [t.id for t in inner.tasks] == ["L2/6_Linear_LayerNorm"]
    assert inner.max_turns == 50 and inner.reward_config.mode == "speedup"
    obs, _ = env.reset(seed=0)
    assert "## Solution format: inline" in obs
    env.close()


def _options(env_id: str, kernelbench_tree: Path, ops6k_parquet: Path) -> dict[str, Any]:
    data = {"kernelbench": {"root": str(kernelbench_tree)}, "ops6k": {"path": str(ops6k_parquet)}}
    suite = gym.spec(env_id).kwargs["suite"]
    options: dict[str, Any] = {"judge": FakeJudge(gpu="none"), "token_counter": TOKENIZER}
    if suite in data:
        options["suite_options"] = data[suite]
    return options


def _bundled_shipped() -> bool:
    try:
        return len(BundledSource()) > 0
    except DataUnavailableError:
        return False


@pytest.mark.parametrize("env_id", IDS)
def test_check_env_passes_for_every_id_without_a_gpu(
    env_id: str, kernelbench_tree: Path, ops6k_parquet: Path, tmp_path: Path,
) -> None:
    if env_id == "CudaKernel-Bundled-v0" and not _bundled_shipped():
        pytest.skip("the bundled tasks (envs/bundled/tasks) are not in this tree yet; "
                    "test_check_env_on_a_bundled_layout covers the id on a fixture tree")
    env = gym.make(env_id, workspace_dir=str(tmp_path), **_options(env_id, kernelbench_tree, ops6k_parquet))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # check_env's warnings are failures here
        check_env(env.unwrapped)
    env.close()
    assert list(tmp_path.iterdir()) == []


def test_check_env_on_a_bundled_layout(tmp_path: Path) -> None:
    root = write_bundled_tree(tmp_path / "bundled")
    env = gym.make("CudaKernel-Bundled-v0", judge=FakeJudge(gpu="none"), token_counter=TOKENIZER,
                   suite_options={"root": str(root)})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped)
    assert {t.suite for t in env.unwrapped.tasks} == {"bundled"}
    env.close()


def test_check_env_on_the_raw_env_checks_reset_determinism(kernelbench_tree: Path, tmp_path: Path) -> None:
    # without a spec, check_env also asserts that a seeded reset and step are deterministic
    env = CudaKernelEnv("kernelbench", level=3, suite_options={"root": str(kernelbench_tree)},
                        judge=FakeJudge(gpu="none"), token_counter=TOKENIZER, workspace_dir=str(tmp_path))
    assert env.spec is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", message=".*alternative render modes.*")  # needs a spec: tested above
        check_env(env)
    env.close()


def test_made_env_pickles_and_closes_twice(kernelbench_tree: Path) -> None:
    env = gym.make("CudaKernel-L1-v0", judge=FakeJudge(), token_counter=TOKENIZER,
                   suite_options={"root": str(kernelbench_tree)})
    env.reset(seed=3)
    clone = pickle.loads(pickle.dumps(env))
    obs, reward, terminated, truncated, info = clone.step('{"name": "list_files", "arguments": {}}')
    assert "model.py" in obs and info["turn"] == 1
    assert clone.unwrapped.workspace.root != env.unwrapped.workspace.root
    for e in (env, clone):
        e.close()
        e.close()


def test_time_limit_agrees_with_max_turns(kernelbench_tree: Path) -> None:
    env = gym.make("CudaKernel-L1-v0", judge=FakeJudge(), token_counter=TOKENIZER, max_turns=3,
                   max_episode_steps=3, suite_options={"root": str(kernelbench_tree)})
    env.reset(seed=0)
    results = [env.step('{"name": "list_files"}') for _ in range(3)]
    *_, truncated, info = results[-1]
    assert truncated and info["episode_end"] == "max_turns" and info["evaluated"]
    env.close()


def test_check_env_bundled_as_shipped_with_the_default_judge(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # the id exactly as a user makes it: default judge (local; no GPU here) and default token counter
    if not _bundled_shipped():
        pytest.skip("the bundled tasks (envs/bundled/tasks) are not in this tree yet")
    monkeypatch.setenv("CUDAGYM_OFFLINE", "1")  # the default counter falls back to the shipped BPE at once
    monkeypatch.setenv("CUDAGYM_CACHE_DIR", str(tmp_path / "cache"))
    env = gym.make("CudaKernel-Bundled-v0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped)
    obs, info = env.reset(seed=0)
    assert info["token_counter"] in ("tiktoken:o200k_base", "cudagym:code-bpe-16k")
    assert info["gpu"] and info["task_id"].startswith("bundled/")
    env.close()
