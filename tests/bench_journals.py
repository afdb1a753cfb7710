"""Hand-built episodes and run folders for the tests of ``cudagym.bench`` (verdicts from ``fakes``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fakes import incorrect_result, ok_build, timed_result

from cudagym.bench.journal import Entry, RunJournal, episode_key, write_manifest
from cudagym.bench.metrics import outcome_of, summarize
from cudagym.judge.records import EvalResult, EvalStatus, to_dict
from cudagym.rollout import EpisodeRecord, Turn

EAGER_US = 100.0
COMPILE_US = 90.0


def verdict(candidate_us: float) -> dict[str, Any]:
    """A correct verdict timed at ``candidate_us`` against eager 100 us and torch.compile 90 us."""
    return to_dict(timed_result(candidate_us, EAGER_US, COMPILE_US))


def wrong() -> dict[str, Any]:
    """An incorrect verdict (tier -1)."""
    return to_dict(incorrect_result())


def no_gpu() -> dict[str, Any]:
    """A build-only verdict of a judge without a GPU (not evaluated)."""
    return to_dict(EvalResult(status=EvalStatus.NO_GPU, build=ok_build(), message="no GPU"))


def call(name: str, **arguments: Any) -> str:
    """A tool call action."""
    return json.dumps({"name": name, "arguments": arguments})


WRITE = call("write_file", path="model_new.py", content="class ModelNew: pass\n")


def record(task_id: str, final: Mapping[str, Any], *, before: Sequence[tuple[str, Mapping[str, Any]]] = (),
           reward: float | None = None, usage: Mapping[str, int] | None = None,
           actions: Sequence[str] | None = None) -> EpisodeRecord:
    """An episode: ``actions`` (default one write), then ``before`` (action, verdict) turns, then a submit.

    Each turn adds 100 env tokens to a 50-token prompt; ``usage`` is the model tokens of the first turn.
    """
    steps: list[tuple[str, str, Mapping[str, Any]]] = [("write_file", a, {}) for a in (actions or [WRITE])]
    steps += [("profile", a, v) for a, v in before]
    steps.append(("submit", call("submit"), final))
    turns = tuple(
        Turn(turn=i + 1, tool=tool, ok=True, observation=f"observation {i + 1}", reward=0.0,
             info={"protocol_id": "hand-built-v1"},
             action=action, tokens=100, tokens_used=50 + 100 * (i + 1), verdict=dict(v),
             usage=dict(usage or {}) if i == 0 else {})
        for i, (tool, action, v) in enumerate(steps)
    )
    tier = outcome_of(final).tier
    return EpisodeRecord(task_id=task_id, turns=turns, reward=float(tier if reward is None else reward),
                         evaluated=tier != 0, terminated=True, last_eval=dict(final), prompt=f"prompt of {task_id}",
                         prompt_tokens=50, episode_end="submit", agent="hand-built")


def entry(task_id: str, level: int, sample: int, final: Mapping[str, Any], **kwargs: Any) -> Entry:
    """A journal entry of a hand-built episode (summary computed as the runner does)."""
    rec = record(task_id, final, **kwargs)
    return Entry(episode_key(task_id, sample), summarize(rec, level=level, sample=sample), rec, seed=sample)


def write_run(run_dir: Path, entries: Sequence[Entry], plan: Mapping[str, Any] | None = None) -> Path:
    """A run folder holding ``entries`` (as ``cudagym bench`` would have journaled them)."""
    write_manifest(run_dir, plan or {"agent": "hand-built", "env": None, "tasks": ["t"], "k": 2,
                                     "format": "extension"},
                   {"hardware": {"gpu": "NVIDIA H200"}, "episodes_planned": len(entries)})
    journal = RunJournal(run_dir)
    for e in entries:
        journal.append(e)
    return run_dir


def oracle_entries() -> list[Entry]:
    """The run of the report's oracle tests (expected numbers worked out in test_bench_report.py).

    Level 1: task A (samples 0, 1), task B (0, 1); level 2: task C (0, 1). Candidate times in us against
    eager 100 and torch.compile 90:

    - A#0: 50 (2.0x eager, 1.8x compile: tier 3); 15 model tokens on its first turn
    - A#1: 98 (1.0204x, 0.918x: tier 1), after a profile at 60 (1.667x, 1.5x: tier 3, its best state)
    - B#0: wrong (tier -1)
    - B#1: 88 (1.136x, 1.0227x: tier 2)
    - C#0: 25 (4.0x, 3.6x: tier 3)
    - C#1: no GPU (not evaluated)
    """
    a, b, c = "bundled/L1/01_A", "bundled/L1/02_B", "bundled/L2/01_C"
    return [
        entry(a, 1, 0, verdict(50.0), usage={"prompt_tokens": 10, "completion_tokens": 5}),
        entry(a, 1, 1, verdict(98.0), before=[(call("profile"), verdict(60.0))]),
        entry(b, 1, 0, wrong()),
        entry(b, 1, 1, verdict(88.0)),
        entry(c, 2, 0, verdict(25.0)),
        entry(c, 2, 1, no_gpu()),
    ]


# ---------------------------------------------------------------- stand-ins for `cudagym bench --judge/--agent`

def fake_judge(protocol: Any) -> Any:
    """``--judge bench_journals:fake_judge``: FakeJudge (builds need model_new.py; evaluations are tier 2)."""
    from fakes import FakeJudge

    return FakeJudge(protocol=protocol)


def slow_judge(protocol: Any) -> Any:
    """``--judge bench_journals:slow_judge``: FakeJudge whose evaluations take 0.15 s (so a run can be killed)."""
    import time

    from fakes import FakeJudge

    class SlowJudge(FakeJudge):
        def evaluate(self, task: Any, solution: Any, mode: Any = None) -> Any:
            time.sleep(0.15)
            return super().evaluate(task, solution, mode) if mode is not None else super().evaluate(task, solution)

    return SlowJudge(protocol=protocol)


class SubmitAgent:
    """Submits at once (``--agent bench_journals:SubmitAgent``); remembers its task and seed."""

    def __init__(self, task_id: str, seed: int) -> None:
        """Keep the task and seed the runner passes."""
        self.task_id, self.seed = task_id, seed

    def reset(self) -> None:
        """Nothing to forget."""

    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        """Always submit."""
        return call("submit")


def wrong_judge(protocol: Any) -> Any:
    """``--judge bench_journals:wrong_judge``: every evaluation is incorrect."""
    from fakes import FakeJudge

    return FakeJudge(protocol=protocol, eval_fn=lambda *a: incorrect_result())


def cpu_judge(protocol: Any) -> Any:
    """``--judge bench_journals:cpu_judge``: a judge without a GPU (builds need model_new.py)."""
    from fakes import FakeJudge

    class CpuJudge(FakeJudge):
        def evaluate(self, task: Any, solution: Any, mode: Any = None) -> Any:
            build = self.build(task, solution)
            status = EvalStatus.NO_GPU if build.ok else EvalStatus.BUILD_FAILED
            return EvalResult(status=status, build=build, message="this judge has no GPU", protocol_id=protocol.id)

    return CpuJudge(gpu="none", protocol=protocol)


def failing_build_judge(protocol: Any) -> Any:
    """``--judge bench_journals:failing_build_judge``: every build fails with a located error, no GPU."""
    from fakes import failed_build

    judge = cpu_judge(protocol)
    judge.build_fn = lambda task, solution: failed_build(solution.format)
    return judge


TESTS = Path(__file__).resolve().parent


def child_env() -> dict[str, str]:
    """The environment of a ``python -m cudagym.cli`` child that imports the tests' stand-ins."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}


def default_sigint() -> None:
    """A child's ``preexec_fn``: Ctrl-C's default disposition, whatever the test run inherited.

    A test run started in the background by a non-interactive shell (``bash -c '... &'``) ignores SIGINT, and an
    ignored signal stays ignored across exec: Python then installs no KeyboardInterrupt handler, and a child sent
    Ctrl-C by a test would run on to its end (exit 0).
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def judge_serve_interrupted(cache: Path, wait_for: Callable[[subprocess.Popen[str]], str]) -> tuple[int, str, str]:
    """``cudagym judge serve`` (no GPU) sent Ctrl-C once ``wait_for`` has read its line; its code, that line, stderr.

    ``wait_for`` reads from the child (its first ``export`` line on stdout, or its "starting" line on stderr).
    """
    proc = subprocess.Popen([sys.executable, "-m", "cudagym.cli", "judge", "serve", "--devices", "none",
                             "--cache-dir", str(cache)], cwd=TESTS.parent, env=child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    try:
        first = wait_for(proc)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, first, err


def slow_bench_command(out: Path, limit: int) -> list[str]:
    """``cudagym bench`` on :func:`slow_judge`: ``limit`` bundled tasks, 2 samples each, 2 at once."""
    return [sys.executable, "-m", "cudagym.cli", "bench", "--judge", "bench_journals:slow_judge", "--agent", "scripted",
            "--env", "CudaKernel-Bundled-v0", "--limit", str(limit), "-k", "2", "--parallel", "2", "--no-progress",
            "--out", str(out)]


def started_slow_bench(out: Path, limit: int, **popen: Any) -> subprocess.Popen[Any]:
    """A :func:`slow_bench_command` child, returned once two episodes are journaled (still running: asserted)."""
    proc = subprocess.Popen(slow_bench_command(out, limit), cwd=TESTS.parent, env=child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=default_sigint, **popen)
    journal = out / "episodes.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if journal.exists() and journal.read_bytes().count(b"\n") >= 2:
            break
        time.sleep(0.02)
    assert proc.poll() is None, f"the run ended before two episodes were in: {proc.communicate()}"
    return proc

