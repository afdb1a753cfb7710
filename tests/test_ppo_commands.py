"""``cudagym train rft | critic | ppo`` end to end on the toy env with the tiny policy; help from field docstrings."""

from __future__ import annotations

import json

import pytest
import torch
from cudagym.baselines.ppo.collect import CollectConfig
from cudagym.baselines.ppo.commands import PPOArgs, field_docs
from cudagym.baselines.ppo.loop import LoopConfig, read_metrics, train
from cudagym.baselines.ppo.losses import LossConfig
from cudagym.baselines.ppo.tiny import TinyConfig, TinyPolicy
from cudagym.baselines.ppo.toy import ToyToolCallEnv, random_tool_journal, tool_call_ids
from cudagym.baselines.ppo.trainer import PPOTrainer

from cudagym.cli import main
from cudagym.errors import ConfigError

TOY = ["--policy", "tiny", "--tiny-vocab", "toy-tools", "--env-id", "CudaGymToy-ToolCall-v0",
       "--max-new-tokens", "16", "--max-tokens", "256"]


def test_every_args_field_has_a_docstring_that_becomes_its_help(capsys):
    assert main(["train", "ppo", "--help"]) == 0
    out = capsys.readouterr().out
    docs = field_docs(PPOArgs)
    assert "clip_high" in docs and "--clip-high" in out and docs["clip_high"].split("(")[0].strip() in out
    assert len(docs) == len(PPOArgs.__dataclass_fields__)


def test_bad_input_is_a_usage_error_not_a_traceback(tmp_path, capsys):
    assert main(["train", "rft", "--journal", str(tmp_path / "missing.jsonl")]) == 2
    assert "expected a trajectory journal" in capsys.readouterr().err
    assert main(["train", "ppo", "--env-id", "Nope-v0", "--out-dir", str(tmp_path)]) == 2
    assert "unknown env id" in capsys.readouterr().err
    assert main(["train", "ppo", "--env-kwargs", "[1]", "--out-dir", str(tmp_path)]) == 2
    for flags, said in ((["--batch-size", "0"], "expected --batch-size >= 1, got 0"),
                        (["--steps", "0"], "expected --steps >= 1, got 0"),
                        (["--lr", "-1"], "expected --lr > 0"),
                        (["--device", "nosuch"], "expected --device to be a torch device"),
                        (["--init", str(tmp_path / "not-a-policy.pt")], "--init")):
        (tmp_path / "not-a-policy.pt").write_text("not a checkpoint")
        journal = tmp_path / "one.jsonl"
        journal.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant",
                                       "content": json.dumps({"name": "compile", "arguments": {}})}],
                                       "reward": 1.0}) + "\n")
        code = main(["train", "rft", "--journal", str(journal), "--out-dir", str(tmp_path / "rft"), *flags])
        err = capsys.readouterr().err
        assert code == 2 and said in err and "Traceback" not in err, (flags, err)
    if not torch.cuda.is_available():
        assert main(["train", "rft", "--journal", str(journal), "--device", "cuda"]) == 2
        assert "torch here has no CUDA device" in capsys.readouterr().err


def test_an_episode_longer_than_the_tiny_policys_context_is_a_usage_error(tmp_path, capsys):
    journal = tmp_path / "long.jsonl"
    long_turn = "word " * 2000  # a real episode's prompt is about 2,600 tokens; the tiny policy takes 512
    action = json.dumps({"name": "compile", "arguments": {}})
    journal.write_text(json.dumps({"messages": [{"role": "user", "content": long_turn},
                                                {"role": "assistant", "content": action}], "reward": 1.0}) + "\n")
    assert main(["train", "rft", "--journal", str(journal), "--keep-all", "--steps", "1", "--policy", "tiny",
                 "--out-dir", str(tmp_path / "rft")]) == 2
    err = capsys.readouterr().err
    assert "expected episodes of at most 512 tokens for this policy" in err and "--policy" in err, err
    assert "Traceback" not in err


def test_the_three_stages_chain_and_ppo_resumes(tmp_path):
    journal = tmp_path / "journal.jsonl"
    journal.write_text("".join(json.dumps(r) + "\n" for r in random_tool_journal(40, seed=0)))
    rft, critic, ppo = tmp_path / "rft", tmp_path / "critic", tmp_path / "ppo"
    assert main(["train", "rft", "--journal", str(journal), "--keep-all", "--steps", "5", "--lr", "1e-3",
                 "--policy", "tiny", "--tiny-vocab", "toy-tools", "--out-dir", str(rft)]) == 0
    assert len(read_metrics(rft)) == 5
    assert main(["train", "critic", *TOY, "--init", str(rft / "policy.pt"), "--episodes", "4", "--steps", "3",
                 "--out-dir", str(critic)]) == 0
    common = ["train", "ppo", *TOY, "--init", str(critic / "policy.pt"), "--episodes-per-update", "4",
              "--out-dir", str(ppo), "--checkpoint-every", "1", "--journal"]
    assert main([*common, "--updates", "2"]) == 0
    assert main([*common, "--updates", "3", "--resume"]) == 0
    steps = [m["step"] for m in read_metrics(ppo)]
    assert steps == [0, 1, 2]  # the resumed run did the one update left
    record = read_metrics(ppo)[-1]
    for key in ("rollout/reward_mean", "rollout/tier_counts", "train/clipfrac", "train/approx_kl",
                "train/ratio_max", "train/is_weight_mean", "train/explained_variance", "train/entropy",
                "perf/tokens_per_s"):
        assert key in record
    assert torch.load(ppo / "checkpoint.pt", weights_only=True)["update"] == 3
    assert len((ppo / "rollouts.jsonl").read_text().splitlines()) == 12



def test_ppo_stops_early_once_the_recent_mean_reward_reaches_the_target(tmp_path):
    policy = TinyPolicy(TinyConfig(d_model=16, n_layers=1, n_heads=2, max_len=256), seed=0,
                        output_ids=tool_call_ids(TinyPolicy().encode))
    trainer = PPOTrainer(policy, LossConfig(), actor_lr=1e-3, critic_lr=1e-3)
    # every toy reward is >= 0: a target of 0 is reached once the window of 3 updates is full
    loop = LoopConfig(updates=6, episodes_per_update=2, out_dir=str(tmp_path), checkpoint_every=0, progress=False,
                      target_reward=0.0, target_window=3)
    history = train(trainer, ToyToolCallEnv, loop, CollectConfig(max_new_tokens=4, max_tokens=256))
    assert len(history) == 3 and [m["step"] for m in read_metrics(tmp_path)] == [0, 1, 2]
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=True)["update"] == 3
    with pytest.raises(ConfigError, match="target_window"):
        LoopConfig(target_window=0)
