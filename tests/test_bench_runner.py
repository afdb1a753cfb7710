"""``cudagym bench``: episodes journaled as they end, the plan in the manifest, resume after kill -9."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from bench_journals import SubmitAgent, child_env, slow_bench_command, started_slow_bench

from cudagym.bench.journal import EPISODES, read_entries, read_manifest
from cudagym.cli import main

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
TASKS = ["bundled/L1/01_Swish", "bundled/L1/02_NewGELU", "bundled/L1/03_Mish"]


def bench(*args: str) -> int:
    return main(["bench", "--judge", "bench_journals:fake_judge", "--no-progress", *args])


def test_every_episode_is_one_journal_line_with_its_verdict(tmp_path, capsys):
    out = tmp_path / "run"
    assert bench("--agent", "scripted", "--tasks", *TASKS, "-k", "2", "--parallel", "3", "--out", str(out)) == 0
    entries = read_entries(out)
    assert sorted(e.key for e in entries) == sorted(f"{t}#{k}" for t in TASKS for k in (0, 1))
    assert len((out / EPISODES).read_text().splitlines()) == 6
    for e in entries:
        assert e.summary.final.tier == 2 and e.record.episode_end == "submit"
        assert e.record.tools[-4:] == ["compile", "verify", "profile", "submit"]
        assert e.seed == e.summary.sample  # seed 0 + sample
    manifest = read_manifest(out)
    assert manifest["plan"]["agent"] == "scripted" and manifest["plan"]["k"] == 2
    assert manifest["episodes_planned"] == 6 and manifest["hardware"]["gpu"] == "NVIDIA H200"
    assert "6 episode(s)" in capsys.readouterr().out


def test_env_id_with_a_limit_and_the_progress_bar(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["bench", "--judge", "bench_journals:fake_judge", "--agent", "scripted",
                 "--env", "CudaKernel-Bundled-v0", "--limit", "2", "--out", str(out)]) == 0
    assert len(read_entries(out)) == 2
    err = capsys.readouterr().err
    assert "episodes" in err and "2/2" in err and "t2=2" in err  # tqdm's bar with the tier counts


def test_random_and_module_callable_agents(tmp_path):
    assert bench("--agent", "random", "--tasks", TASKS[0], "-k", "2", "--max-turns", "3",
                 "--out", str(tmp_path / "random")) == 0
    entries = read_entries(tmp_path / "random")
    assert len(entries) == 2 and all(e.summary.turns == 3 and e.record.episode_end == "max_turns" for e in entries)
    assert bench("--agent", "bench_journals:SubmitAgent", "--tasks", *TASKS[:2], "--seed", "7",
                 "--out", str(tmp_path / "mine")) == 0
    mine = read_entries(tmp_path / "mine")
    assert {e.record.agent for e in mine} == {"bench_journals:SubmitAgent"}
    assert all(e.summary.final.tier == -1 and e.seed == 7 for e in mine)  # no model_new.py: the build fails
    assert SubmitAgent("t", 1).act("", {}) == '{"name": "submit", "arguments": {}}'


def test_usage_errors_name_what_is_wrong(tmp_path, capsys):
    out = str(tmp_path / "run")
    assert bench("--tasks", TASKS[0], "--out", out) == 2
    assert "expected --agent" in capsys.readouterr().err
    assert bench("--agent", "nosuch", "--tasks", TASKS[0], "--out", out) == 2
    assert "expected the agent as scripted, random, chat or module:callable" in capsys.readouterr().err
    assert bench("--agent", "scripted", "--tasks", TASKS[0], "--out", out) == 0
    assert bench("--agent", "scripted", "--tasks", TASKS[0], "--out", out) == 2
    assert "already holds a run; pass --resume" in capsys.readouterr().err
    assert bench("--agent", "random", "--resume", "--out", out) == 2
    assert "agent: run has 'scripted', given 'random'" in capsys.readouterr().err
    assert bench("--resume", "--out", str(tmp_path / "none")) == 2
    assert "expected a benchmark run folder" in capsys.readouterr().err


def test_resume_drops_a_line_cut_short_and_plays_only_what_is_missing(tmp_path):
    out = tmp_path / "run"
    assert bench("--agent", "scripted", "--tasks", *TASKS, "-k", "2", "--out", str(out)) == 0
    journal = out / EPISODES
    lines = journal.read_text().splitlines(keepends=True)
    journal.write_text("".join(lines[:2]) + lines[2][: len(lines[2]) // 2])  # killed while writing line 3
    assert bench("--resume", "--out", str(out)) == 0
    after = journal.read_text().splitlines(keepends=True)
    assert after[:2] == lines[:2]  # what was journaled stays, byte for byte
    keys = [json.loads(line)["key"] for line in after]
    assert len(keys) == 6 and len(set(keys)) == 6


def test_a_run_killed_with_sigkill_resumes_with_no_lost_or_duplicated_episode(tmp_path):
    out = tmp_path / "run"
    env, command = child_env(), slow_bench_command(out, 5)
    proc = started_slow_bench(out, 5)
    journal = out / EPISODES
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    before = journal.read_bytes()
    done_before = before.count(b"\n")
    assert 2 <= done_before < 10
    resumed = subprocess.run([*command[:3], "bench", "--resume", "--no-progress", "--out", str(out)], cwd=ROOT,
                             env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    after = journal.read_bytes()
    assert after.startswith(before[: before.rfind(b"\n") + 1])  # the finished episodes are kept as they were
    keys = [json.loads(line)["key"] for line in after.decode().splitlines()]
    assert len(keys) == 10 and len(set(keys)) == 10
    assert {k.rpartition("#")[2] for k in keys} == {"0", "1"}
    assert "10 episode(s)" in resumed.stdout


@pytest.mark.parametrize("bad", [["--parallel", "0"], ["-k", "0"]])
def test_counts_below_one_are_refused(tmp_path, capsys, bad):
    assert bench("--agent", "scripted", "--tasks", TASKS[0], *bad, "--out", str(tmp_path / "r")) == 2
    assert ">= 1" in capsys.readouterr().err


def test_the_chat_agent_against_a_loopback_endpoint_reports_model_tokens(tmp_path):
    pytest.importorskip("httpx")
    from cudagym.baselines.standin import ChatStandIn, solution_replies

    from cudagym.sources.bundled import BundledSource

    files = dict(BundledSource().solution(TASKS[0]).files)
    out = tmp_path / "chat"
    with ChatStandIn(solution_replies(files)) as server:
        assert bench("--agent", "chat", "--base-url", server.url, "--model", "stand-in", "--tasks", TASKS[0],
                     "-k", "2", "--parallel", "2", "--out", str(out)) == 0
    entries = read_entries(out)
    assert len(entries) == 2
    for e in entries:
        assert e.summary.final.tier == 2 and e.record.episode_end == "submit"
        assert e.summary.model_tokens > 0  # the endpoint's usage, summed over the turns
    assert read_manifest(out)["plan"]["model"] == "stand-in"
