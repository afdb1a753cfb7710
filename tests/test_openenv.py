"""OpenEnv: the Environment subclass, its create_app server on loopback, and OpenEnv's own WebSocket client."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import write_bundled_tree
from conftest_env import TOKENIZER
from fakes import FakeJudge

pytest.importorskip("openenv.core")
import uvicorn  # noqa: E402
from pydantic import ValidationError  # noqa: E402

from cudagym.integrations.openenv import (  # noqa: E402
    CudaKernelClient,
    CudaKernelEnvironment,
    KernelAction,
    make_app,
)
from cudagym.sources.bundled import BundledSource  # noqa: E402

TASK = "bundled/L1/01_ReLU"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_bundled_tree(tmp_path_factory.mktemp("openenv") / "bundled")


@pytest.fixture(scope="module")
def server(root: Path) -> Iterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    app = make_app(max_concurrent_envs=4, suite="bundled", suite_options={"root": str(root)}, judge=FakeJudge(),
                   token_counter=TOKENIZER)
    uv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not uv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert uv.started, "the OpenEnv server did not start within 30 s"
    yield f"http://127.0.0.1:{port}"
    uv.should_exit = True
    thread.join(timeout=10)


def test_the_environment_plays_an_episode_in_process(root: Path) -> None:
    env = CudaKernelEnvironment("bundled", suite_options={"root": str(root)}, judge=FakeJudge(),
                                token_counter=TOKENIZER)
    first = env.reset(task=TASK, episode_id="e1")
    assert first.text.startswith("# Task:") and first.task_id == TASK and len(first.tool_schemas) == 8
    assert env.state.episode_id == "e1" and env.state.step_count == 0
    obs = env.step(KernelAction(text='<tool_call>{"name": "list_files", "arguments": {}}</tool_call>'))
    assert obs.tool == "list_files" and obs.ok and not obs.done and env.state.step_count == 1
    obs = env.step(KernelAction(name="submit"))
    assert obs.done and obs.reward == -1.0 and obs.episode_end == "submit" and obs.last_eval["status"]
    assert env.step(KernelAction(name="compile")).error == "reset_needed"
    env.close()
    with pytest.raises(ValidationError, match="exactly one"):
        KernelAction(name="compile", text="{}")
    with pytest.raises(ValidationError):
        KernelAction(name="compile", unexpected=1)  # the wire forbids unknown fields


def test_a_multi_turn_episode_over_openenvs_websocket_client(server: str, root: Path) -> None:
    files = BundledSource(root=root).solution(TASK).files
    with CudaKernelClient(base_url=server).sync() as env:
        result = env.reset(task=TASK)
        assert result.observation.text.startswith("# Task:") and not result.done
        for path, text in files.items():
            result = env.step(KernelAction(name="write_file", arguments={"path": path, "content": text}))
            assert result.observation.ok, result.observation.text
        result = env.step(KernelAction(name="compile"))
        assert "Build OK" in result.observation.text
        result = env.step(KernelAction(name="submit"))
        assert result.done and result.reward == 2.0 and result.observation.evaluated
        state = env.state()
        assert state.task_id == TASK and state.step_count == len(files) + 2 and state.done


def test_sessions_are_separate_workspaces(server: str) -> None:
    with CudaKernelClient(base_url=server).sync() as a, CudaKernelClient(base_url=server).sync() as b:
        a.reset(task=TASK)
        b.reset(task=TASK)
        a.step(KernelAction(name="write_file", arguments={"path": "model_new.py", "content": "A = 1\n"}))
        seen = b.step(KernelAction(name="read_file", arguments={"path": "model_new.py"})).observation
        assert not seen.ok and "A = 1" not in seen.text
        mine = a.step(KernelAction(name="read_file", arguments={"path": "model_new.py"})).observation
        assert "A = 1" in mine.text
