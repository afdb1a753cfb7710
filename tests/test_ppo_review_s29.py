"""Review of the PPO baseline and the rollout path (session 29): hand-computed oracles on tiny examples.

Each test computes its expected values by hand (the arithmetic is in the comments) and runs the real code:
GAE over interleaved turns, padding, the cut-off episode's bootstrap, the token budget, the reward tiers at
exactly 5%, the PPO statistics, the warm-up stages, and the verl adapter's response layout.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from cudagym.baselines.ppo import losses as L
from cudagym.baselines.ppo.collect import CollectConfig, Episode, collect
from cudagym.baselines.ppo.tiny import TinyConfig, TinyPolicy
from cudagym.baselines.ppo.toy import ToyToolCallEnv, example_call, random_tool_journal, tool_call_ids
from cudagym.baselines.ppo.trainer import PPOTrainer, make_batch
from cudagym.baselines.ppo.warmup import JournalEpisode, pretrain_critic, rft_filter, sft
from fakes import timed_result

from cudagym.errors import ConfigError
from cudagym.reward import RewardConfig, is_faster, reward_config, score, tier_of

SMALL = TinyConfig(d_model=32, n_layers=1, n_heads=2, max_len=256)


def t(*rows: Any) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


def close(actual: Any, expected: Any, atol: float = 1e-6) -> None:
    torch.testing.assert_close(torch.as_tensor(actual, dtype=torch.float64),
                               torch.as_tensor(expected, dtype=torch.float64), atol=atol, rtol=0.0)


@pytest.fixture(scope="module")
def tiny() -> TinyPolicy:
    """A tiny policy whose critic says something other than 0 (a fresh value head is all zeros)."""
    policy = TinyPolicy(SMALL, seed=0, output_ids=tool_call_ids(TinyPolicy(SMALL).encode))
    with torch.no_grad():
        torch.nn.init.normal_(policy.value_head.weight, std=0.5, generator=torch.Generator().manual_seed(3))
        policy.value_head.bias.fill_(0.3)
    return policy


def two_turn_episode(policy: TinyPolicy, reward: float, **fields: Any) -> Episode:
    """user turn, assistant call + stop id, tool turn, assistant call + stop id, as ``collect`` writes them."""
    episode = Episode(reward=reward, **fields)
    chat = policy.chat
    episode.add(chat.turn("user", "Call the tool compile, then call submit."))
    for action, observation in ((example_call("compile"), "compile: done."), (example_call("submit"), None)):
        episode.add(chat.header("assistant"))
        ids = [*policy.encode(action), chat.stop_id]
        episode.add(ids, generated=[-0.5] * len(ids))
        episode.add(chat.end[1:])
        if observation is not None:
            episode.add(chat.turn("tool", observation))
    return episode


# -- GAE and returns over tokens ------------------------------------------------------------------------------


def test_gae_over_two_turns_with_gamma_and_lambda_by_hand_and_a_padded_row():
    # row 0: prompt, a a, obs obs, a a(stop), "\n", pad;  row 1: prompt, a, obs, a, then padding
    mask = t([0, 1, 1, 0, 0, 1, 1, 0, 0], [0, 1, 0, 1, 0, 0, 0, 0, 0])
    values = t([9, 1.0, 0.5, 9, 9, 0.2, 0.4, 9, 9], [9, 0.3, 9, 0.6, 9, 9, 9, 9, 9])
    rewards = L.token_rewards(t(2.0, -1.0), mask)
    close(rewards, t([0, 0, 0, 0, 0, 0, 2, 0, 0], [0, 0, 0, -1, 0, 0, 0, 0, 0]))
    adv, ret = L.masked_gae(rewards, values, mask, 0.9, 0.8)
    # row 0 over its action tokens V = 1, .5, .2, .4; r = 0, 0, 0, 2; gamma .9, gamma*lambda .72
    # A4 = 2 - .4 = 1.6;  A3 = (.9*.4 - .2) + .72*1.6 = 1.312;  A2 = (.9*.2 - .5) + .72*1.312 = .62464
    # A1 = (.9*.5 - 1) + .72*.62464 = -.1002592
    # row 1: V = .3, .6; r = 0, -1:  A2 = -1 - .6 = -1.6;  A1 = (.9*.6 - .3) + .72*-1.6 = -.912
    close(adv, t([0, -0.1002592, 0.62464, 0, 0, 1.312, 1.6, 0, 0], [0, -0.912, 0, -1.6, 0, 0, 0, 0, 0]))
    close(ret, t([0, 0.8997408, 1.12464, 0, 0, 1.512, 2.0, 0, 0], [0, -0.612, 0, -1.0, 0, 0, 0, 0, 0]))


def test_a_cut_off_rows_gae_bootstraps_from_the_value_after_its_last_action_token():
    # row 0 of the test above, cut off (reward so far 0) with the critic's value 0.7 after its last action
    mask = t([0, 1, 1, 0, 0, 1, 1, 0, 0], [0, 1, 0, 1, 0, 0, 0, 0, 0])
    values = t([9, 1.0, 0.5, 9, 9, 0.2, 0.4, 0.7, 9], [9, 0.3, 9, 0.6, 9, 9, 9, 9, 9])
    rewards = L.token_rewards(t(0.0, -1.0), mask)
    end = L.end_values(values, mask, t(1.0, 0.0))
    close(end, t(0.7, 0.0))  # the value at the position after the last action token; 0 for a row that ended
    adv, ret = L.masked_gae(rewards, values, mask, 0.9, 0.8, last_values=end)
    # A4 = .9*.7 - .4 = .23;  A3 = .16 + .72*.23 = .3256;  A2 = -.32 + .72*.3256 = -.085568
    # A1 = -.55 + .72*-.085568 = -.61160896;  row 1 as before (it ended: no bootstrap)
    close(adv, t([0, -0.61160896, -0.085568, 0, 0, 0.3256, 0.23, 0, 0], [0, -0.912, 0, -1.6, 0, 0, 0, 0, 0]))
    close(ret[0, 6], 0.9 * 0.7)


def test_the_trainer_bootstraps_only_episodes_the_collector_cut_off(tiny):
    ended = two_turn_episode(tiny, 1.0)
    cut = two_turn_episode(tiny, 0.0, cut=True)
    batch = make_batch([ended, cut], tiny.chat.stop_id, tiny.device)
    prep = PPOTrainer(tiny).prepare(batch)  # gamma 1: the return at the last action token is r + V(after it)
    last = max(i for i, m in enumerate(cut.action_mask) if m)
    with torch.no_grad():
        values = tiny.values(batch.tokens, batch.attention_mask)
    assert last + 1 < len(cut.tokens)  # the "\n" after <|im_end|>: its value is the state after the action
    close(prep.returns[0, last], 1.0)
    close(prep.returns[1, last], values[1, last + 1], atol=1e-5)
    assert abs(float(values[1, last + 1])) > 1e-3  # the bootstrap is a real critic value, not 0


def test_a_cut_off_row_ending_on_its_action_token_is_bootstrapped_past_the_batch_width(tiny):
    episode = two_turn_episode(tiny, 0.0, cut=True)
    del episode.tokens[-1], episode.action_mask[-1], episode.sampler_logprobs[-1]  # end on the stop id
    batch = make_batch([episode], tiny.chat.stop_id, tiny.device)
    prep = PPOTrainer(tiny).prepare(batch)
    extended = torch.cat([batch.tokens, torch.tensor([[tiny.chat.stop_id]])], dim=1)
    with torch.no_grad():
        after = tiny.values(extended, torch.ones_like(extended))[0, -1]  # the critic on the whole sequence
    close(prep.returns[0, -1], after, atol=1e-5)


def test_collected_episodes_are_cut_only_when_the_collector_ends_them(tiny):
    gen = torch.Generator().manual_seed(0)
    env_ended = collect(tiny, [ToyToolCallEnv(max_turns=2)], CollectConfig(max_new_tokens=4, max_tokens=256),
                        seeds=[0], generator=gen).episodes[0]
    assert env_ended.truncated and not env_ended.cut  # the env's own max_turns: its reward is the outcome
    first = len(tiny.chat.turn("user", ToyToolCallEnv().reset(seed=0)[0])) + len(tiny.chat.header("assistant"))
    budget = first + 4 + len(tiny.chat.end) + 3  # one turn fits, the second does not
    token_cut = collect(tiny, [ToyToolCallEnv(max_turns=5)], CollectConfig(max_new_tokens=4, max_tokens=budget),
                        seeds=[0], generator=gen).episodes[0]
    assert token_cut.record is not None and token_cut.record.episode_end == "agent_error"
    assert token_cut.truncated and token_cut.cut


def test_a_token_limit_cut_is_bootstrapped_not_scored_as_a_terminal_zero(tiny):
    # cudagym scores 0 before the episode's end: a terminal 0 would rank running out of tokens above -1
    first = len(tiny.chat.turn("user", ToyToolCallEnv().reset(seed=0)[0])) + len(tiny.chat.header("assistant"))
    cfg = CollectConfig(max_new_tokens=4, max_tokens=first + 4 + len(tiny.chat.end) + 3)
    episode = collect(tiny, [ToyToolCallEnv(max_turns=5)], cfg, seeds=[0],
                      generator=torch.Generator().manual_seed(0)).episodes[0]
    assert episode.record is not None and episode.record.episode_end == "agent_error" and episode.reward == 0.0
    batch = make_batch([episode], tiny.chat.stop_id, tiny.device)
    prep = PPOTrainer(tiny).prepare(batch)
    last = max(i for i, m in enumerate(episode.action_mask) if m)
    with torch.no_grad():
        after = tiny.values(batch.tokens, batch.attention_mask)[0, last + 1]
    assert abs(float(after)) > 1e-3
    close(prep.returns[0, last], after, atol=1e-5)  # gamma 1: r (0) + V(state after the last action)


def test_advantages_are_zero_off_action_tokens_and_whitened_over_action_tokens_only(tiny):
    short = Episode(tokens=tiny.encode(example_call("compile"))[:3], action_mask=[0, 1, 1],
                    sampler_logprobs=[0.0, -1.0, -1.0], reward=2.0)
    batch = make_batch([two_turn_episode(tiny, -1.0), short], tiny.chat.stop_id, tiny.device)
    prep = PPOTrainer(tiny).prepare(batch)
    mask = batch.action_mask
    assert batch.attention_mask[1, 3:].sum() == 0 and mask[1, 3:].sum() == 0  # right padding, never trained
    assert bool((prep.advantages[mask == 0] == 0).all()) and bool((prep.returns[mask == 0] == 0).all())
    picked = prep.advantages[mask == 1].double()
    assert float(picked.mean()) == pytest.approx(0.0, abs=1e-5)
    assert float(picked.var(unbiased=False)) == pytest.approx(1.0, abs=1e-4)


# -- the token budget of collection ------------------------------------------------------------------------


@pytest.mark.parametrize("slack", [0, 1, 2, 5])
def test_collected_episodes_never_exceed_max_tokens(tiny, slack):
    # the first turn's prompt + header + max_new_tokens + the end marker ids: "+ slack" around the edge
    first = len(tiny.chat.turn("user", ToyToolCallEnv().reset(seed=0)[0])) + len(tiny.chat.header("assistant"))
    budget = first + 4 + slack
    cfg = CollectConfig(max_new_tokens=4, max_tokens=budget)
    try:
        episodes = collect(tiny, [ToyToolCallEnv(max_turns=4) for _ in range(3)], cfg, seeds=[0, 0, 0],
                           generator=torch.Generator().manual_seed(slack)).episodes
    except ValueError as exc:  # the first turn cannot fit: a clear error, not an over-long episode
        assert slack < len(tiny.chat.end) and "max_tokens" in str(exc)
        return
    assert all(len(e.tokens) <= budget for e in episodes), [len(e.tokens) for e in episodes]


# -- the PPO loss ------------------------------------------------------------------------------------------------


def test_the_surrogate_is_a_token_mean_over_the_batch_not_a_mean_of_sequence_means():
    # ratio 1 everywhere; row 0 has one token with A = 2, row 1 three tokens with A = 1
    keep = t([1, 0, 0], [1, 1, 1])
    adv = t([2, 0, 0], [1, 1, 1])
    zeros = torch.zeros_like(adv)
    pg = L.policy_loss(zeros, zeros, adv, L.Correction(keep, keep, 1.0, 0.0), L.LossConfig())
    close(pg.loss, -(2 + 3) / 4)  # token-mean; a mean of sequence means would be -(2 + 1) / 2


def test_approx_kl_is_an_unbiased_estimate_of_kl_old_to_new():
    # tokens drawn from old = (.5, .3, .2) in exact proportions; new = (.25, .5, .25)
    old_p, new_p = [0.5, 0.3, 0.2], [0.25, 0.5, 0.25]
    draws = [0] * 5 + [1] * 3 + [2] * 2
    old = t([math.log(old_p[i]) for i in draws])
    new = t([math.log(new_p[i]) for i in draws])
    ones = torch.ones_like(old)
    pg = L.policy_loss(new, old, torch.zeros_like(old), L.Correction(ones, ones, 1.0, 0.0), L.LossConfig())
    kl = sum(p * math.log(p / q) for p, q in zip(old_p, new_p, strict=True))  # = 0.14870
    assert pg.approx_kl == pytest.approx(kl, abs=1e-9)
    # one token: r = new/old = .5, k3 = r - 1 - log r = .5 - 1 + log 2
    one = L.policy_loss(t([math.log(0.25)]), t([math.log(0.5)]), t([0.0]), L.Correction(t([1.0]), t([1.0]), 1, 0),
                        L.LossConfig())
    assert one.approx_kl == pytest.approx(0.5 - 1 + math.log(2), abs=1e-9)


# -- the warm-up stages ------------------------------------------------------------------------------------------


def test_rft_keeps_only_correct_valid_loop_free_episodes():
    ok = ({"role": "user", "content": "go"}, {"role": "assistant", "content": example_call("compile")},
          {"role": "tool", "content": "done"}, {"role": "assistant", "content": example_call("submit")})
    looping = (ok[0], *[{"role": "assistant", "content": example_call("compile")}] * 3)
    twice = (ok[0], *[{"role": "assistant", "content": example_call("compile")}] * 2)
    invalid = (ok[0], {"role": "assistant", "content": "I think I will compile now"})
    episodes = [JournalEpisode(ok, r) for r in (-1.0, 0.0, 0.5, 1.0, 2.0, 3.0)]
    episodes += [JournalEpisode(looping, 3.0), JournalEpisode(twice, 3.0), JournalEpisode(invalid, 3.0),
                 JournalEpisode((ok[0],), 3.0)]
    kept = rft_filter(episodes)
    # reward > 0 (tiers 1-3, CUDA Agent's R > 0); 3 same actions in a row is a loop, 2 is not; no user-only
    assert [(e.reward, len(e.messages)) for e in kept] == [(0.5, 4), (1.0, 4), (2.0, 4), (3.0, 4), (3.0, 3)]
    assert len(rft_filter(episodes, min_reward=None)) == 7  # keep-all still drops invalid, looping and empty ones


def _snapshot(params: Any) -> list[torch.Tensor]:
    return [p.detach().clone() for p in params]


def _changed(before: list[torch.Tensor], params: Any) -> bool:
    return any(not torch.equal(b, p.detach()) for b, p in zip(before, params, strict=True))


def test_rft_trains_the_actor_only_and_critic_pretraining_the_critic_only():
    policy = TinyPolicy(SMALL, seed=1, output_ids=tool_call_ids(TinyPolicy(SMALL).encode))
    journal = [JournalEpisode(tuple(r["messages"]), 1.0) for r in random_tool_journal(4, seed=0)]
    actor, critic = _snapshot(policy.actor_parameters()), _snapshot(policy.critic_parameters())
    sft(policy, journal, steps=2, lr=1e-2, batch_size=2)
    assert _changed(actor, policy.actor_parameters()) and not _changed(critic, policy.critic_parameters())
    episodes = []
    for episode in journal:
        ids, mask = policy.chat.conversation(episode.messages)
        episodes.append(Episode(tokens=ids, action_mask=mask, sampler_logprobs=[0.0] * len(ids), reward=1.0))
    actor = _snapshot(policy.actor_parameters())
    losses = pretrain_critic(policy, episodes, steps=3, lr=1e-2, batch_size=2)
    assert _changed(critic, policy.critic_parameters()) and not _changed(actor, policy.actor_parameters())
    assert losses[0] == pytest.approx(0.5 * 1.0, abs=1e-6)  # zero-initialised head: 0.5 * (0 - 1)^2


def test_the_outcome_lands_on_the_last_assistant_stop_id_not_on_the_turn_tail(tiny):
    episode = two_turn_episode(tiny, 3.0)
    batch = make_batch([episode], tiny.chat.stop_id, tiny.device)
    rewards = L.token_rewards(batch.outcome, batch.action_mask)
    index = int(torch.nonzero(rewards[0]).flatten())
    assert rewards[0, index] == 3.0 and episode.tokens[index] == tiny.chat.stop_id
    assert episode.tokens[index + 1:] == list(tiny.chat.end[1:])  # only the masked tail follows it


# -- reward tiers at the 5% threshold -----------------------------------------------------------------------


@pytest.mark.parametrize(("baseline", "candidate"), [(100.0, 95.0), (1.0, 0.95), (2.0, 1.9), (0.3, 0.285),
                                                      (1.1, 1.045), (123.4, 117.23), (0.1, 0.095), (20.0, 19.0)])
def test_exactly_5_percent_faster_is_not_more_than_5_percent_whatever_the_float_rounding(baseline, candidate):
    assert not is_faster(candidate, baseline, 0.05)
    assert tier_of(candidate, baseline, baseline) == 1
    assert score(timed_result(candidate, baseline, baseline)).reward == 1.0
    assert not is_faster(1.0, baseline / candidate, 0.05)  # the bench report's form: on speedups
    assert is_faster(candidate * (1 - 1e-6), baseline, 0.05)  # a hair more than 5% is faster


def test_tier_boundaries_against_compile_are_exact_too():
    assert tier_of(0.95, 1.0, 1.0) == 1
    assert tier_of(0.9, 1.0, 0.947) == 2  # 4.96% faster than compile: not more than 5%
    assert tier_of(0.855, 1.0, 0.9) == 2  # exactly 5% faster than compile (0.855 = 0.95 * 0.9)
    assert tier_of(0.85, 1.0, 0.9) == 3


@pytest.mark.parametrize(("spec", "match"), [
    ({"threshold_vs_eager": 5}, "0.05 means 5% faster"), ({"threshold_vs_compile": float("nan")}, "in \\[0, 1\\)"),
    ({"mode": "tiers"}, "reward mode"), ({"scoring": "worst"}, "scoring"), ({"thresh": 0.1}, "unknown"),
    ({"statistic": "p90"}, "statistic"),
])
def test_bad_reward_options_are_clear_errors(spec, match):
    with pytest.raises(ConfigError, match=match):
        reward_config(spec)
    with pytest.raises(ConfigError, match="expected reward as"):
        reward_config(3)  # type: ignore[arg-type]
    assert reward_config(RewardConfig()) == RewardConfig()


# -- verl: the response ends on the model's tokens -----------------------------------------------------------


@pytest.fixture
def bundled(tmp_path: Path) -> Path:
    from conftest import write_bundled_tree

    return write_bundled_tree(tmp_path / "bundled")


class _Replay:
    """Stands in for verl's LLM server manager: the next scripted tool call, as token ids."""

    def __init__(self, tokenizer: Any, replies: list[str]) -> None:
        self.tokenizer, self.replies, self.calls = tokenizer, replies, 0

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       **kwargs: Any) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        text = self.replies[min(self.calls, len(self.replies) - 1)]
        self.calls += 1
        return TokenOutput(token_ids=self.tokenizer.encode(text + "<|im_end|>", add_special_tokens=False))


def _verl_episode(root: Path, *, max_turns: int, response_length: int | None) -> tuple[Any, Any, list[str]]:
    pytest.importorskip("verl.experimental.agent_loop.agent_loop")
    from conftest_env import TOKENIZER
    from fakes import FakeJudge
    from omegaconf import OmegaConf
    from tiny_lm import tiny_tokenizer
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap

    from cudagym.env import CudaKernelEnv
    from cudagym.integrations.verl import CudaKernelAgentLoop

    kwargs = {"suite": "bundled", "suite_options": {"root": str(root)}, "judge": FakeJudge(),
              "token_counter": TOKENIZER}
    prompt = CudaKernelEnv(**kwargs).reset(options={"task": "bundled/L1/01_ReLU"})[0]
    replies = [f"<tool_call>\n{json.dumps({'name': 'list_files', 'arguments': {}})}\n</tool_call>"] * 3
    tokenizer = tiny_tokenizer([prompt, *replies], vocab_size=800)
    reply_len = len(tokenizer.encode(replies[0] + "<|im_end|>", add_special_tokens=False))
    length = response_length if response_length is not None else 20000
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {
        "response_length": reply_len + length if response_length is not None else length, "prompt_length": 20000,
        "multi_turn": {"max_assistant_turns": max_turns}}}})
    CudaKernelAgentLoop.configure(**kwargs)
    loop = CudaKernelAgentLoop(trainer_config=DictConfigWrap(config), server_manager=_Replay(tokenizer, replies),
                               tokenizer=tokenizer, processor=None, dataset_cls=None,
                               data_config=DictConfigWrap(OmegaConf.create({})))
    row = {"raw_prompt": [{"role": "user", "content": "Make it fast."}], "extra_info": {"task": "bundled/L1/01_ReLU"}}
    output = loop.loop.run_until_complete(loop.run({"temperature": 1.0}, **row))
    CudaKernelAgentLoop.configure()
    return output, tokenizer, replies


def test_verl_a_max_turns_cut_ends_the_response_on_the_models_tokens(bundled):
    # verl puts reward_score on the response's last token, and its GAE drops a reward on a token whose mask is 0
    output, tokenizer, _ = _verl_episode(bundled, max_turns=2, response_length=None)
    assert output.response_mask[-1] == 1 and len(output.response_ids) == len(output.response_mask)
    assert output.reward_score is not None
    generated = [i for i, m in zip(output.response_ids, output.response_mask, strict=True) if m]
    assert tokenizer.decode(generated).count("list_files") == 2


def test_verl_a_tool_reply_that_fills_the_response_is_left_out(bundled):
    output, _, _ = _verl_episode(bundled, max_turns=5, response_length=3)  # room for one reply and 3 more ids
    assert output.response_mask[-1] == 1 and set(output.response_mask) == {1}
