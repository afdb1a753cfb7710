"""``cudagym export RUN_DIR --format rft|sft|chat --out FILE``: a bench run's episodes as training data.

Episodes are filtered as CUDA Agent's rejection fine-tuning stage does (and as ``cudagym train rft``
filters again on reading): kept when the reward is above ``--min-reward`` (0), dropped when an action is not
a valid tool call (:func:`cudagym.toolcalls.parse_action`) or when one action repeats ``--max-repeats`` (3)
times in a row (a loop); each drop is counted under its first reason and reported. ``--no-filter`` keeps
every episode. One JSON line per kept episode, by format:

- ``rft``: what ``cudagym train rft --journal FILE`` reads (``baselines/ppo/warmup.read_journal``), the
  layout of its own rollout journals: ``{"messages": [{"role", "content"}...], "reward", "terminated",
  "truncated", "info"}`` with the prompt as the ``user`` message, each action as ``assistant`` text and each
  observation as a ``tool`` message.
- ``chat``: OpenAI-style messages with native ``tool_calls`` and the tool schemas
  (:func:`cudagym.messages.chat_view`): ``{"messages", "tools", "reward", "task_id"}``.
- ``sft``: token ids with masks (:func:`cudagym.messages.tokenize` over ChatML segments): ``{"ids",
  "action_mask", "observation_mask", "turn", "reward", "task_id"}``; ``action_mask`` is 1 on the agent's
  tokens, ``observation_mask`` on the environment's. Tokenized by ``--tokenizer`` (the shipped
  ``cudagym:code-bpe-16k`` by default, a tiktoken name, or ``hf:<folder>`` for a Hugging Face tokenizer).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from cudagym.bench.journal import EPISODES, MANIFEST, Entry, read_entries, read_manifest
from cudagym.bench.metrics import longest_run
from cudagym.errors import ConfigError
from cudagym.messages import CHATML, chat_view, segments, tokenize
from cudagym.paths import writable_file
from cudagym.toolcalls import ActionError, parse_action

FORMATS = ("rft", "sft", "chat")
DROP_REASONS = ("no_actions", "reward", "invalid_tool_call", "loop")


@dataclass(frozen=True)
class Filter:
    """CUDA Agent's RFT filter.

    Attributes:
        min_reward: Keep episodes whose reward is above this.
        max_repeats: Drop episodes that repeat one action this many times in a row.
        enabled: False keeps every episode.
    """

    min_reward: float = 0.0
    max_repeats: int = 3
    enabled: bool = True

    def reason(self, entry: Entry) -> str:
        """Why ``entry`` is dropped (one of :data:`DROP_REASONS`), or ``""`` when it is kept."""
        if not self.enabled:
            return ""
        actions = [t.action for t in entry.record.turns]
        if not actions:
            return "no_actions"
        if entry.record.reward <= self.min_reward:
            return "reward"
        if any(isinstance(parse_action(a), ActionError) for a in actions):
            return "invalid_tool_call"
        if longest_run(actions) >= self.max_repeats:
            return "loop"
        return ""


@dataclass
class ExportResult:
    """What an export wrote: episodes kept and dropped per reason."""

    path: Path
    total: int = 0
    kept: int = 0
    dropped: Counter[str] = field(default_factory=Counter)

    def summary(self) -> str:
        """One line: kept of total, and the drops by reason."""
        drops = ", ".join(f"{r.replace('_', ' ')}: {self.dropped.get(r, 0)}" for r in DROP_REASONS)
        return f"kept {self.kept} of {self.total} episode(s) in {self.path}; dropped ({drops})"


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the command's arguments."""
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a `cudagym bench --out` folder")
    parser.add_argument("--format", required=True, choices=FORMATS, help="rft (cudagym train rft), sft, chat")
    parser.add_argument("--out", required=True, metavar="FILE", help="the JSONL file to write")
    parser.add_argument("--min-reward", type=float, default=0.0, help="keep rewards above this (default 0)")
    parser.add_argument("--max-repeats", type=int, default=3, help="drop loops of this many equal actions (default 3)")
    parser.add_argument("--no-filter", action="store_true", help="keep every episode")
    parser.add_argument("--tokenizer", default=None, help="sft: cudagym:code-bpe-16k (default), a tiktoken name, "
                                                          "or hf:<folder>")
    parser.add_argument("--system", default=None, help="a system message to put first (rft, chat)")


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Write the export; prints how many episodes were kept and why the others were dropped."""
    out = out or sys.stdout
    if args.max_repeats < 2:
        raise ConfigError(f"expected --max-repeats >= 2, got {args.max_repeats}")
    rule = Filter(args.min_reward, args.max_repeats, enabled=not args.no_filter)
    result = export(args.run_dir, args.format, args.out, rule, tokenizer=args.tokenizer, system=args.system)
    print(result.summary(), file=out)
    return 0


def export(run_dir: str | Path, fmt: str, out_file: str | Path, rule: Filter = Filter(),  # noqa: B008 - frozen
           *, tokenizer: str | None = None, system: str | None = None) -> ExportResult:
    """Filter the run's episodes and write the kept ones in ``fmt``.

    Raises:
        ConfigError: Not a run folder, an unknown format, or an ``out_file`` that cannot be written or is the
            run's own journal or manifest.
    """
    if fmt not in FORMATS:
        raise ConfigError(f"expected --format one of {', '.join(FORMATS)}, got {fmt!r}")
    read_manifest(run_dir)  # a clear error when this is not a run folder
    _refuse_run_files(run_dir, out_file)
    writable_file(out_file, "--out")
    entries = read_entries(run_dir)
    line = _line_maker(fmt, tokenizer, system)
    result = ExportResult(Path(out_file), total=len(entries))
    # Written beside and moved into place: a failure half way leaves the previous file as it was.
    partial = result.path.with_name(f".{result.path.name}.partial")
    try:
        with open(partial, "w", encoding="utf-8") as fh:
            for entry in entries:
                reason = rule.reason(entry)
                if reason:
                    result.dropped[reason] += 1
                    continue
                fh.write(json.dumps(line(entry), default=str) + "\n")
                result.kept += 1
        os.replace(partial, result.path)
    finally:
        partial.unlink(missing_ok=True)
    return result


def _refuse_run_files(run_dir: str | Path, out_file: str | Path) -> None:
    """Refuse an ``--out`` that is the run's own journal or manifest (writing it would destroy the run)."""
    target = Path(out_file).resolve()
    for name in (EPISODES, MANIFEST):
        if target == (Path(run_dir) / name).resolve():
            raise ConfigError(f"--out {out_file} is the run's own {name}; writing it would destroy the run: "
                              "give another file, e.g. RUN_DIR/rft.jsonl")


def rft_line(entry: Entry, system: str | None = None) -> dict[str, Any]:
    """The episode as one line of the trajectory journal ``cudagym train rft`` reads."""
    record = entry.record
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": record.prompt})
    for turn in record.turns:
        messages.append({"role": "assistant", "content": turn.action})
        messages.append({"role": "tool", "content": turn.observation})
    info = {"key": entry.key, "task_id": record.task_id, "level": entry.summary.level, "tier": entry.summary.final.tier,
            "episode_end": record.episode_end, "agent": record.agent}
    return {"messages": messages, "reward": record.reward, "terminated": record.terminated,
            "truncated": record.truncated, "info": info}


def _line_maker(fmt: str, tokenizer: str | None, system: str | None) -> Callable[[Entry], dict[str, Any]]:
    if fmt == "rft":
        return lambda e: rft_line(e, system)
    if fmt == "chat":
        return lambda e: {**chat_view(e.record, system=system).to_dict(), "key": e.key}
    encoder = load_tokenizer(tokenizer)

    def sft(entry: Entry) -> dict[str, Any]:
        tokens = tokenize(segments(entry.record, CHATML), encoder)
        return {"key": entry.key, "task_id": entry.record.task_id, "reward": entry.record.reward,
                "ids": list(tokens.ids), "action_mask": list(tokens.action_mask),
                "observation_mask": list(tokens.observation_mask), "turn": list(tokens.turn)}

    return sft


def load_tokenizer(spec: str | None) -> Any:
    """The tokenizer for ``sft``: the shipped BPE (default), a tiktoken encoding, or ``hf:<folder>``.

    Raises:
        ConfigError: The name is not one of these, or the Hugging Face tokenizer cannot be loaded.
    """
    if spec in (None, "cudagym:code-bpe-16k", "code-bpe-16k"):
        from cudagym.tokens import shipped_encoding

        return shipped_encoding()
    assert spec is not None
    if spec.startswith("hf:"):
        try:
            from transformers import AutoTokenizer
        except ImportError as exc:
            raise ConfigError("hf: tokenizers need transformers (pip install 'cudagym[train]')") from exc
        try:
            return AutoTokenizer.from_pretrained(spec[3:], local_files_only=True)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot load the Hugging Face tokenizer {spec[3:]!r}: {exc}") from exc
    import tiktoken

    try:
        return tiktoken.get_encoding(spec.removeprefix("tiktoken:"))
    except Exception as exc:  # noqa: BLE001 - tiktoken raises ValueError for names, network errors for downloads
        raise ConfigError(f"expected --tokenizer cudagym:code-bpe-16k, a tiktoken name or hf:<folder>, "
                          f"got {spec!r} ({exc})") from exc

