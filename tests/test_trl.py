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
    assert prompt.startswith("\n\n# Task:") and TASK in prompt  # TRL appends it to "Make it fast." as it is
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


def test_one_grpo_step_on_cpu_with_a_tiny_random_model(root: Path, tmp_path: Path) -> None:
    # A real GRPOTrainer step: TRL probes the class for its tools, calls reset(**row) per rollout, generates
    # with a random 2-layer Qwen3 and a byte-level BPE trained here (no downloads), and scores with get_reward.
    pytest.importorskip("trl")
    import functools

    import torch
    from datasets import Dataset
    from tiny_lm import tiny_tokenizer
    from transformers import Qwen3Config, Qwen3ForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    factory = functools.partial(CudaKernelTools, "bundled", suite_options={"root": str(root)}, judge=FakeJudge(),
                                token_counter=TOKENIZER)
    tokenizer = tiny_tokenizer([factory().reset(task=TASK)])
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, max_position_embeddings=16384, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id))
    rows = Dataset.from_list([{"prompt": [{"role": "user", "content": "Make it fast."}], "task": TASK}] * 2)
    args = GRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=2, num_generations=2,
                      max_completion_length=8, max_steps=1, report_to="none", use_cpu=True, bf16=False,
                      save_strategy="no", max_tool_calling_iterations=1, logging_steps=1)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=args, train_dataset=rows,
                          environment_factory=factory)
    output = trainer.train()
    assert output.global_step == 1
    logged = trainer.state.log_history[0]
    # the random model writes no tool call, so each rollout is scored by submitting the empty workspace
    assert logged["rewards/CudaKernelTools/mean"] == -1.0 and "tools/call_frequency" in logged
