"""verl: KernelSessions keyed by request id, and CudaKernelAgentLoop built as verl builds it, generating
through a stand-in server manager that replays a solution as token ids (no GPU, no Ray cluster)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import write_bundled_tree
from conftest_env import TOKENIZER
from fakes import FakeJudge

from cudagym.env import CudaKernelEnv
from cudagym.errors import ConfigError
from cudagym.sources.bundled import BundledSource

TASK = "bundled/L1/01_ReLU"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return write_bundled_tree(tmp_path / "bundled")


def env_kwargs(root: Path) -> dict[str, Any]:
    return {"suite": "bundled", "suite_options": {"root": str(root)}, "judge": FakeJudge(), "token_counter": TOKENIZER}


def test_sessions_are_keyed_by_request_id(root: Path) -> None:
    from cudagym.integrations.verl import KernelSessions

    made: list[CudaKernelEnv] = []

    def make() -> CudaKernelEnv:
        made.append(CudaKernelEnv(**env_kwargs(root)))
        return made[-1]

    sessions = KernelSessions(make, max_sessions=2)
    prompt, schemas = sessions.open("a", task=TASK)
    assert prompt.startswith("# Task:") and len(schemas) == 8
    sessions.open("b", task=TASK)
    with pytest.raises(ConfigError, match="already has a session"):
        sessions.open("a", task=TASK)
    with pytest.raises(ConfigError, match="at most 2"):
        sessions.open("c", task=TASK)
    write = json.dumps({"name": "write_file", "arguments": {"path": "model_new.py", "content": "A = 1\n"}})
    text, done = sessions.step("a", write)
    assert text.startswith("Created model_new.py") and not done
    text, _ = sessions.step("b", '{"name": "read_file", "arguments": {"path": "model_new.py"}}')
    assert "A = 1" not in text  # separate workspaces
    assert sessions.finish("a") == 2.0  # submitted on finish (the FakeJudge passes any model_new.py)
    assert len(sessions) == 1
    sessions.open("c", task=TASK)  # reuses a's env
    assert len(made) == 2
    with pytest.raises(ConfigError, match="open session"):
        sessions.step("zzz", write)
    sessions.close()


class ReplayServer:
    """Stands in for verl's LLM server manager: replies with the next scripted tool call, as token ids."""

    def __init__(self, tokenizer: Any, files: dict[str, str]) -> None:
        calls = [("write_file", {"path": p, "content": t}) for p, t in sorted(files.items())]
        self.replies = [f'<tool_call>\n{json.dumps({"name": n, "arguments": a})}\n</tool_call>'
                        for n, a in [*calls, ("compile", {}), ("submit", {})]]
        self.tokenizer = tokenizer
        self.requests: list[tuple[str, int]] = []

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       **kwargs: Any) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        self.requests.append((request_id, len(prompt_ids)))
        text = self.replies[min(len(self.requests) - 1, len(self.replies) - 1)]
        return TokenOutput(token_ids=self.tokenizer.encode(text + "<|im_end|>", add_special_tokens=False))


def test_the_agent_loop_plays_an_episode_with_masks_and_reward(root: Path) -> None:
    pytest.importorskip("verl.experimental.agent_loop.agent_loop")
    from omegaconf import OmegaConf
    from tiny_lm import tiny_tokenizer
    from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, DictConfigWrap, _agent_loop_registry

    from cudagym.integrations.verl import CudaKernelAgentLoop  # first access: defines and registers it

    assert _agent_loop_registry["cudagym_kernel"]["_target_"] == "cudagym.integrations.verl.CudaKernelAgentLoop"
    files = dict(BundledSource(root=root).solution(TASK).files)
    tokenizer = tiny_tokenizer([CudaKernelEnv(**env_kwargs(root)).reset(options={"task": TASK})[0],
                                *files.values()], vocab_size=800)
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {
        "response_length": 20000, "prompt_length": 20000, "multi_turn": {"max_assistant_turns": 10}}}})
    server = ReplayServer(tokenizer, files)
    CudaKernelAgentLoop.configure(**env_kwargs(root))
    loop = CudaKernelAgentLoop(trainer_config=DictConfigWrap(config), server_manager=server, tokenizer=tokenizer,
                               processor=None, dataset_cls=None, data_config=DictConfigWrap(OmegaConf.create({})))
    row = {"raw_prompt": [{"role": "user", "content": "Make it fast."}], "extra_info": {"task": TASK}}
    # verl runs agent loops on the event loop the base class captured (its worker's)
    output: AgentLoopOutput = loop.loop.run_until_complete(loop.run({"temperature": 1.0}, **row))
    assert output.reward_score == 2.0  # the replayed solution, submitted through the env
    assert len(server.requests) == len(files) + 2 and len({r for r, _ in server.requests}) == 1
    assert len(output.response_ids) == len(output.response_mask)
    generated = [t for t, m in zip(output.response_ids, output.response_mask, strict=True) if m == 1]
    env_tokens = [t for t, m in zip(output.response_ids, output.response_mask, strict=True) if m == 0]
    assert '"name": "submit"' in tokenizer.decode(generated) and "Build OK" in tokenizer.decode(env_tokens)
    assert "Build OK" not in tokenizer.decode(generated)
    assert "Make it fast." in tokenizer.decode(output.prompt_ids) and TASK in tokenizer.decode(output.prompt_ids)
    # verl's ToolAgentLoop count (user + assistant turns + 1): n replies, n - 1 tool messages, the prompt
    assert output.num_turns == 2 * (len(files) + 2) and len(CudaKernelAgentLoop.sessions) == 0
    CudaKernelAgentLoop.configure()
