"""``cudagym export``: the RFT filter's drops counted, and each format in the layout its reader expects."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_journals import WRITE, call, entry, verdict, write_run, wrong

from cudagym.bench.export import Filter, export, rft_line
from cudagym.cli import main
from cudagym.toolcalls import TOOL_SCHEMAS

T = "bundled/L1/01_Swish"


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    entries = [
        entry(T, 1, 0, verdict(50.0)),  # kept: tier 3
        entry(T, 1, 1, verdict(88.0), actions=[WRITE, "I think I will write a kernel"]),  # invalid tool call
        entry(T, 1, 2, wrong()),  # reward -1
        entry(T, 1, 3, verdict(60.0), actions=[WRITE, call("list_files"), call("list_files"), call("list_files")]),
        entry(T, 1, 4, verdict(95.0), actions=[WRITE, call("list_files"), call("list_files")]),  # kept: a run of 2
    ]
    return write_run(tmp_path / "run", entries)


def test_the_filter_counts_each_drop_under_its_reason(run_dir, tmp_path):
    result = export(run_dir, "rft", tmp_path / "rft.jsonl")
    assert (result.total, result.kept) == (5, 2)
    assert dict(result.dropped) == {"invalid_tool_call": 1, "reward": 1, "loop": 1}
    assert "kept 2 of 5 episode(s)" in result.summary() and "loop: 1" in result.summary()
    everything = export(run_dir, "rft", tmp_path / "all.jsonl", Filter(enabled=False))
    assert everything.kept == 5 and not everything.dropped
    strict = export(run_dir, "rft", tmp_path / "strict.jsonl", Filter(min_reward=2.0))
    assert strict.kept == 1  # only the tier-3 episode has a reward above 2


def test_rft_lines_are_what_cudagym_train_rft_reads_and_keeps(run_dir, tmp_path):
    from cudagym.baselines.ppo.warmup import read_journal, rft_filter

    export(run_dir, "rft", tmp_path / "rft.jsonl")
    episodes = read_journal(tmp_path / "rft.jsonl")
    assert len(episodes) == 2 and len(rft_filter(episodes)) == 2  # its own filter agrees with ours
    first = episodes[0]
    assert [m["role"] for m in first.messages] == ["user", "assistant", "tool", "assistant", "tool"]
    assert first.messages[1]["content"] == WRITE and first.reward == 3.0
    line = json.loads((tmp_path / "rft.jsonl").read_text().splitlines()[0])
    assert line["info"]["tier"] == 3 and line["terminated"] is True
    everything = export(run_dir, "rft", tmp_path / "all.jsonl", Filter(enabled=False))
    assert everything.kept == 5
    assert len(rft_filter(read_journal(tmp_path / "all.jsonl"))) == 2  # the same episodes survive train rft


def test_rft_line_puts_a_system_message_first(run_dir):
    from cudagym.bench.journal import read_entries

    line = rft_line(read_entries(run_dir)[0], system="be fast")
    assert line["messages"][0] == {"role": "system", "content": "be fast"}


def test_chat_lines_carry_native_tool_calls_and_the_tool_schemas(run_dir, tmp_path):
    assert main(["export", str(run_dir), "--format", "chat", "--out", str(tmp_path / "chat.jsonl")]) == 0
    lines = [json.loads(x) for x in (tmp_path / "chat.jsonl").read_text().splitlines()]
    assert len(lines) == 2
    chat = lines[0]
    assert chat["tools"] == json.loads(json.dumps(TOOL_SCHEMAS)) and chat["task_id"] == T
    call_msg, answer = chat["messages"][1], chat["messages"][2]
    assert call_msg["tool_calls"][0]["function"]["name"] == "write_file"
    assert answer == {"role": "tool", "tool_call_id": call_msg["tool_calls"][0]["id"], "content": "observation 1"}


def test_sft_lines_are_token_ids_with_complementary_masks(run_dir, tmp_path, capsys):
    assert main(["export", str(run_dir), "--format", "sft", "--out", str(tmp_path / "sft.jsonl")]) == 0
    assert "kept 2 of 5" in capsys.readouterr().out
    line = json.loads((tmp_path / "sft.jsonl").read_text().splitlines()[0])
    n = len(line["ids"])
    assert n == len(line["action_mask"]) == len(line["observation_mask"]) == len(line["turn"]) > 0
    assert all(a + o == 1 for a, o in zip(line["action_mask"], line["observation_mask"], strict=True))
    assert 0 < sum(line["action_mask"]) < n
    from cudagym.tokens import shipped_encoding

    actions = [i for i, a in zip(line["ids"], line["action_mask"], strict=True) if a]
    assert WRITE in shipped_encoding().decode(actions)  # the agent's tokens are its actions


def test_bad_arguments_are_usage_errors(run_dir, tmp_path, capsys):
    assert main(["export", str(run_dir), "--format", "sft", "--out", str(tmp_path / "x"), "--tokenizer", "nope"]) == 2
    assert "expected --tokenizer" in capsys.readouterr().err
    assert main(["export", str(tmp_path), "--format", "rft", "--out", str(tmp_path / "x")]) == 2
    assert "expected a benchmark run folder" in capsys.readouterr().err
    assert main(["export", str(run_dir), "--format", "rft", "--out", str(tmp_path / "x"), "--max-repeats", "1"]) == 2
