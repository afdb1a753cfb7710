"""Defects earlier reviews found and left: each reproduced through the public API or the command line.

``cudagym eval`` refuses a solution file it would skip or alter; a damaged journal record is named down to its
field; the TRL prompt is joined with a separator; the ``sft`` export trains the stop id but not the newline after
it, as the PPO and RFT trainers do; verl's ``num_turns`` is verl's own count; a ``bench`` that fails before
starting leaves no empty ``--out``; the judge journal names a damaged line's own offset; ``judge serve`` takes a
Ctrl-C at any point of its start-up as a stop.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from bench_journals import entry, judge_serve_interrupted, verdict, write_run
from conftest import write_bundled_tree
from conftest_env import TOKENIZER
from fakes import FakeJudge

from cudagym import cli
from cudagym.bench.evaluate import read_solution
from cudagym.errors import ConfigError
from cudagym.judge.journal import Journal
from cudagym.messages import CHATML, segments
from cudagym.rollout import EpisodeRecord
from cudagym.solution import Solution

pytestmark = pytest.mark.usefixtures("offline_data_env")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "cudagym" / "templates" / "examples" / "abs"
SWISH = "bundled/L1/01_Swish"
RELU = "bundled/L1/01_ReLU"


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run ``cudagym ARGV``, check it is a usage error (exit 2) in one line, no traceback; its stderr."""
    code = cli.main(list(argv))
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and err.startswith("cudagym: error: "), err
    return err


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A bundled-suite tree (tasks and their solutions)."""
    return write_bundled_tree(tmp_path / "bundled")


# ------------------------------------------------------------------------- 1. cudagym eval: what it reads


@pytest.fixture
def solution(tmp_path: Path) -> Path:
    """A copy of the extension-format example (model_new.py, kernels/*.cu and *_binding.cpp)."""
    return Path(shutil.copytree(EXAMPLES / "extension", tmp_path / "solution"))


def eval_refused(capsys: pytest.CaptureFixture[str], path: Path) -> str:
    return refused(capsys, "eval", str(path), "--task", SWISH, "--judge", "bench_journals:fake_judge")


def test_eval_refuses_a_linked_kernel_file_naming_it_instead_of_building_without_it(capsys, solution, tmp_path):
    kernel = next((solution / "kernels").glob("*.cu"))
    moved = tmp_path / "elsewhere.cu"
    kernel.rename(moved)
    kernel.symlink_to(moved)
    err = eval_refused(capsys, solution)
    assert f"expected {kernel} to be a file, found a symbolic link" in err
    assert "no kernels" not in err and "no sources" not in err


def test_eval_refuses_a_linked_kernels_folder_and_a_linked_model_new(capsys, solution, tmp_path):
    (solution / "kernels").rename(tmp_path / "real_kernels")
    (solution / "kernels").symlink_to(tmp_path / "real_kernels")
    assert f"expected {solution / 'kernels'} to be a folder, found a symbolic link" in eval_refused(capsys, solution)
    (solution / "kernels").unlink()
    (tmp_path / "real_kernels").rename(solution / "kernels")
    (solution / "model_new.py").rename(tmp_path / "model_new.py")
    (solution / "model_new.py").symlink_to(tmp_path / "model_new.py")
    assert f"expected {solution / 'model_new.py'} to be a file, found a symbolic link" in eval_refused(capsys,
                                                                                                      solution)


def test_eval_refuses_a_kernel_that_is_not_utf8_instead_of_replacing_its_bytes(capsys, solution):
    kernel = next((solution / "kernels").glob("*.cu"))
    text = kernel.read_bytes()
    kernel.write_bytes(text + b"// caf\xe9\n")
    err = eval_refused(capsys, solution)
    assert f"expected {kernel} to be UTF-8 text, found bytes that are not UTF-8 at offset {len(text) + 6}" in err


def test_eval_refuses_a_single_file_that_is_not_a_py_or_not_utf8(capsys, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("class ModelNew: pass\n")
    err = eval_refused(capsys, notes)
    assert "expected a solution folder or a model_new.py (a .py file)" in err and "'notes.txt'" in err
    binary = tmp_path / "model_new.py"
    binary.write_bytes(b'x = "\xff"\n')
    assert f"expected {binary} to be UTF-8 text, found bytes that are not UTF-8 at offset 5" in eval_refused(
        capsys, binary)


def test_eval_reads_a_good_folder_as_the_env_snapshots_it_and_ignores_links_it_does_not_read(solution, tmp_path):
    (tmp_path / "notes.md").write_text("mine\n")
    (solution / "notes.md").symlink_to(tmp_path / "notes.md")  # not a file any format reads
    (solution / "build").symlink_to(tmp_path)  # nor a folder
    assert read_solution(solution) == Solution.from_dir(solution, "extension")
    # the env's own snapshot keeps its meaning: a link in a workspace is left out, not an error
    kernel = next((solution / "kernels").glob("*.cu"))
    kernel.rename(tmp_path / "k.cu")
    kernel.symlink_to(tmp_path / "k.cu")
    assert kernel.relative_to(solution).as_posix() not in Solution.from_dir(solution, "extension").files
    with pytest.raises(ConfigError, match="symbolic link"):
        read_solution(solution)


# ------------------------------------------------------------------- 2. a damaged record names its field


def damaged_run(tmp_path: Path, change: Any) -> Path:
    """A run of two episodes whose second journal line has ``change(data)`` applied."""
    run = write_run(tmp_path / "run", [entry(SWISH, 1, 0, verdict(50.0)), entry(SWISH, 1, 1, verdict(60.0))])
    journal = run / "episodes.jsonl"
    first, second = journal.read_text().splitlines()
    data = json.loads(second)
    change(data)
    journal.write_text(f"{first}\n{json.dumps(data)}\n")
    return run


@pytest.mark.parametrize(("change", "field", "got"), [
    (lambda d: d["record"].update(reward="x"), "record.reward to be float", "got str 'x'"),
    (lambda d: d["record"]["turns"][0].update(action=5), "record.turns[0].action to be str", "got int 5"),
    (lambda d: d["record"].update(terminated=1), "record.terminated to be bool", "got int 1"),
    (lambda d: d["record"]["turns"][1].update(usage={"prompt_tokens": "10"}), "record.turns[1].usage",
     "got dict"),
    (lambda d: d["record"].update(turns=[1, 2]), "record.turns to be a list of Turn dicts", "something else"),
])
def test_export_names_the_file_line_and_field_of_a_damaged_record(capsys, tmp_path, change, field, got):
    run = damaged_run(tmp_path, change)
    err = refused(capsys, "export", str(run), "--format", "rft", "--out", str(tmp_path / "rft.jsonl"))
    assert f"{run / 'episodes.jsonl'}:2: expected {field}" in err and got in err
    assert "unexpected" not in err and not (tmp_path / "rft.jsonl").exists()


def test_a_record_still_round_trips_and_ints_stand_for_floats(tmp_path):
    record = entry(SWISH, 1, 0, verdict(50.0)).record
    data = json.loads(record.to_json())
    assert EpisodeRecord.from_dict(data) == record
    data["reward"], data["turns"][0]["env_time_s"] = 3, 1  # JSON writes 3.0 as 3 in some producers
    assert EpisodeRecord.from_dict(data).reward == 3


# ------------------------------------------------------------------------------ 3. TRL's prompt join


def test_trl_reset_text_is_joined_to_the_user_message_with_a_blank_line(root):
    from cudagym.env import CudaKernelEnv
    from cudagym.integrations.trl import CudaKernelTools

    kwargs = {"suite_options": {"root": str(root)}, "judge": FakeJudge(), "token_counter": TOKENIZER}
    env = CudaKernelTools("bundled", **kwargs)
    user = "Make it fast."
    observation = env.reset(prompt=[{"role": "user", "content": user}], task=RELU)
    # TRL 1.16 GRPOTrainer: prompts[i] = prompt[:-1] + [{**prompt[-1], "content": content + observation}]
    assert (user + observation).startswith("Make it fast.\n\n# Task:")
    plain = CudaKernelEnv("bundled", **kwargs)
    assert observation == "\n\n" + plain.reset(options={"task": RELU})[0]  # the prompt itself, unchanged
    plain.close()
    env._close()


# ------------------------------------------------------------------ 4. sft masks agree with the trainers


def test_the_sft_segments_train_the_stop_marker_but_not_the_newline_after_it():
    record = entry(SWISH, 1, 0, verdict(50.0)).record
    pieces = segments(record, CHATML)
    assistant = [i for i, p in enumerate(pieces) if p.role == "assistant"]
    first = assistant[0]
    assert pieces[first + 1].text == "<|im_end|>" and pieces[first + 1].trainable
    assert pieces[first + 2].text == "\n" and not pieces[first + 2].trainable
    assert "".join(p.text for p in pieces).count("<|im_end|>\n") == 1 + 2 * len(record.turns)
    assert not any(p.trainable for p in pieces if p.text == "\n")


def test_the_sft_export_has_the_ids_and_mask_the_rft_trainer_builds_from_the_same_episodes(capsys, tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("trl")
    from cudagym.baselines.ppo.hf import HFPolicy
    from cudagym.baselines.ppo.warmup import read_journal
    from tiny_lm import tiny_tokenizer
    from transformers import GPT2Config

    run = write_run(tmp_path / "run", [entry(SWISH, 1, 0, verdict(50.0)), entry(SWISH, 1, 1, verdict(60.0))])
    record = entry(SWISH, 1, 0, verdict(50.0)).record
    tokenizer = tiny_tokenizer([record.prompt, *(t.action + t.observation for t in record.turns)], vocab_size=400)
    tokenizer.save_pretrained(tmp_path / "tok")
    for fmt in ("sft", "rft"):
        assert cli.main(["export", str(run), "--format", fmt, "--out", str(tmp_path / f"{fmt}.jsonl"),
                         "--tokenizer", f"hf:{tmp_path / 'tok'}", "--no-filter"]) == 0, capsys.readouterr().err
    policy = HFPolicy.from_config(GPT2Config(vocab_size=len(tokenizer), n_positions=64, n_embd=8, n_layer=1,
                                             n_head=1), tokenizer)
    sft = [json.loads(line) for line in (tmp_path / "sft.jsonl").read_text().splitlines()]
    rft = read_journal(tmp_path / "rft.jsonl")
    assert len(sft) == len(rft) == 2
    for line, episode in zip(sft, rft, strict=True):
        ids, mask = policy.chat.conversation(episode.messages)  # what `cudagym train rft` trains on
        assert line["ids"] == ids
        assert line["action_mask"] == mask
        stops = [i for i, t in enumerate(ids) if t == policy.chat.stop_id]
        assert [line["action_mask"][i] for i in stops] == [0] + [1, 0] * (len(stops) // 2)
        assert all(line["action_mask"][i + 1] == 0 for i in stops if i + 1 < len(ids))  # the newline


# ---------------------------------------------------------------------------- 5. verl's num_turns


class CompileForever:
    """Stands in for verl's server manager: every reply is a compile call (the episode never submits)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.calls = 0

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       **kwargs: Any) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        self.calls += 1
        text = '<tool_call>\n{"name": "compile", "arguments": {}}\n</tool_call><|im_end|>'
        return TokenOutput(token_ids=self.tokenizer.encode(text, add_special_tokens=False))


def test_verl_num_turns_is_user_plus_assistant_turns_plus_one_when_the_turns_run_out(root):
    pytest.importorskip("verl.experimental.agent_loop.agent_loop")
    from omegaconf import OmegaConf
    from tiny_lm import tiny_tokenizer
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap

    from cudagym.env import CudaKernelEnv
    from cudagym.integrations.verl import CudaKernelAgentLoop

    kwargs = {"suite": "bundled", "suite_options": {"root": str(root)}, "judge": FakeJudge(),
              "token_counter": TOKENIZER}
    tokenizer = tiny_tokenizer([CudaKernelEnv(**kwargs).reset(options={"task": RELU})[0]], vocab_size=500)
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {
        "response_length": 20000, "prompt_length": 20000, "multi_turn": {"max_assistant_turns": 3}}}})
    server = CompileForever(tokenizer)
    CudaKernelAgentLoop.configure(**kwargs)
    try:
        loop = CudaKernelAgentLoop(trainer_config=DictConfigWrap(config), server_manager=server,
                                   tokenizer=tokenizer, processor=None, dataset_cls=None,
                                   data_config=DictConfigWrap(OmegaConf.create({})))
        row = {"raw_prompt": [{"role": "user", "content": "Make it fast."}], "extra_info": {"task": RELU}}
        output = loop.loop.run_until_complete(loop.run({"temperature": 1.0}, **row))
    finally:
        CudaKernelAgentLoop.configure()
    # 3 replies, the 2 tool messages between them, the prompt: ToolAgentLoop's user + assistant turns + 1
    assert server.calls == 3 and output.num_turns == 6


# ------------------------------------------------------------ 6. bench leaves no empty --out it made


def bench_fails(capsys: pytest.CaptureFixture[str], out: Path, *argv: str) -> str:
    return refused(capsys, "bench", "--no-progress", "--out", str(out), *argv)


@pytest.mark.parametrize("argv", [
    ("--agent", "scripted", "--tasks", "bundled/L9/99_Nope", "--judge", "bench_journals:fake_judge"),
    ("--agent", "no_such_agent", "--tasks", SWISH, "--judge", "bench_journals:fake_judge"),
])
def test_a_bench_that_fails_before_starting_removes_the_empty_folders_it_made(capsys, tmp_path, argv):
    out = tmp_path / "runs" / "new" / "run"
    bench_fails(capsys, out, *argv)
    assert not (tmp_path / "runs").exists() and tmp_path.is_dir()


def test_a_bench_whose_cache_cannot_be_made_removes_its_new_out(capsys, monkeypatch, tmp_path):
    (tmp_path / "a_file").write_text("not a folder\n")
    monkeypatch.setenv("CUDAGYM_CACHE_DIR", str(tmp_path / "a_file" / "cache"))
    err = bench_fails(capsys, tmp_path / "run", "--agent", "scripted", "--tasks", SWISH)
    assert "cache" in err and not (tmp_path / "run").exists()


def test_a_bench_that_fails_before_starting_keeps_a_folder_that_was_there(capsys, tmp_path):
    there = tmp_path / "there"
    there.mkdir()
    bench_fails(capsys, there / "run", "--agent", "no_such_agent", "--tasks", SWISH)
    assert there.is_dir() and not (there / "run").exists()
    bench_fails(capsys, there, "--agent", "no_such_agent", "--tasks", SWISH)
    assert there.is_dir() and list(there.iterdir()) == []


# ------------------------------------------------------------- 7. the judge journal's damaged line


def test_the_judge_journal_names_the_byte_where_the_damaged_line_starts(caplog, tmp_path):
    path = tmp_path / "judge.jsonl"
    journal = Journal(path)
    journal.record_job("a", task_id=SWISH, solution_hash="h1")
    assert len(journal.entries()) == 1  # read: the next read starts after this line
    bad = path.stat().st_size
    with path.open("ab") as fh:
        fh.write(b'{"kind": "job", "job_id": 7}\n')
    journal.record_job("b", task_id=SWISH, solution_hash="h2")
    later = path.stat().st_size
    with path.open("ab") as fh:
        fh.write(b"not json\n")
    with caplog.at_level(logging.WARNING, logger="cudagym.judge.journal"):
        assert [e.job_id for e in journal.entries()] == ["a", "b"]
        assert [e.job_id for e in Journal(path).entries()] == ["a", "b"]  # a fresh reader, from byte 0
    found = [r.getMessage() for r in caplog.records if "unreadable line" in r.getMessage()]
    assert found == [f"journal {path}: skipping an unreadable line at byte {at}" for at in (bad, later, bad, later)]


# --------------------------------------------------------------------- 8. judge serve and Ctrl-C


def serve_args(cache: Path) -> argparse.Namespace:
    from cudagym.commands import judge as command

    parser = argparse.ArgumentParser()
    command.configure(parser)
    return parser.parse_args(["serve", "--devices", "none", "--cache-dir", str(cache)])


def python_calls(run: Any, at: int | None = None) -> int:
    """Run ``run()`` counting the Python calls it makes on this thread once it has printed its first line.

    With ``at``, SIGINT is raised at that call: the real signal, taken by whatever handler is installed then.
    """
    calls, printed = 0, False

    def count(frame: FrameType, event: str, arg: object) -> None:
        nonlocal calls, printed
        printed = printed or (event == "c_call" and arg is print)
        if event == "call" and printed:
            calls += 1
            if calls == at:
                signal.raise_signal(signal.SIGINT)  # handled at the next bytecode

    previous = sys.getprofile()
    sys.setprofile(count)
    try:
        run()
    finally:
        sys.setprofile(previous)
    return calls


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals need the main thread")
def test_judge_serve_takes_a_ctrl_c_anywhere_in_its_start_up_as_a_stop(capsys, tmp_path):
    from cudagym.commands import judge as command

    args = serve_args(tmp_path / "cache")
    stopped = threading.Event()
    stopped.set()
    command.run(args, stopped)  # imports done, so the counts below are the start-up's own
    start_up = python_calls(lambda: command.run(args, stopped))
    capsys.readouterr()
    before = signal.getsignal(signal.SIGINT)
    # from its "starting" line (the first thing it does) to the end of its start-up
    for at in (1, start_up // 5, 2 * start_up // 5, 3 * start_up // 5, 4 * start_up // 5):
        codes: list[int] = []
        try:
            python_calls(lambda: codes.append(command.run(args)), at)  # noqa: B023 - called at once
        except KeyboardInterrupt:
            pytest.fail(f"a Ctrl-C at Python call {at} of {start_up} escaped judge serve")
        err = capsys.readouterr().err
        assert codes == [0] and "cudagym judge: stopped (Ctrl-C)" in err, (at, err)
        assert signal.getsignal(signal.SIGINT) is before  # Ctrl-C is KeyboardInterrupt again afterwards


def test_judge_serve_stopped_with_ctrl_c_while_starting_exits_0(tmp_path):
    code, first, err = judge_serve_interrupted(tmp_path / "cache", lambda p: p.stderr.readline() if p.stderr else "")
    assert first == "cudagym judge: starting (Ctrl-C stops it)\n", first
    assert code == 0, err
    assert "stopped (Ctrl-C)" in err and "error" not in err and "Traceback" not in err
