"""The Hugging Face adapter on tiny randomly initialised GPT-2 and LLaMA configs (built here; no download)."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from cudagym.baselines.ppo.collect import CollectConfig, collect  # noqa: E402
from cudagym.baselines.ppo.hf import HFPolicy  # noqa: E402
from cudagym.baselines.ppo.losses import LossConfig  # noqa: E402
from cudagym.baselines.ppo.policy import LLMPolicy  # noqa: E402
from cudagym.baselines.ppo.toy import TARGETS, ToyToolCallEnv, example_call  # noqa: E402
from cudagym.baselines.ppo.trainer import PPOTrainer  # noqa: E402

SPECIALS = ["<|im_start|>", "<|im_end|>", "<|pad|>"]


@pytest.fixture(scope="module")
def tokenizer():
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    corpus = [example_call(n) for n in (*TARGETS, "submit")]
    corpus += [f"Call the tool {t}, then call submit." for t in TARGETS]
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS,
                                             initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus * 4, trainer)
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|pad|>", eos_token="<|im_end|>")


def _config(kind: str, vocab: int):
    if kind == "gpt2":
        return transformers.GPT2Config(vocab_size=vocab, n_positions=512, n_embd=32, n_layer=2, n_head=2)
    return transformers.LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                    num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512)


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def policy(request, tokenizer) -> HFPolicy:
    return HFPolicy.from_config(_config(request.param, len(tokenizer)), tokenizer, seed=0)


def test_the_adapter_implements_the_protocol_with_chatml_markers(policy, tokenizer):
    assert isinstance(policy, LLMPolicy)
    assert policy.chat.start == (tokenizer.convert_tokens_to_ids("<|im_start|>"),)
    assert policy.chat.stop_id == tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert policy.encode("<|im_end|>").count(policy.chat.stop_id) == 0  # a marker in text stays text


def test_kv_cached_sampling_logprobs_equal_a_full_forward(policy):
    prompts = [policy.chat.turn("user", "Call the tool verify, then call submit.") + policy.chat.header("assistant")]
    prompts.append(prompts[0][4:])  # a shorter prompt: left padding in the batch
    gens = policy.generate(prompts, max_new_tokens=6, generator=torch.Generator().manual_seed(0))
    for prompt, gen in zip(prompts, gens, strict=True):
        tokens = torch.tensor([prompt + list(gen.tokens)])
        mask = torch.zeros_like(tokens, dtype=torch.float32)
        mask[0, len(prompt):] = 1
        scored = policy.score(tokens, torch.ones_like(tokens), mask).logprobs[0, len(prompt):]
        torch.testing.assert_close(scored, torch.tensor(gen.logprobs), atol=1e-4, rtol=0)


def test_one_ppo_update_on_toy_rollouts_changes_actor_and_critic(policy):
    rollout = collect(policy, [ToyToolCallEnv() for _ in range(2)], CollectConfig(max_new_tokens=8, max_tokens=400),
                      seeds=[0, 1], generator=torch.Generator().manual_seed(0))
    rollout.episodes[0].reward = 1.0  # give the update a non-zero advantage
    before = [p.detach().clone() for p in (*policy.actor_parameters(), *policy.critic_parameters())]
    stats = PPOTrainer(policy, LossConfig(), actor_lr=1e-3, critic_lr=1e-3).update(rollout.episodes)
    after = list((*policy.actor_parameters(), *policy.critic_parameters()))
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
    assert stats["train/ratio_max"] == pytest.approx(1.0, abs=1e-4)  # first pass: new == old
    values = policy.values(torch.tensor([rollout.episodes[0].tokens]), torch.ones(1, len(rollout.episodes[0].tokens),
                                                                                  dtype=torch.long))
    assert values.shape == (1, len(rollout.episodes[0].tokens)) and float(values[0, 0]) == 0.0
