"""``cudagym bench``: an agent over a suite, K episodes per task, in parallel through one shared judge.

Episodes are played by :func:`cudagym.rollout.run_episode` on a thread pool (one env per thread, every env
on the same judge, so they share its build threads and GPU workers); each is journaled the moment it ends
(:mod:`cudagym.bench.journal`). A live progress bar (tqdm, on stderr) shows episodes done, the tiers so far
and the ETA. ``--resume`` continues a killed run: the journal's finished episodes are skipped, a line cut
short by the kill is dropped, and the rest is played, so no result is lost or duplicated. A resume keeps the
protocol the run started with (the manifest's ``protocol_id``) and is refused on another GPU; one process at a
time plays a run folder (:func:`cudagym.bench.journal.lock_run`).

Examples::

    cudagym bench --agent scripted --env CudaKernel-Bundled-v0 --out runs/scripted
    cudagym bench --agent random --tasks bundled/L1/01_Swish -k 4 --parallel 8 --out runs/random
    cudagym bench --resume --out runs/random          # after a kill: the plan comes from the manifest
    cudagym bench --agent chat --base-url http://127.0.0.1:8000/v1 --model qwen --env CudaKernel-L1-v0
        --env-kwargs '{"suite_options": {"root": "KernelBench"}}' --out runs/qwen-l1   (one line)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from cudagym.bench.agents import AGENTS, AgentMaker, ChatOptions, agent_maker, load_callable
from cudagym.bench.journal import (
    EPISODES,
    MANIFEST,
    Entry,
    RunJournal,
    episode_key,
    lock_run,
    read_entries,
    read_manifest,
    write_manifest,
)
from cudagym.bench.metrics import summarize
from cudagym.errors import ConfigError, CudaGymError
from cudagym.judge.interface import Judge
from cudagym.judge.protocol import DEFAULT_PROTOCOL, Protocol, get_protocol
from cudagym.judge.records import to_dict
from cudagym.paths import writable_dir
from cudagym.rollout import run_episode

EXIT_OK = 0
# The plan: what must be the same when a run is resumed (defaults below; None means "not given").
PLAN_DEFAULTS: dict[str, Any] = {
    "agent": None, "env": None, "tasks": None, "limit": None, "k": 1, "seed": 0, "judge": "local",
    "protocol": None, "format": "extension", "max_turns": 200, "token_budget": 131072, "tokenizer": None,
    "env_kwargs": {}, "base_url": None, "model": None, "temperature": None, "max_tokens": None,
    "tool_mode": "auto",
}


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the runner's arguments (plan arguments default to None so ``--resume`` can tell what was given)."""
    parser.add_argument("--agent", help=f"{', '.join(AGENTS)} or module:callable (called with task_id, seed)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--env", help="a registered env id, e.g. CudaKernel-Bundled-v0 (all its tasks)")
    which.add_argument("--tasks", nargs="+", metavar="ID", help="task ids, e.g. bundled/L1/01_Swish L1/19_ReLU")
    parser.add_argument("--limit", type=int, help="only the first N tasks")
    parser.add_argument("-k", dest="k", type=int, help="episodes per task (default 1)")
    parser.add_argument("--seed", type=int, help="reset seed of sample 0; sample i uses seed + i (default 0)")
    parser.add_argument("--parallel", type=int, default=4, help="episodes at once (default 4)")
    parser.add_argument("--out", required=True, metavar="RUN_DIR", help="run folder (manifest.json, episodes.jsonl)")
    parser.add_argument("--resume", action="store_true", help="continue the run in RUN_DIR")
    parser.add_argument("--judge", help="local (default) or module:callable (protocol -> Judge)")
    parser.add_argument("--protocol", help=f"evaluation protocol (default: {DEFAULT_PROTOCOL.id})")
    parser.add_argument("--format", help="solution format: extension (default), inline or raw")
    parser.add_argument("--max-turns", type=int, help="turns per episode (default 200)")
    parser.add_argument("--token-budget", type=int, help="env tokens per episode (default 131072)")
    parser.add_argument("--tokenizer", help="env token counter (default: the shipped cudagym:code-bpe-16k)")
    parser.add_argument("--env-kwargs", type=_json_object, help="JSON object of further env arguments")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    chat = parser.add_argument_group("chat agent", "defaults: CUDAGYM_CHAT_* / OPENAI_* environment variables")
    chat.add_argument("--base-url", help="OpenAI-compatible API root, e.g. http://127.0.0.1:8000/v1")
    chat.add_argument("--model", help="model name")
    chat.add_argument("--temperature", type=float, help="sampling temperature")
    chat.add_argument("--max-tokens", type=int, help="most completion tokens per reply")
    chat.add_argument("--tool-mode", choices=("native", "text", "auto"), help="native tool calls or text")


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Play the run's remaining episodes; returns 0 when every planned episode is journaled."""
    out = out or sys.stdout
    given = {k: getattr(args, k) for k in PLAN_DEFAULTS}
    resolve_plan(args.out, given, resume=args.resume)  # usage errors at once, before the folder is made
    if args.parallel < 1:
        raise ConfigError(f"expected --parallel >= 1, got {args.parallel}")
    created = _missing_folders(Path(args.out))
    try:
        writable_dir(args.out, "--out")
    except BaseException:
        _remove_empty(created)
        raise
    with lock_run(args.out):  # one run at a time in a folder; its plan read again under the lock
        try:
            plan = resolve_plan(args.out, given, resume=args.resume)
            bench = Bench(plan, Path(args.out), parallel=args.parallel, progress=not args.no_progress,
                          first_gpu=_first_gpu(args.out) if args.resume else None)
            done = bench.run(fresh=not args.resume)
        except BaseException as exc:
            _remove_empty(created)  # still under the lock: no other bench is starting in these folders
            if isinstance(exc, KeyboardInterrupt | OSError):  # Ctrl-C, or a journal that cannot be written
                _say_how_to_resume(Path(args.out), "interrupted" if isinstance(exc, KeyboardInterrupt) else "stopped")
            raise
    counts = Counter(e.summary.final.tier for e in done)
    print(f"{len(done)} episode(s) in {args.out}/episodes.jsonl; final tiers: "
          + ", ".join(f"{t}: {counts.get(t, 0)}" for t in (3, 2, 1, 0, -1))
          + f"\nnext: cudagym report {args.out}", file=out)
    if bench.gpu == "none":
        print("no GPU: the judge built each solution but checked and timed none (tier 0, not evaluated); "
              "run on a GPU host for verdicts", file=out)
    return EXIT_OK


def _missing_folders(path: Path) -> list[Path]:
    """``path`` and those of its parents that do not exist yet, deepest first (what making ``path`` creates)."""
    missing: list[Path] = []
    for folder in (path, *path.parents):
        if folder.exists() or folder.is_symlink():
            break
        missing.append(folder)
    return missing


def _remove_empty(folders: list[Path]) -> None:
    """Remove each of ``folders`` (deepest first) while it holds nothing; stop at the first that holds something.

    A run that failed before starting so leaves no empty ``--out`` behind; only folders the run made are passed.
    """
    for folder in folders:
        try:
            folder.rmdir()  # refuses a folder that is not empty
        except OSError:
            return


def _say_how_to_resume(run_dir: Path, what: str) -> None:
    """After Ctrl-C or a failed write: how many episodes are safe in the journal, and how to go on."""
    if not (run_dir / MANIFEST).is_file():
        print(f"bench: {what} before any episode was journaled; {run_dir} holds no run, start it again",
              file=sys.stderr)
        return
    try:
        kept = f"{len(read_entries(run_dir))} finished episode(s) are"
    except (CudaGymError, OSError):
        kept = "the finished episodes are"
    print(f"bench: {what}; {kept} kept in {run_dir / EPISODES}; continue with "
          f"`cudagym bench --resume --out {run_dir}`", file=sys.stderr)


def _first_gpu(run_dir: str) -> str | None:
    """The GPU the run's manifest says its first part was judged on (None when it does not say)."""
    hardware = read_manifest(run_dir).get("hardware")
    gpu = hardware.get("gpu") if isinstance(hardware, dict) else None
    return gpu if isinstance(gpu, str) and gpu else None


def resolve_plan(run_dir: str, given: Mapping[str, Any], *, resume: bool) -> dict[str, Any]:
    """The run's plan: the given arguments over the defaults, or, with ``resume``, over the manifest's plan.

    Raises:
        ConfigError: A new run over an existing one, a resumed run without a manifest, a given argument
            that differs from the resumed plan, or no agent or tasks.
    """
    folder = Path(run_dir)
    if resume:
        manifest = read_manifest(folder)
        saved = manifest["plan"]
        clash = {k: (saved.get(k), v) for k, v in given.items() if v is not None and v != saved.get(k)}
        if clash:
            what = "; ".join(f"{k}: run has {a!r}, given {b!r}" for k, (a, b) in clash.items())
            raise ConfigError(f"--resume continues the plan in {folder}/manifest.json; it differs in {what}")
        plan = {**PLAN_DEFAULTS, **saved, "protocol": _protocol_ran(manifest, folder)}
    else:
        if (folder / MANIFEST).exists():
            raise ConfigError(f"{folder} already holds a run; pass --resume to continue it, or a new --out")
        if (folder / EPISODES).is_file() and (folder / EPISODES).stat().st_size:
            raise ConfigError(f"{folder} holds an {EPISODES} but no {MANIFEST} (not a run this command can continue); "
                              "a new run there would mix its episodes with those: give a new --out")
        plan = {**PLAN_DEFAULTS, **{k: v for k, v in given.items() if v is not None}}
    if not plan["agent"]:
        raise ConfigError(f"expected --agent ({', '.join(AGENTS)} or module:callable)")
    if not plan["env"] and not plan["tasks"]:
        raise ConfigError("expected --env ID (e.g. CudaKernel-Bundled-v0) or --tasks ID ...")
    for name in ("k", "max_turns", "token_budget"):
        if not isinstance(plan[name], int) or plan[name] < 1:
            raise ConfigError(f"expected --{name.replace('_', '-')} >= 1, got {plan[name]!r}")
    if not isinstance(plan["seed"], int) or plan["seed"] < 0:
        raise ConfigError(f"expected --seed >= 0 (reset seeds are non-negative), got {plan['seed']!r}")
    repeated = sorted(t for t, n in Counter(plan["tasks"] or ()).items() if n > 1)
    if repeated:
        raise ConfigError(f"--tasks names {', '.join(repeated)} more than once; each task is played once per "
                          "sample (use -k for more samples)")
    return plan


def _protocol_ran(manifest: Mapping[str, Any], folder: Path) -> Any:
    """The protocol a resumed run goes on under: the one its first part ran (the manifest's ``protocol_id``).

    The plan may name none (the default) or an alias such as ``cudagym``; either can mean a newer protocol after an
    upgrade, and a run judged half under each would compare unlike verdicts.

    Raises:
        ConfigError: This install does not know that protocol.
    """
    ran = manifest.get("protocol_id")
    if not isinstance(ran, str) or not ran:
        return manifest["plan"].get("protocol")  # a manifest older than protocol_id: the plan as it is
    try:
        get_protocol(ran)
    except ConfigError as exc:
        raise ConfigError(f"{folder} was judged under protocol {ran!r}, which this install of cudagym does not know; "
                          f"resume it with the cudagym it started with ({manifest.get('cudagym')})") from exc
    return ran


@dataclass(frozen=True)
class EpisodeJob:
    """One planned episode: sample ``sample`` of ``task_id``, reset with ``seed``."""

    task_id: str
    level: int
    sample: int
    seed: int

    @property
    def key(self) -> str:
        """The journal key."""
        return episode_key(self.task_id, self.sample)


@dataclass
class Bench:
    """A run in progress: the plan, its judge and envs, the journal and the progress bar."""

    plan: Mapping[str, Any]
    run_dir: Path
    parallel: int = 4
    progress: bool = True
    first_gpu: str | None = None  # a resumed run: the GPU its first part was judged on
    gpu: str = ""  # the judge's GPU once run() started ("none" without one)
    _envs: list[Any] = field(default_factory=list)
    _free: list[Any] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, *, fresh: bool) -> list[Entry]:
        """Play every planned episode not yet journaled; returns all journaled entries of the plan."""
        previous = {} if fresh else {e.key: e for e in read_entries(self.run_dir, repair=True)}
        protocol = get_protocol(self.plan["protocol"])
        judge = make_judge(self.plan["judge"], protocol)
        wrote_manifest = False
        try:
            self.gpu = judge.hardware().gpu
            if self.first_gpu is not None and self.gpu != self.first_gpu:
                raise ConfigError(f"{self.run_dir} was judged on GPU {self.first_gpu!r}, this judge has {self.gpu!r}; "
                                  "its verdicts would not compare: resume it on the same GPU, or start a new --out")
            maker = agent_maker(self.plan["agent"], _chat_options(self.plan))
            jobs = self._jobs(judge)
            if fresh:
                write_manifest(self.run_dir, self.plan, {"hardware": to_dict(judge.hardware()),
                                                         "protocol_id": protocol.id, "episodes_planned": len(jobs)})
                wrote_manifest = True
            todo = [j for j in jobs if j.key not in previous]
            journal = RunJournal(self.run_dir)
            finished = [previous[j.key] for j in jobs if j.key in previous]
            with _Progress(len(jobs), finished, enabled=self.progress) as bar:
                self._play(todo, maker, judge, journal, bar, finished)
            return finished
        except BaseException:
            if wrote_manifest:
                self._forget_if_empty()
            raise
        finally:
            for env in self._envs:
                env.close()
            judge.close()

    def _forget_if_empty(self) -> None:
        """Remove the manifest of a new run that failed before journaling any episode.

        Its plan can then be corrected and run again with the same ``--out``; a run with journaled episodes
        is kept, to be resumed.
        """
        journal = self.run_dir / EPISODES
        if journal.is_file() and journal.stat().st_size > 0:
            return
        journal.unlink(missing_ok=True)
        (self.run_dir / MANIFEST).unlink(missing_ok=True)

    def _play(self, todo: Sequence[EpisodeJob], maker: AgentMaker, judge: Judge, journal: RunJournal,
              bar: _Progress, finished: list[Entry]) -> None:
        def one(job: EpisodeJob) -> None:
            env = self._env(judge)
            try:
                agent = maker(job.task_id, job.seed)
                record = run_episode(env, agent, seed=job.seed, options={"task": job.task_id},
                                     max_steps=self.plan["max_turns"] + 1, name=self.plan["agent"])
            finally:
                with self._lock:
                    self._free.append(env)
            entry = Entry(job.key, summarize(record, level=job.level, sample=job.sample), record, seed=job.seed)
            journal.append(entry)  # on disk before it counts as done
            with self._lock:
                finished.append(entry)
            bar.update(entry)

        pool = ThreadPoolExecutor(max(1, min(self.parallel, len(todo))), thread_name_prefix="cudagym-bench")
        try:
            for future in [pool.submit(one, job) for job in todo]:
                future.result()  # the first failure (a bad agent, a judge bug) stops the run; it can be resumed
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _jobs(self, judge: Judge) -> list[EpisodeJob]:
        probe = self._env(judge)
        tasks = list(probe.unwrapped.tasks)
        with self._lock:
            self._free.append(probe)  # the first episode's env
        if self.plan["limit"] is not None:
            tasks = tasks[: max(self.plan["limit"], 0)]
        if not tasks:
            raise ConfigError("the plan has no tasks (check --env, --tasks and --limit)")
        seed = int(self.plan["seed"])
        return [EpisodeJob(t.id, t.level, sample, seed + sample) for sample in range(self.plan["k"]) for t in tasks]

    def _env(self, judge: Judge) -> Any:
        with self._lock:
            if self._free:
                return self._free.pop()
        env = make_env(self.plan, judge)
        with self._lock:
            self._envs.append(env)
        return env


def make_env(plan: Mapping[str, Any], judge: Judge) -> Any:
    """An env for the plan, on ``judge`` (``gym.make`` of ``--env``, or a CudaKernelEnv over ``--tasks``)."""
    kwargs: dict[str, Any] = {
        "judge": judge, "protocol": judge.protocol, "solution_format": plan["format"],
        "max_turns": plan["max_turns"], "token_budget": plan["token_budget"], "token_counter": plan["tokenizer"],
        **(plan["env_kwargs"] or {}),
    }
    if plan["env"]:
        import gymnasium as gym

        import cudagym  # noqa: F401 - registers the ids

        if plan["env"] not in gym.registry:
            raise ConfigError(f"unknown env id {plan['env']!r}; expected a registered id such as CudaKernel-Bundled-v0")
        with _env_kwargs_named(plan):
            return gym.make(plan["env"], max_episode_steps=plan["max_turns"], disable_env_checker=True, **kwargs)
    from cudagym.env import CudaKernelEnv
    from cudagym.suites import suite_of

    ids = list(plan["tasks"])
    suites = {suite_of(i).name for i in ids}
    if len(suites) != 1:
        raise ConfigError(f"expected --tasks of one suite, got ids of {sorted(suites)}")
    with _env_kwargs_named(plan):
        return CudaKernelEnv(suites.pop(), tasks=ids, **kwargs)


@contextlib.contextmanager
def _env_kwargs_named(plan: Mapping[str, Any]) -> Iterator[None]:
    """Turn the TypeError of an env argument the env does not take (from ``--env-kwargs``) into a ConfigError."""
    try:
        yield
    except TypeError as exc:
        if "argument" not in str(exc):
            raise
        given = ", ".join(plan["env_kwargs"] or {}) or "none"
        why = str(exc).split(" was raised from the environment creator")[0]  # gym.make adds every argument's repr
        raise ConfigError(f"the env does not take an argument given: {why} (--env-kwargs keys: {given})") from exc


def make_judge(spec: str, protocol: Protocol) -> Judge:
    """``local`` (the process-wide local judge) or ``module:callable`` called with the protocol.

    Raises:
        ConfigError: ``spec`` names nothing that returns a Judge, or calling it failed.
    """
    if spec == "local":
        from cudagym.env import JUDGES

        return JUDGES["local"](protocol)
    factory = load_callable(spec, what="judge")
    try:
        judge = factory(protocol)
    except CudaGymError:
        raise
    except Exception as exc:  # noqa: BLE001 - user code: its failure is a message naming it, not a traceback
        raise ConfigError(f"--judge {spec}: calling it with the protocol failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(judge, Judge):
        raise ConfigError(f"expected {spec} to return a cudagym.judge.Judge, got {type(judge).__name__}")
    return judge


class _Progress:
    """A tqdm bar of episodes with the final tiers so far; tqdm's own rate gives the ETA."""

    def __init__(self, total: int, done: Sequence[Entry], *, enabled: bool) -> None:
        from tqdm import tqdm

        self._tiers: Counter[int] = Counter(e.summary.final.tier for e in done)
        self._lock = threading.Lock()
        self._bar = tqdm(total=total, initial=len(done), unit="ep", desc="episodes", file=sys.stderr,
                         disable=not enabled, dynamic_ncols=True)
        self._bar.set_postfix_str(self._tier_text(), refresh=False)

    def update(self, entry: Entry) -> None:
        with self._lock:
            self._tiers[entry.summary.final.tier] += 1
            self._bar.set_postfix_str(self._tier_text(), refresh=False)
            self._bar.update(1)

    def _tier_text(self) -> str:
        names = {3: "t3", 2: "t2", 1: "t1", -1: "fail", 0: "n/e"}
        return " ".join(f"{names[t]}={self._tiers.get(t, 0)}" for t in (3, 2, 1, -1, 0))

    def __enter__(self) -> _Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.close()


def _chat_options(plan: Mapping[str, Any]) -> ChatOptions:
    return ChatOptions(base_url=plan["base_url"], model=plan["model"], temperature=plan["temperature"],
                       max_tokens=plan["max_tokens"], tool_mode=plan["tool_mode"])


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r} ({exc})") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {type(value).__name__}")
    return value

