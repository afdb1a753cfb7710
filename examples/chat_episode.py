"""One ChatAgent episode through the real judge, against a local stand-in endpoint.

The stand-in (:class:`cudagym.baselines.standin.ChatStandIn`, on 127.0.0.1) answers chat-completions
requests as a model that knows the bundled reference solution would: native tool calls writing each file,
then ``compile``, ``verify``, ``profile`` and ``submit``. The agent, the env and the judge are the real
ones, so this exercises the whole HTTP path: tool schemas out, tool calls back, observations as tool
messages, token accounting. Point ``--base-url`` and ``--model`` at a real endpoint (vLLM, SGLang, a
hosted API) to run a real model instead.

    python examples/chat_episode.py --task bundled/L1/01_Swish --out /tmp/out
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from cudagym.baselines.chat import ChatAgent
from cudagym.baselines.standin import ChatStandIn, solution_replies

from cudagym.env import CudaKernelEnv
from cudagym.rollout import EpisodeRecord, Turn, run_episode
from cudagym.sources.bundled import BundledSource


def print_turn(turn: Turn) -> None:
    """One Markdown table row per turn: tool, ok, the observation's first line, model tokens, env seconds."""
    first = turn.observation.strip().splitlines()[0][:90] if turn.observation.strip() else ""
    first = first.replace("|", "\\|")
    print(f"| {turn.turn} | {turn.tool} | {'ok' if turn.ok else 'FAIL'} | {first} | "
          f"{turn.usage.get('completion_tokens', 0)} | {turn.env_time_s:.2f} |")


TABLE_HEAD = "| turn | tool | ok | observation (first line) | completion tokens | env s |\n|---:|---|---|---|---:|---:|"


def main(argv: Sequence[str] | None = None, judge: object = "local") -> EpisodeRecord:
    """Run the episode, print it, and return its record."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="bundled/L1/01_Swish")
    parser.add_argument("--base-url", default=None, help="a real endpoint (default: the local stand-in)")
    parser.add_argument("--model", default="stand-in")
    parser.add_argument("--form", choices=("native", "text"), default="native", help="stand-in reply form")
    parser.add_argument("--out", default=None, help="folder for chat_episode.json (the EpisodeRecord)")
    parser.add_argument("--bundled-root", default=None, help="a folder laid out like envs/bundled/")
    parser.add_argument("--tokenizer", default=None,
                        help="token counter spec (default: the env's shipped BPE, cudagym:code-bpe-16k)")
    args = parser.parse_args(argv)
    env = CudaKernelEnv("bundled", tasks=[args.task], suite_options={"root": args.bundled_root},
                        judge=judge, token_counter=args.tokenizer)  # type: ignore[arg-type]
    server = None
    if args.base_url is None:
        files = dict(BundledSource(root=args.bundled_root).solution(args.task).files)
        server = ChatStandIn(solution_replies(files, form=args.form), lifetime_s=540).start()
    agent = ChatAgent(base_url=args.base_url or server.url, model=args.model)  # type: ignore[union-attr]
    try:
        print(f"ChatAgent on {args.task} via {agent.config.base_url} (model {args.model})\n\n{TABLE_HEAD}")
        record = run_episode(env, agent, options={"task": args.task}, on_turn=print_turn)
        transcript = agent.transcript()
    finally:
        agent.close()
        env.close()
        if server is not None:
            server.stop()
    last = record.last_eval
    print(f"\nreward {record.reward:g} ({record.episode_end}; evaluated {record.evaluated}); status "
          f"{last.get('status', '-')}, {last.get('speedup_vs_eager', 0):.2f}x eager, "
          f"{last.get('speedup_vs_compile', 0):.2f}x torch.compile; model tokens {record.model_tokens}; "
          f"env tokens {record.tokens_used}; {record.wall_time_s:.1f} s")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "chat_episode.json").write_text(json.dumps(record.to_dict(), indent=1))
        (Path(args.out) / "chat_transcript.json").write_text(json.dumps(transcript, indent=1))
    return record


if __name__ == "__main__":
    main()
