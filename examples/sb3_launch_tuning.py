"""Train Stable-Baselines3 PPO to tune a bundled kernel's launch configuration, against random search.

Both searches get the same evaluation budget (profiles of one configuration through the real judge):
PPO learns over ``--budget`` steps of :class:`cudagym.integrations.sb3.LaunchTuningEnv`; the baseline
profiles a fixed random sample of ``--budget`` distinct configurations (seeded). Each reports the fastest
correct configuration it saw; then both winners are profiled again ``--confirm`` times, alternating, so
the comparison does not rest on one noisy sample (when both found the same configuration, it is profiled once
per round and the two tie). Prints both and writes ``--out/sb3_launch_tuning.json``.

    python examples/sb3_launch_tuning.py --task bundled/L1/05_Softmax --budget 24 --seeds 3 --time-budget-s 120

``--seeds`` repeats the comparison with the next seeds and ends with a Markdown table of every run.
``--task`` takes any bundled task (each has a kernel family: ``cudagym.integrations.kernel_families``);
the action space is that family's knobs, e.g. tile M, N, K and outputs per thread for
``bundled/L1/10_TrilMatmul``.

Needs ``pip install 'cudagym[sb3]'`` and, for timings, a GPU (without one every profile says no GPU and
the script says so).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cudagym.integrations.launch_params import ParamSpace
from cudagym.integrations.sb3 import LaunchTuningEnv


@dataclass
class Search:
    """What one search evaluated: (configuration, candidate median in us, status) per evaluation."""

    name: str
    space: ParamSpace[Any]
    seen: list[tuple[Any, float, str]] = field(default_factory=list)

    def record(self, info: dict[str, Any]) -> None:
        """Add one step's info (from LaunchTuningEnv)."""
        self.seen.append((self.space.make(**info["params"]), float(info["candidate_us"]), str(info["status"])))

    def best(self) -> tuple[Any, float] | None:
        """The fastest correct configuration seen (None when none was correct and timed)."""
        timed = [(us, p) for p, us, status in self.seen if status == "ok" and us > 0]
        if not timed:
            return None
        us, params = min(timed, key=lambda t: t[0])
        return params, us


def random_search(env: LaunchTuningEnv, budget: int, seed: int) -> Search:
    """Profile a fixed random sample of ``budget`` distinct configurations."""
    order = np.random.default_rng(seed).permutation(env.space.size)[:budget]
    search = Search("random", env.space)
    env.reset(seed=seed)
    for index in order:
        _, _, _, truncated, info = env.step(int(index))
        search.record(info)
        if truncated:
            env.reset()
    return search


def ppo_search(env: LaunchTuningEnv, budget: int, seed: int) -> Search:
    """Train PPO for ``budget`` environment steps, recording every configuration it profiles."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback

    search = Search("ppo", env.space)

    class Record(BaseCallback):
        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "params" in info:
                    search.record(info)
            return True

    steps = max(min(8, budget), 2)
    # gamma 0: each configuration's reward is its own (a contextual bandit); small batches learn within the budget
    model = PPO("MlpPolicy", env, n_steps=steps, batch_size=steps, n_epochs=10, learning_rate=3e-3, gamma=0.0,
                gae_lambda=1.0, seed=seed, device="cpu", verbose=0)
    model.learn(total_timesteps=budget, callback=Record())
    search.seen = search.seen[:budget]  # PPO's last rollout may not be cut exactly at the budget
    return search


def confirm(env: LaunchTuningEnv, configs: Sequence[Any], rounds: int) -> list[list[float]]:
    """Profile each configuration ``rounds`` times, alternating; candidate medians in us."""
    times: list[list[float]] = [[] for _ in configs]
    env.reset()
    for _ in range(rounds):
        for k, params in enumerate(configs):
            _, _, _, truncated, info = env.step(env.space.flat(params))
            times[k].append(float(info["candidate_us"]))
            if truncated:
                env.reset()
    return times


def compare(env: LaunchTuningEnv, ppo_env: LaunchTuningEnv, budget: int, seed: int, rounds: int) -> dict[str, Any]:
    """One seed: both searches, then their winners re-profiled ``rounds`` times; prints and returns the run."""
    rand = random_search(env, budget, seed)
    ppo = ppo_search(ppo_env, budget, seed)
    run: dict[str, Any] = {"seed": seed}
    for search in (rand, ppo):
        best = search.best()
        run[search.name] = {"evaluations": len(search.seen), "distinct": len({p for p, _, _ in search.seen}),
                            "best": asdict(best[0]) if best else None, "best_us": best[1] if best else None}
        print(f"{search.name:>6}: {len(search.seen)} evaluations, best "
              + (f"{best[0]} at {best[1]:.2f} us" if best else "none correct and timed"))
    rand_best, ppo_best = rand.best(), ppo.best()
    if rand_best and ppo_best and rounds > 0:
        same = rand_best[0] == ppo_best[0]  # one configuration: a tie, whatever its re-profiles say
        times = confirm(env, [rand_best[0]] if same else [rand_best[0], ppo_best[0]], rounds)
        times = times * 2 if same else times
        medians = [statistics.median(t) for t in times]
        run["confirm"] = {"random_us": times[0], "ppo_us": times[1], "random_median_us": medians[0],
                          "ppo_median_us": medians[1], "same_configuration": same,
                          "ppo_at_least_as_fast": same or medians[1] <= medians[0]}
        verdict = "the same configuration" if same else \
            "at least as fast" if medians[1] <= medians[0] else "slower"
        print(f"confirm ({rounds} rounds): random best {medians[0]:.2f} us, PPO best {medians[1]:.2f} us "
              f"-> PPO {verdict}")
    elif not (rand_best or ppo_best):
        print("no configuration was timed (no GPU on the judge?): nothing to compare")
    return run


def _config(run: dict[str, Any], name: str) -> str:
    best = run[name]["best"]
    return "-" if best is None else "x".join(str(v) for v in best.values())


def print_table(task: str, budget: int, runs: Sequence[dict[str, Any]], knobs: Sequence[str]) -> None:
    """A Markdown table of the runs: each search's winner and the confirmed medians."""
    print(f"\n{task}, {budget} evaluations per search; config = {' x '.join(knobs)}")
    print("| seed | random best | us | PPO best | us | confirmed random p50 us | confirmed PPO p50 us | PPO/random |")
    print("|---:|---|---:|---|---:|---:|---:|---:|")
    for run in runs:
        c = run.get("confirm")
        tail = (f"{c['random_median_us']:.2f} | {c['ppo_median_us']:.2f} | "
                f"{c['ppo_median_us'] / c['random_median_us']:.3f}") if c else "- | - | -"
        us = [run[n]["best_us"] for n in ("random", "ppo")]
        print(f"| {run['seed']} | {_config(run, 'random')} | {us[0] or 0:.2f} | {_config(run, 'ppo')} | "
              f"{us[1] or 0:.2f} | {tail} |")
    confirmed = [r["confirm"]["ppo_at_least_as_fast"] for r in runs if "confirm" in r]
    print(f"PPO at least as fast as random search in {sum(confirmed)} of {len(confirmed)} confirmed seed(s)")


def main(argv: Sequence[str] | None = None, judge: Any = "local") -> dict[str, Any]:
    """Run both searches for each seed, confirm the winners, print and return the summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="bundled/L1/01_Swish")
    parser.add_argument("--budget", type=int, default=24, help="evaluations per search")
    parser.add_argument("--seed", type=int, default=0, help="the first seed")
    parser.add_argument("--seeds", type=int, default=1, help="seeds to run (seed, seed + 1, ...)")
    parser.add_argument("--time-budget-s", type=float, default=math.inf,
                        help="start no new seed after this many seconds")
    parser.add_argument("--confirm", type=int, default=3, help="re-profiles of each winner")
    parser.add_argument("--out", default=None, help="folder for sb3_launch_tuning.json")
    args = parser.parse_args(argv)
    start = time.monotonic()
    env = LaunchTuningEnv(args.task, budget=args.budget, action_space="discrete", judge=judge)
    ppo_env = LaunchTuningEnv(args.task, budget=max(min(8, args.budget), 2), judge=judge)
    runs: list[dict[str, Any]] = []
    try:
        for seed in range(args.seed, args.seed + args.seeds):
            if runs and time.monotonic() - start > args.time_budget_s:
                print(f"time budget of {args.time_budget_s:g} s spent: {len(runs)} of {args.seeds} seeds run")
                break
            runs.append(compare(env, ppo_env, args.budget, seed, args.confirm))
    finally:
        env.close()
        ppo_env.close()
    print_table(args.task, args.budget, runs, [k.name for k in env.space.knobs])
    summary = {"task": args.task, "budget": args.budget, "runs": runs, "wall_s": time.monotonic() - start}
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "sb3_launch_tuning.json").write_text(json.dumps(summary, indent=2))
    return summary


if __name__ == "__main__":
    main()
