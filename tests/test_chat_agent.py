"""ChatAgent against a stand-in chat-completions server on loopback: tool calls, text fallback, errors,
slow replies, concurrency; and the RandomAgent."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import write_bundled_tree
from conftest_env import TOKENIZER
from cudagym.baselines.chat import ChatAgent, ChatConfig
from cudagym.baselines.random_agent import RandomAgent
from cudagym.baselines.standin import ChatStandIn, Reply, completion, solution_replies, text_message
from fakes import FakeJudge
from script_module import load_script

from cudagym.env import CudaKernelEnv
from cudagym.errors import ConfigError
from cudagym.rollout import AgentError, EpisodeRecord, EpisodeSpec, run_episode, run_episodes
from cudagym.sources.bundled import BundledSource
from cudagym.toolcalls import ToolCall, parse_action

TASK = "bundled/L1/01_ReLU"


@pytest.fixture
def bundled(tmp_path: Path) -> Path:
    return write_bundled_tree(tmp_path / "bundled")


@pytest.fixture
def files(bundled: Path) -> dict[str, str]:
    return dict(BundledSource(root=bundled).solution(TASK).files)


def make_env(root: Path) -> CudaKernelEnv:
    return CudaKernelEnv("bundled", suite_options={"root": str(root)}, judge=FakeJudge(), token_counter=TOKENIZER)


def scripted(*replies: Reply) -> Any:
    """A reply function that answers with ``replies`` in turn (the last one again when they run out)."""
    queue = list(replies)

    def reply(request: Mapping[str, Any]) -> Reply:
        return queue.pop(0) if len(queue) > 1 else queue[0]

    return reply


def ok_reply() -> Reply:
    return Reply(completion(text_message("list_files", {}), prompt_tokens=5, completion_tokens=2))


def test_native_tool_calls_play_a_whole_episode(bundled: Path, files: dict[str, str]) -> None:
    env = make_env(bundled)
    with ChatStandIn(solution_replies(files)) as server:
        agent = ChatAgent(base_url=server.url, model="stand-in", api_key="sk-test")
        record = run_episode(env, agent, options={"task": TASK})
    assert record.tools == ["write_file"] * 3 + ["compile", "verify", "profile", "submit"]
    assert (record.reward, record.terminated) == (2.0, True)
    first = server.requests[0]
    assert first["model"] == "stand-in" and first["tools"] == env.unwrapped.tool_schemas
    assert first["messages"] == [{"role": "user", "content": record.prompt}]
    assert server.headers[0]["authorization"] == "Bearer sk-test"
    # every tool call in the transcript is answered by a tool message with its id
    calls = [m for m in agent.messages if m["role"] == "assistant"]
    answers = [m for m in agent.messages if m["role"] == "tool"]
    assert [c["tool_calls"][0]["id"] for c in calls[:-1]] == [a["tool_call_id"] for a in answers]
    assert answers[0]["content"] == record.turns[0].observation
    # token accounting: per turn from the server's usage, summed in the record
    assert all(t.usage["completion_tokens"] > 0 for t in record.turns)
    assert record.model_tokens == agent.usage and agent.usage["total_tokens"] > 0
    assert all(ex.attempts == 1 and ex.tool_mode == "native" for ex in agent.exchanges)
    saved = json.loads(json.dumps(agent.transcript()))
    assert saved["messages"] == agent.messages and saved["exchanges"][0]["usage"] == dict(record.turns[0].usage)
    env.close()
    agent.close()


def test_text_fallback_when_the_endpoint_rejects_tools(bundled: Path, files: dict[str, str]) -> None:
    replay = solution_replies(files)

    def no_tools(request: Mapping[str, Any]) -> Reply:
        if "tools" in request:
            return Reply({"error": {"message": "tool calling needs --enable-auto-tool-choice"}}, status=400)
        return replay(request)

    env = make_env(bundled)
    with ChatStandIn(no_tools) as server:
        agent = ChatAgent(base_url=server.url, model="m")
        record = run_episode(env, agent, options={"task": TASK})
    assert record.terminated and record.reward == 2.0
    assert record.turns[0].action.startswith("Next I call write_file.\n<tool_call>")
    # one rejected request with tools, then text for the rest of the episode
    assert ["tools" in r for r in server.requests] == [True] + [False] * len(record.turns)
    assert [m["role"] for m in agent.messages[:3]] == ["user", "assistant", "user"]
    assert all(ex.tool_mode == "text" for ex in agent.exchanges)
    env.close()


def test_text_mode_never_sends_tools(bundled: Path, files: dict[str, str]) -> None:
    env = make_env(bundled)
    with ChatStandIn(solution_replies(files)) as server:
        agent = ChatAgent(base_url=server.url, model="m", tool_mode="text", temperature=0.2, max_tokens=64,
                          system_prompt="You write CUDA.")
        record = run_episode(env, agent, options={"task": TASK})
    assert record.terminated and not any("tools" in r for r in server.requests)
    assert server.requests[0]["temperature"] == 0.2 and server.requests[0]["max_tokens"] == 64
    assert server.requests[0]["messages"][0] == {"role": "system", "content": "You write CUDA."}
    env.close()


def test_retries_with_backoff_on_5xx_and_429() -> None:
    waits: list[float] = []
    busy = Reply({"error": {"message": "busy"}}, status=429, headers={"Retry-After": "2"})
    down = Reply({"error": {"message": "overloaded"}}, status=503)
    with ChatStandIn(scripted(down, busy, ok_reply())) as server:
        agent = ChatAgent(base_url=server.url, model="m", backoff_s=0.5, sleep=waits.append)
        action = agent.act("the prompt")
    assert isinstance(parse_action(action), ToolCall)
    assert agent.exchanges[0].attempts == 3 and len(server.requests) == 3
    assert 0.25 <= waits[0] <= 0.5 and waits[1] == 2.0  # jittered backoff, then the server's Retry-After
    assert agent.last_usage() == {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}


def test_gives_up_after_the_retries_and_the_episode_records_why(bundled: Path) -> None:
    waits: list[float] = []
    with ChatStandIn(scripted(Reply({"error": {"message": "boom"}}, status=500))) as server:
        agent = ChatAgent(base_url=server.url, model="m", max_retries=2, sleep=waits.append)
        env = make_env(bundled)
        record = run_episode(env, agent, options={"task": TASK})
    assert record.episode_end == "agent_error" and "failed 3 times" in record.agent_error
    assert "HTTP 500" in record.agent_error and len(waits) == 2 and len(server.requests) == 3
    env.close()


@pytest.mark.parametrize(("reply", "match"), [
    (Reply({"error": {"message": "bad key"}}, status=401), "refused the request: HTTP 401"),
    (Reply("<html>gateway</html>"), "expected a chat completion"),
    (Reply({"choices": []}), "expected a chat completion"),
])
def test_errors_that_are_not_retried(reply: Reply, match: str) -> None:
    with ChatStandIn(scripted(reply)) as server:
        agent = ChatAgent(base_url=server.url, model="m", sleep=lambda s: None)
        with pytest.raises(AgentError, match=match):
            agent.act("prompt")
    assert len(server.requests) == 1


def test_slow_replies_time_out_then_a_retry_succeeds() -> None:
    slow = Reply(completion(text_message("compile", {})), delay_s=2.0)
    with ChatStandIn(scripted(slow, ok_reply())) as server:
        agent = ChatAgent(base_url=server.url, model="m", timeout_s=0.3, max_retries=1, sleep=lambda s: None)
        started = time.perf_counter()
        action = agent.act("prompt")
        elapsed = time.perf_counter() - started
    assert json.loads(action.split("<tool_call>")[1].split("</tool_call>")[0])["name"] == "list_files"
    assert agent.exchanges[0].attempts == 2 and 0.3 <= elapsed < 1.5


def test_a_reply_slower_than_every_attempt_is_an_agent_error() -> None:
    with ChatStandIn(scripted(Reply(completion(text_message("compile", {})), delay_s=5.0))) as server:
        agent = ChatAgent(base_url=server.url, model="m", timeout_s=0.2, max_retries=1, sleep=lambda s: None)
        with pytest.raises(AgentError, match="ReadTimeout"):
            agent.act("prompt")


def test_unreachable_endpoint_is_an_agent_error() -> None:
    server = ChatStandIn(scripted(ok_reply()))
    url = server.url
    server.stop()  # bound, never served: the port refuses connections
    agent = ChatAgent(base_url=url, model="m", max_retries=1, sleep=lambda s: None)
    with pytest.raises(AgentError, match="ConnectError"):
        agent.act("prompt")


def test_config_from_arguments_or_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CUDAGYM_CHAT_BASE_URL", "OPENAI_BASE_URL", "CUDAGYM_CHAT_MODEL", "OPENAI_MODEL",
                 "CUDAGYM_CHAT_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError, match="expected a model name"):
        ChatConfig().resolved()
    monkeypatch.setenv("OPENAI_MODEL", "gpt-x")
    monkeypatch.setenv("CUDAGYM_CHAT_BASE_URL", "http://127.0.0.1:9/v1/")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    config = ChatConfig().resolved()
    assert (config.model, config.base_url, config.api_key) == ("gpt-x", "http://127.0.0.1:9/v1", "sk-env")
    assert ChatConfig(model="mine").resolved().model == "mine"
    with pytest.raises(ConfigError, match="http://"):
        ChatConfig(base_url="127.0.0.1:8000").resolved()
    with pytest.raises(ConfigError, match="tool_mode"):
        ChatConfig(tool_mode="always").resolved()  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="ChatConfig fields"):
        ChatAgent(temprature=0.1)


def test_concurrent_episodes_share_one_client(bundled: Path, files: dict[str, str]) -> None:
    with ChatStandIn(solution_replies(files)) as server:
        make_agent = ChatAgent.factory(ChatConfig(base_url=server.url, model="m"))
        records = run_episodes(lambda: make_env(bundled), make_agent,
                               [EpisodeSpec.for_task(TASK) for _ in range(4)], max_workers=4)
    assert all(r.terminated and r.reward == 2.0 and len(r.turns) == 7 for r in records)
    assert len(server.requests) == 28


def test_the_stand_in_stops_by_itself() -> None:
    server = ChatStandIn(scripted(ok_reply()), lifetime_s=0.3, max_requests=1).start()
    client = httpx.Client(base_url=server.url, timeout=2.0)
    assert client.post("/nowhere", json={}).status_code == 404
    assert client.post("/chat/completions", json={}).status_code == 200
    assert client.post("/chat/completions", json={}).status_code == 503  # past the request cap
    deadline = time.monotonic() + 3
    while not server.stopped and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.stopped
    with pytest.raises(httpx.ConnectError):
        httpx.post(server.url + "/chat/completions", json={}, timeout=1.0)
    client.close()


def test_random_agent_sends_valid_calls_and_is_seeded(bundled: Path) -> None:
    agent = RandomAgent(seed=3)
    assert RandomAgent(seed=3).act("") == agent.act("") != RandomAgent(seed=4).act("")
    agent.reset()
    many = [agent.act("") for _ in range(300)]
    agent.reset()
    assert [agent.act("") for _ in range(300)] == many
    assert all(isinstance(parse_action(a), ToolCall) for a in many)
    assert {json.loads(a)["name"] for a in many} == set(CudaKernelEnv().tool_names)
    env = make_env(bundled)
    record = run_episode(env, RandomAgent(seed=1, weights={"write_file": 3, "compile": 1, "submit": 0.2}),
                         options={"task": TASK})
    assert record.terminated and record.tools[-1] == "submit" and set(record.tools) <= {"write_file", "compile",
                                                                                        "submit"}
    env.close()
    with pytest.raises(ConfigError, match="weights"):
        RandomAgent(weights={"fly": 1.0})


def test_the_chat_episode_example_runs_through_the_stand_in(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:

    root = write_bundled_tree(tmp_path / "bundled")
    module = load_script("examples/chat_episode.py", "chat_episode")
    record = module.main(["--task", TASK, "--out", str(tmp_path / "out"), "--bundled-root", str(root),
                          "--tokenizer", TOKENIZER], judge=FakeJudge())
    out = capsys.readouterr().out
    assert record.terminated and record.reward == 2.0 and "reward 2 (submit" in out
    again = EpisodeRecord.from_json((tmp_path / "out" / "chat_episode.json").read_text())
    assert again.tools == record.tools
