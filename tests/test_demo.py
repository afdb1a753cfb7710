"""``cudagym demo`` and the scripted agent, on a bundled fixture layout with a FakeJudge."""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import write_bundled_tree
from conftest_env import TOKENIZER
from cudagym.baselines import demo
from cudagym.baselines.scripted import JUDGE_STEPS, ScriptedAgent, replay
from fakes import FakeJudge, incorrect_result

from cudagym.cli import main
from cudagym.env import JUDGES, CudaKernelEnv
from cudagym.errors import ConfigError, UnknownTaskError
from cudagym.solution import Solution
from cudagym.sources.bundled import BundledSource


@pytest.fixture
def bundled(tmp_path: Path) -> Path:
    return write_bundled_tree(tmp_path / "bundled")


@pytest.fixture
def judges(monkeypatch: pytest.MonkeyPatch) -> list[FakeJudge]:
    made: list[FakeJudge] = []

    def factory(gpu: str):
        def make(protocol):
            made.append(FakeJudge(gpu=gpu, protocol=protocol))
            return made[-1]
        return make

    monkeypatch.setitem(JUDGES, "fake", factory("NVIDIA H200"))
    monkeypatch.setitem(JUDGES, "fake-cpu", factory("none"))
    return made


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    demo.configure(parser)
    return parser.parse_args(list(argv))


def test_scripted_agent_plan() -> None:
    agent = ScriptedAgent({"model_new.py": "m", "kernels/a.cu": "k"})
    plan = [json.loads(a) for a in agent.plan()]
    assert [p["name"] for p in plan] == ["write_file", "write_file", *JUDGE_STEPS]
    assert plan[0]["arguments"] == {"path": "kernels/a.cu", "content": "k"}
    assert [json.loads(agent.act(""))["name"] for _ in range(6)] == [p["name"] for p in plan]
    assert json.loads(agent.act(""))["name"] == "submit"  # the plan is spent
    tagged = ScriptedAgent({"model_new.py": "m"}, form="tagged").plan()[0]
    assert tagged.startswith("Next I call write_file.\n<tool_call>") and tagged.endswith("</tool_call>")


def test_scripted_agent_replays_a_bundled_solution(bundled: Path, tmp_path: Path) -> None:
    source = BundledSource(root=bundled)
    judge = FakeJudge()
    env = CudaKernelEnv("bundled", suite_options={"root": str(bundled)}, judge=judge, token_counter=TOKENIZER,
                        workspace_dir=str(tmp_path))
    obs, _ = env.reset(options={"task": "bundled/L1/01_ReLU"})
    record = replay(env, ScriptedAgent.from_bundled("bundled/L1/01_ReLU", source), observation=obs)
    assert [t.tool for t in record.turns] == ["write_file"] * 3 + list(JUDGE_STEPS)
    assert all(t.ok for t in record.turns)
    assert (record.reward, record.terminated, record.evaluated) == (2.0, True, True)
    assert record.last_eval["status"] == "ok"
    env.close()


def test_replay_refuses_a_format_mismatch(bundled: Path) -> None:
    env = CudaKernelEnv("bundled", suite_options={"root": str(bundled)}, judge=FakeJudge(),
                        solution_format="inline", token_counter=TOKENIZER)
    env.reset(seed=0)
    with pytest.raises(ConfigError, match="extension format"):
        replay(env, ScriptedAgent.from_solution(Solution("extension", {"model_new.py": "m"})))
    env.close()


def test_demo_with_a_gpu_prints_every_turn_and_the_reward(bundled: Path, judges: list[FakeJudge]) -> None:
    out = io.StringIO()
    code = demo.run(parse("--judge", "fake", "--bundled-root", str(bundled), "--tokenizer", TOKENIZER), out)
    text = out.getvalue()
    assert code == 0
    assert "replaying 3 bundled reference solution(s)" in text and "GPU: NVIDIA H200" in text
    # the default three tasks spread over the levels
    assert [line.split()[1] for line in text.splitlines() if line.startswith("== ")] == [
        "bundled/L1/01_ReLU", "bundled/L2/01_gemm_bias_gelu", "bundled/L3/01_mlp"]
    assert text.count("turn  7  submit     ok") == 3
    assert "Verify: PASS" in text and "(1.11x vs eager, 1.00x vs compile)" in text
    assert text.count("reward 2") >= 3
    assert "Summary" in text
    assert judges[0].closed == 1  # the demo closes the judge it made


def test_demo_without_a_gpu_says_so_and_still_compiles(bundled: Path, judges: list[FakeJudge]) -> None:
    out = io.StringIO()
    code = demo.run(parse("--judge", "fake-cpu", "--bundled-root", str(bundled), "--tokenizer", TOKENIZER,
                          "--tasks", "bundled/L1/02_Sigmoid"), out)
    text = out.getvalue()
    assert code == 0
    assert text.splitlines()[1].startswith("NO GPU FOUND")
    assert "compile    ok    Build OK" in text
    assert "verify" not in text.split("== ")[1]  # verify and profile need a GPU: skipped
    assert "turn  5  submit     FAIL  Submit: NOT RUN: no GPU is available" in text
    assert "reward 0 (not evaluated)" in text
    assert [c[0] for c in judges[0].calls] == ["build"] * 2  # compile and submit: builds only, no evaluation


def test_demo_all_and_failures(bundled: Path, judges: list[FakeJudge], monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    assert demo.run(parse("--all", "--judge", "fake", "--bundled-root", str(bundled), "--tokenizer", TOKENIZER),
                    out) == 0
    assert out.getvalue().count("\n== ") == 5
    monkeypatch.setitem(JUDGES, "wrong", lambda p: FakeJudge(protocol=p, eval_fn=lambda *a: incorrect_result()))
    out = io.StringIO()
    assert demo.run(parse("--count", "1", "--judge", "wrong", "--bundled-root", str(bundled), "--tokenizer",
                          TOKENIZER), out) == 1
    with pytest.raises(UnknownTaskError, match="no bundled task bundled/L9/x"):
        demo.run(parse("--tasks", "bundled/L9/x", "--judge", "fake", "--bundled-root", str(bundled)), io.StringIO())
    with pytest.raises(ConfigError, match="expected --count >= 1, got 0"):
        demo.run(parse("--count", "0", "--judge", "fake", "--bundled-root", str(bundled)), io.StringIO())


def test_cudagym_demo_command(bundled: Path, judges: list[FakeJudge], capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["demo", "--judge", "fake", "--count", "1", "--bundled-root", str(bundled), "--tokenizer", TOKENIZER])
    captured = capsys.readouterr()
    assert code == 0
    assert "== bundled/L1/01_ReLU" in captured.out and "reward 2" in captured.out


def test_demo_exits_1_and_names_the_missing_compiler_when_no_build_can_run(tmp_path: Path) -> None:
    env = {**os.environ, "CUDAGYM_NVCC": str(tmp_path / "no-such-nvcc"), "CUDAGYM_CACHE_DIR": str(tmp_path / "cache"),
           "CUDAGYM_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, "-m", "cudagym.cli", "demo", "--count", "1", "--tokenizer", TOKENIZER],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "compile    FAIL  Build NOT RUN: a build tool is missing" in done.stdout
    # every build message is scrubbed of host paths before it reaches an observation: the folder reads <tmp>
    assert "expected CUDAGYM_NVCC to name an executable nvcc, got '<tmp>/" in done.stdout
    assert "/no-such-nvcc'" in done.stdout
    assert "FAILED: 1 of 1 reference solution(s) did not build" in done.stdout
