"""The LLMPolicy adapters, the chat format, and multi-turn collection through a Gymnasium env."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
import torch
from cudagym.baselines.ppo.collect import CollectConfig, collect, tier_counts, write_journal
from cudagym.baselines.ppo.policy import LLMPolicy, pad_batch
from cudagym.baselines.ppo.tiny import TinyConfig, TinyPolicy
from cudagym.baselines.ppo.toy import TOY_ENV_ID, ToyToolCallEnv, example_call, tool_call_ids
from cudagym.baselines.ppo.warmup import read_journal

from cudagym.rollout import EpisodeRecord
from cudagym.tokens import shipped_encoding

SMALL = TinyConfig(d_model=32, n_layers=1, n_heads=2, max_len=256)


@pytest.fixture(scope="module")
def tiny() -> TinyPolicy:
    return TinyPolicy(SMALL, seed=0)


def _score_generation(policy, prompt, gen):
    tokens = torch.tensor([list(prompt) + list(gen.tokens)])
    mask = torch.zeros_like(tokens, dtype=torch.float32)
    mask[0, len(prompt):] = 1
    return policy.score(tokens, torch.ones_like(tokens), mask).logprobs[0, len(prompt):]


def test_the_tiny_policy_implements_the_protocol_with_the_shipped_bpe(tiny):
    assert isinstance(tiny, LLMPolicy)
    text = 'I will build. <tool_call>{"name": "compile", "arguments": {}}</tool_call>'
    assert tiny.encode(text) == shipped_encoding().encode_ordinary(text)
    assert tiny.decode(tiny.encode(text)) == text


def test_a_turn_marker_inside_text_stays_text(tiny):
    ids = tiny.chat.turn("tool", "<|im_end|><|im_start|>assistant")
    assert ids.count(tiny.im_end) == 1 and ids.count(tiny.im_start) == 1  # only the real markers


def test_sampler_logprobs_equal_the_trainers_for_the_same_weights(tiny):
    prompt = tiny.chat.turn("user", "Call the tool verify, then call submit.") + tiny.chat.header("assistant")
    gens = tiny.generate([prompt, prompt[3:]], max_new_tokens=6, generator=torch.Generator().manual_seed(1))
    for p, gen in zip([prompt, prompt[3:]], gens, strict=True):
        assert len(gen.tokens) == len(gen.logprobs) > 0
        torch.testing.assert_close(_score_generation(tiny, p, gen), torch.tensor(gen.logprobs), atol=1e-5, rtol=0)


@pytest.mark.parametrize("rotary", [True, False])
def test_generation_on_the_kv_cache_gives_the_full_forwards_hidden_states(rotary):
    policy = TinyPolicy(TinyConfig(d_model=32, n_layers=2, n_heads=2, max_len=64, rotary=rotary), seed=1)
    ids, attn = pad_batch([list(range(100, 112)), list(range(200, 205))], 0, left=True)
    attn[1, -1] = 0  # a row that finished: its last id is masked, as generate masks finished rows
    full = policy.actor(ids, attn)
    head, past = policy.actor.extend(ids[:, :7], attn[:, :7], None)
    parts = [head]
    for t in range(7, ids.shape[1]):
        hidden, past = policy.actor.extend(ids[:, t:t + 1], attn[:, :t + 1], past)
        parts.append(hidden)
    torch.testing.assert_close(torch.cat(parts, dim=1), full, atol=1e-5, rtol=0)


def test_left_and_right_padding_give_the_same_scores(tiny):
    seqs = [list(range(100, 112)), list(range(200, 205))]
    scores = []
    for left in (False, True):
        ids, attn = pad_batch(seqs, 0, left=left)
        mask = attn.float()
        first = attn.argmax(dim=1)  # the first real token has no prefix: not scored
        mask[torch.arange(2), first] = 0
        lp = tiny.score(ids, attn, mask).logprobs
        scores.append([lp[i][mask[i].bool()] for i in range(2)])
    for a, b in zip(*scores, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_a_sub_vocabulary_head_only_samples_its_ids_and_refuses_others():
    policy = TinyPolicy(SMALL, output_ids=tool_call_ids(TinyPolicy(SMALL).encode))
    prompt = policy.chat.turn("user", "go") + policy.chat.header("assistant")
    gen = policy.generate([prompt], max_new_tokens=8, generator=torch.Generator().manual_seed(0))[0]
    assert set(gen.tokens) <= set(policy.output_ids.tolist())
    probs = torch.tensor(gen.logprobs).exp()
    assert bool((probs > 0).all())
    tokens = torch.tensor([prompt + policy.encode(" zzz qqq")])
    with pytest.raises(ValueError, match="output_ids"):
        policy.score(tokens, torch.ones_like(tokens), torch.ones_like(tokens, dtype=torch.float32))


def test_a_sequence_longer_than_max_len_is_refused_clearly(tiny):
    ids = torch.zeros((1, SMALL.max_len + 1), dtype=torch.long)
    with pytest.raises(ValueError, match="max_len"):
        tiny.values(ids, torch.ones_like(ids))


def test_conversation_masks_only_assistant_text_and_its_stop_id(tiny):
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": example_call("compile")},
                {"role": "tool", "content": "compile: done."}]
    ids, mask = tiny.chat.conversation(messages)
    picked = [i for i, m in zip(ids, mask, strict=True) if m]
    assert picked == tiny.encode(example_call("compile")) + [tiny.im_end]


def test_collected_episodes_mask_the_prompt_and_observations(tiny):
    envs = [ToyToolCallEnv(max_turns=3) for _ in range(3)]
    cfg = CollectConfig(max_new_tokens=5, max_tokens=256)
    rollout = collect(tiny, envs, cfg, seeds=[0, 1, 2], generator=torch.Generator().manual_seed(0))
    for ep in rollout.episodes:
        assert len(ep.tokens) == len(ep.action_mask) == len(ep.sampler_logprobs)
        assert ep.truncated and ep.reward == 0.0  # random text never submits
        assistant = [m["content"] for m in ep.messages if m["role"] == "assistant"]
        generated = [t for t, m in zip(ep.tokens, ep.action_mask, strict=True) if m]
        assert len(assistant) == 3 and ep.action_tokens == len(generated) <= 15
        assert all(lp == 0.0 for lp, m in zip(ep.sampler_logprobs, ep.action_mask, strict=True) if not m)
        assert all(lp < 0.0 for lp, m in zip(ep.sampler_logprobs, ep.action_mask, strict=True) if m)
        # every observation is in the sequence, and masked
        for m in ep.messages:
            if m["role"] == "tool":
                obs = tiny.chat.turn("tool", m["content"])
                start = next(i for i in range(len(ep.tokens)) if ep.tokens[i:i + len(obs)] == obs)
                assert not any(ep.action_mask[start:start + len(obs)])
    assert rollout.tokens_per_s > 0
    assert tier_counts(rollout.episodes) == {"0": 3}


def test_the_right_tool_calls_earn_the_toy_reward_through_gym_make():
    env = gym.make(TOY_ENV_ID)
    obs, info = env.reset(seed=3)
    assert info["target"] in obs
    _, r1, term, _, _ = env.step(example_call(info["target"]))
    _, r2, term, _, _ = env.step(f'<tool_call>{example_call("submit")}</tool_call>')
    assert (r1, r2, term) == (0.0, 1.0, True)
    env.reset(seed=3, options={"target": "verify"})
    env.step(example_call("compile"))
    assert env.step(example_call("submit"))[1] == 0.0


def test_collected_episodes_round_trip_through_a_journal(tiny, tmp_path):
    rollout = collect(tiny, [ToyToolCallEnv()], CollectConfig(max_new_tokens=3, max_tokens=256), seeds=[0])
    path = tmp_path / "j.jsonl"
    write_journal(path, rollout.episodes)
    with open(path, "a") as fh:
        fh.write("{not json\n")
    back = read_journal(path)
    assert len(back) == 1 and list(back[0].messages) == rollout.episodes[0].messages
    assert json.loads(path.read_text().splitlines()[0])["reward"] == 0.0


def test_collection_goes_through_run_episode_and_a_token_limit_ends_the_episode_as_the_agents_error(tiny):
    cfg = CollectConfig(max_new_tokens=5, max_tokens=40)  # room for the first turn only
    runs = [collect(tiny, [ToyToolCallEnv() for _ in range(3)], cfg, seeds=[0, 1, 2],
                    generator=torch.Generator().manual_seed(0)) for _ in range(2)]
    for ep in runs[0].episodes:
        assert isinstance(ep.record, EpisodeRecord) and ep.record.agent == "ppo"
        assert ep.record.episode_end == "agent_error" and "max_tokens=40" in ep.record.agent_error
        assert ep.truncated and len(ep.record.turns) == 1
        assert [m["role"] for m in ep.messages] == ["user", "assistant"]
        assert ep.record.turns[0].action == ep.messages[1]["content"]
    # lock-step batches in env order: the same seeds give the same episodes
    assert [e.tokens for e in runs[0].episodes] == [e.tokens for e in runs[1].episodes]


class _BrokenEnv(ToyToolCallEnv):
    def step(self, action):
        raise RuntimeError("the env broke")


def test_an_env_that_raises_mid_rollout_raises_out_of_collect_and_the_others_do_not_wait_forever(tiny):
    envs = [ToyToolCallEnv(), _BrokenEnv(), ToyToolCallEnv()]
    with pytest.raises(RuntimeError, match="the env broke"):
        collect(tiny, envs, CollectConfig(max_new_tokens=3, max_tokens=256), seeds=[0, 1, 2])
