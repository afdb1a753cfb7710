"""``cudagym demo``: replay bundled reference solutions through the env's real tool calls.

For each task a scripted agent (:mod:`cudagym.baselines.scripted`) writes the reference solution's files,
then calls ``compile``, ``verify``, ``profile`` and ``submit``; every turn and the final reward are printed.
Without a GPU the demo says so at the top and still runs what needs none: the writes and the compile (a
real build by the judge); verify and profile are skipped, and submit ends each episode with reward 0, marked
not evaluated.

Exit status: 0 when every reference solution built (and, where a GPU judged it, scored 0 or more); 1 when a
build failed for any reason, a missing ``nvcc`` included (the compile line then names what is missing), or a
judged solution scored -1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TextIO

from cudagym.baselines.scripted import JUDGE_STEPS, ScriptedAgent, replay

from cudagym.env import JUDGES, CudaKernelEnv
from cudagym.errors import ConfigError, UnknownTaskError
from cudagym.judge.harness import COMPILE_FAILED_PREFIX
from cudagym.judge.interface import Judge
from cudagym.judge.protocol import get_protocol
from cudagym.progress import ShowProgress, waiting
from cudagym.rollout import EpisodeRecord, Turn
from cudagym.task import Task

DEFAULT_COUNT = 3
SUMMARY_CHARS = 110


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the demo's arguments."""
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--tasks", nargs="+", metavar="ID", help="bundled task ids, e.g. bundled/L1/01_Swish")
    which.add_argument("--count", type=int, default=DEFAULT_COUNT,
                       help=f"how many tasks, spread over the levels (default {DEFAULT_COUNT})")
    which.add_argument("--all", action="store_true", help="every bundled task")
    parser.add_argument("--judge", default="local", choices=sorted(JUDGES), help="judge backend (default local)")
    parser.add_argument("--protocol", default=None, help="evaluation protocol (default: cudagym-v6)")
    parser.add_argument("--bundled-root", default=None,
                        help="a folder laid out like envs/bundled/ (default: the installed suite)")
    parser.add_argument("--tokenizer", default=None,
                        help="token counter (default: the shipped cudagym:code-bpe-16k; e.g. o200k_base)")
    parser.add_argument("--full", action="store_true", help="print whole observations, not one line per turn")


EXIT_OK = 0
EXIT_FAILED = 1  # a reference solution did not build, or was evaluated and scored below 0


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Replay the chosen tasks; returns 0 when every solution built (and, where judged, scored >= 0), else 1."""
    out = out or sys.stdout
    from cudagym.sources.bundled import BundledSource

    source = BundledSource(root=args.bundled_root)
    tasks = _choose(source.tasks(), args)
    judge = JUDGES[args.judge](get_protocol(args.protocol))
    env = ShowProgress(CudaKernelEnv(  # an elapsed-time line on the terminal while the judge works
        "bundled", tasks=[t.id for t in tasks], suite_options={"root": args.bundled_root}, judge=judge,
        token_counter=args.tokenizer,
    ))
    records: list[EpisodeRecord] = []
    try:
        with waiting("starting the judge (the first start on a host imports torch and finds the compilers)"):
            has_gpu = _header(judge, tasks, out)
        # without a GPU, run only what needs none: the writes and the (real) compile; submit ends the episode
        steps = JUDGE_STEPS if has_gpu else ("compile", "submit")
        for task in tasks:
            observation, info = env.reset(options={"task": task.id})
            print(f"\n== {task.id}  (level {task.level}; prompt {info['tokens_used']} tokens, "
                  f"counted with {info['token_counter']})", file=out)
            agent = ScriptedAgent.from_bundled(task.id, source, steps=steps)
            record = replay(env, agent, observation=observation, on_turn=lambda t: _print_turn(t, args.full, out))
            records.append(record)
            print(f"   reward {record.reward:g}" + ("" if record.evaluated else " (not evaluated)"), file=out)
    finally:
        env.close()
        judge.close()
    _summary(records, out)
    failed = [r.task_id for r in records if _failed(r)]
    if failed:
        print(f"\nFAILED: {len(failed)} of {len(records)} reference solution(s) did not build or scored below 0 "
              f"({', '.join(failed)})", file=out)
        return EXIT_FAILED
    return EXIT_OK


def _failed(record: EpisodeRecord) -> bool:
    """A compile that did not build (whatever the reason: a missing nvcc too), or a judged reward below 0."""
    built = all(t.ok for t in record.turns if t.tool == "compile")
    return not built or (record.evaluated and record.reward < 0)


def _choose(tasks: Sequence[Task], args: argparse.Namespace) -> list[Task]:
    if args.count < 1:
        raise ConfigError(f"expected --count >= 1, got {args.count}")
    if args.all:
        return list(tasks)
    if args.tasks:
        by_id = {t.id: t for t in tasks}
        missing = [i for i in args.tasks if i not in by_id]
        if missing:
            raise UnknownTaskError(
                f"no bundled task {', '.join(missing)}; `cudagym tasks list --suite bundled` lists them"
            )
        return [by_id[i] for i in args.tasks]
    # spread over the levels: the first task of each level, then the second of each, ...
    levels = sorted({t.level for t in tasks})
    rounds = [[t for t in tasks if t.level == lv] for lv in levels]
    picked = [r[i] for i in range(max(map(len, rounds), default=0)) for r in rounds if i < len(r)]
    return picked[: args.count]


def _header(judge: Judge, tasks: Sequence[Task], out: TextIO) -> bool:
    """Print what runs where; returns whether the judge has a GPU."""
    hardware = judge.hardware()
    print(f"cudagym demo: replaying {len(tasks)} bundled reference solution(s) through the env's tool calls",
          file=out)
    if hardware.gpu == "none":
        print("NO GPU FOUND: compile runs for real (the judge's build); verify and profile need a GPU and are "
              "skipped; submit ends each episode with reward 0 (not evaluated).", file=out)
        return False
    print(f"GPU: {hardware.gpu}; protocol {judge.protocol.id}", file=out)
    return True


def _print_turn(turn: Turn, full: bool, out: TextIO) -> None:
    mark = "ok  " if turn.ok else "FAIL"
    if full:
        print(f"-- turn {turn.turn} {turn.tool} [{mark}]\n{turn.observation}", file=out)
        return
    lines = turn.observation.strip().splitlines()
    summary = lines[0] if lines else ""
    last = turn.info.get("last_eval", {})
    if turn.tool in ("profile", "submit") and last.get("speedup_vs_eager"):
        reason = (str(last.get("compile_failure", "")) or str(last.get("message", "")).partition(
            COMPILE_FAILED_PREFIX)[2] or "no time recorded")
        versus = f"{last['speedup_vs_compile']:.2f}x vs compile" if last.get("speedup_vs_compile") \
            else f"torch.compile: not timed ({reason})"
        summary += f" ({last['speedup_vs_eager']:.2f}x vs eager, {versus})"
    summary = _clip(summary, SUMMARY_CHARS)
    print(f"   turn {turn.turn:>2}  {turn.tool:<10} {mark}  {summary}", file=out)
    if turn.tool == "compile" and not turn.ok and len(lines) > 1:  # why, e.g. which build tool is missing
        print(f"{'':<23}{_clip(lines[1], SUMMARY_CHARS * 2)}", file=out)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _summary(records: Sequence[EpisodeRecord], out: TextIO) -> None:
    print("\nSummary", file=out)
    for r in records:
        speed = ""
        if r.last_eval.get("speedup_vs_eager"):
            versus = r.last_eval.get("speedup_vs_compile") or 0.0
            compiled = f"{versus:.2f}x compile" if versus else "compile not timed"
            speed = f"  {r.last_eval['speedup_vs_eager']:.2f}x eager  {compiled}"
        status = r.last_eval.get("status", "-")
        note = "" if r.evaluated else "  (not evaluated)"
        print(f"  {r.task_id:<40} reward {r.reward:>4g}  {status}{speed}{note}", file=out)
