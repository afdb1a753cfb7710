"""The chat-message view of an episode and its token masks, on a scripted episode with a FakeJudge."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import write_bundled_tree
from conftest_env import TOKENIZER
from cudagym.baselines.scripted import ScriptedAgent
from fakes import FakeJudge

from cudagym.env import CudaKernelEnv
from cudagym.errors import ConfigError
from cudagym.messages import CHATML, chat_view, segments, tokenize
from cudagym.rollout import EpisodeRecord, run_episode
from cudagym.sources.bundled import BundledSource
from cudagym.tokens import shipped_encoding

TASK = "bundled/L1/01_ReLU"


def play(tmp_path: Path, form: str) -> EpisodeRecord:
    root = write_bundled_tree(tmp_path / "bundled")
    env = CudaKernelEnv("bundled", suite_options={"root": str(root)}, judge=FakeJudge(), token_counter=TOKENIZER)
    agent = ScriptedAgent.from_bundled(TASK, BundledSource(root=root), steps=("compile", "submit"), form=form)
    record = run_episode(env, agent, options={"task": TASK})
    env.close()
    return record


@pytest.fixture
def record(tmp_path: Path) -> EpisodeRecord:
    return play(tmp_path, "json")


def test_native_actions_become_tool_calls_answered_by_tool_messages(record: EpisodeRecord) -> None:
    view = chat_view(record, system="You write CUDA.")
    roles = [m["role"] for m in view.messages]
    assert roles == ["system", "user"] + ["assistant", "tool"] * len(record.turns)
    first = view.messages[2]["tool_calls"][0]
    assert first["function"]["name"] == "write_file" and first["id"] == view.messages[3]["tool_call_id"]
    assert json.loads(first["function"]["arguments"]) == json.loads(record.turns[0].action)["arguments"]
    assert view.messages[-1]["content"] == record.turns[-1].observation
    assert [t["function"]["name"] for t in view.tools][-1] == "submit"
    assert json.loads(json.dumps(view.to_dict()))["reward"] == record.reward == 2.0


def test_text_actions_are_assistant_text_and_observations_user_messages(tmp_path: Path) -> None:
    record = play(tmp_path, "tagged")
    view = chat_view(record)
    assert [m["role"] for m in view.messages[1:3]] == ["assistant", "user"]
    assert view.messages[1]["content"].startswith("Next I call write_file.")
    flat = chat_view(play(tmp_path / "again", "json"), native_tools=False)
    assert all("tool_calls" not in m for m in flat.messages)


def test_the_masks_cover_every_token_exactly_once(record: EpisodeRecord) -> None:
    enc = shipped_encoding()
    tokens = tokenize(segments(record), enc)
    assert len(tokens.ids) == len(tokens.action_mask) == len(tokens.observation_mask) == len(tokens.turn)
    assert all(a + o == 1 for a, o in zip(tokens.action_mask, tokens.observation_mask, strict=True))
    actions = "".join(t.action for t in record.turns)
    assert sum(tokens.action_mask) == sum(len(enc.encode(t.action)) for t in record.turns)
    # the agent's tokens decode to exactly its actions, the environment's to the prompt and observations
    mine = [i for i, a in zip(tokens.ids, tokens.action_mask, strict=True) if a]
    assert enc.decode(mine) == actions
    theirs = [i for i, o in zip(tokens.ids, tokens.observation_mask, strict=True) if o]
    assert enc.decode(theirs) == record.prompt + "".join(t.observation for t in record.turns)
    assert tokens.turn[0] == 0 and tokens.turn[-1] == len(record.turns)


def test_chatml_markers_open_as_environment_and_close_as_agent(record: EpisodeRecord) -> None:
    pieces = segments(record, CHATML)
    assert pieces[0].text == "<|im_start|>user\n" and not pieces[0].trainable
    assert pieces[4].text == "<|im_start|>assistant\n" and not pieces[4].trainable
    # the stop marker is the agent's; the newline after it is not (generation stops at the marker)
    assert pieces[5].trainable and pieces[6].text == "<|im_end|>" and pieces[6].trainable
    assert pieces[7].text == "\n" and not pieces[7].trainable
    assert pieces[8].text == "<|im_start|>tool\n"
    tokens = tokenize(pieces, lambda text: [len(text)])  # a callable: one "token" per piece
    assert tokens.action_mask[:9] == (0, 0, 0, 0, 0, 1, 1, 0, 0)


def test_a_tokenizer_that_is_not_one_is_a_clear_error(record: EpisodeRecord) -> None:
    with pytest.raises(ConfigError, match="expected a tokenizer"):
        tokenize(segments(record), 42)
    with pytest.raises(ConfigError, match="token ids"):
        tokenize(segments(record), lambda text: ["a"])
