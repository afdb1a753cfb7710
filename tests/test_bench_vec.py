"""benchmarks/bench_vec.py's GPU driver on the CPU: the real vector env and pipeline over a stand-in GPU whose
verdicts carry the harness's cost and load note, so the breakdown printed beside the rate is checked end to end."""

from __future__ import annotations

import dataclasses
import re

from judge_stubs import StubGpus, stub_judge
from script_module import load_script

from cudagym.judge.harness.claims import REQUESTS_NOTE, request_parts_note
from cudagym.judge.harness.runner import LOAD_NOTE
from cudagym.judge.job import JobSpec
from cudagym.judge.records import EvalCost, EvalResult
from cudagym.judge.split.runner import START_STAGE


def load_note(ready: float) -> str:
    """The harness's own load note (its format, not a copy), as a job that waited ``ready`` s for its runner."""
    account = f" (the runner's account: setup 0.03 s, {START_STAGE} 4.20 s)"
    return LOAD_NOTE.format(0.02, ready, 0.07, 0.11, 0.19) + account


class NotedGpus(StubGpus):
    """Verdicts with phase times and the harness's load note; every other one waited 1.4 s for a runner."""

    def _run(self, spec: JobSpec) -> EvalResult:
        result = super()._run(spec)
        if spec.job_id.startswith("baselines:"):
            return result
        self.count = getattr(self, "count", 0) + 1
        ready = 1.4 if self.count % 2 else 0.0
        cost = EvalCost(load_s=0.3 + ready, check_s=0.2, timing_s=0.4, profile_s=0.1)
        requests = (f"{REQUESTS_NOTE} (median): calibrate 15 x 0.48 ms (the runner's own 0.19 ms) [first 2.0 ms, "
                    f"all 9 ms], reference 25 x {1.5 + ready:.2f} ms [first 40.0 ms, all {75 + 10 * ready:.0f} ms], "
                    f"timed 33 x 2.21 ms (the runner's own 1.90 ms) [first 3.1 ms, all 80 ms]")
        anatomy = request_parts_note(["calibrate", "timed"], {"timed": [300.0, 1800.0 + 1000 * ready, 10.0]},
                                     {"calibrate": [50.0, 20.0, 0.0, 100.0], "timed": [80.0, 400.0, 1200.0, 30.0]})
        return dataclasses.replace(result, cost=cost, wall_time_s=1.0 + ready,
                                   notes=(load_note(ready), "timing: 30 rounds", requests, anatomy))


def test_the_gpu_driver_counts_verdicts_and_says_where_their_time_went(tmp_path, monkeypatch, capsys):
    bench = load_script("benchmarks/bench_vec.py", "bench_vec_under_test")
    monkeypatch.setattr(bench, "GPU_SECONDS", 0.5)
    gpus = NotedGpus(job_s=0.002)
    with stub_judge(tmp_path, gpus=gpus) as judge:
        rate, done = bench.evaluations_per_gpu_hour(judge)
    out = capsys.readouterr().out
    assert done >= bench.GPU_ENVS and rate > 0  # at least one vector step of 16 correct verdicts
    assert f"PipelineJudge: {done} verdicts" in out
    assert re.search(r"wall [\d.]+ s \(p90 2\.400\)", out)  # every other verdict waited 1.4 s for its runner
    assert re.search(r"runner ready [\d.]+ s \(p90 1\.400\)", out)
    assert "calibration 0.070 s (p90 0.070), yardstick 0.110 s (p90 0.110), candidate load 0.190 s (p90 0.190)" in out
    assert "check 0.200 s (p90 0.200), timing 0.400 s (p90 0.400), profile 0.100 s (p90 0.100)" in out
    assert "runner start 4.200 s (p90 4.200)" in out  # the runner's own start, read from its account
    assert ("per timed request, the judge's wall time: calibrate 0.48 ms (p90 0.48), reference 2.20 ms (p90 2.90), "
            "timed 2.21 ms (p90 2.21)") in out
    assert ("per verdict, the first request of a kind and all of them: calibrate first 2.0 ms (p90 2.0), calibrate "
            "all 9.0 ms (p90 9.0), reference first 40.0 ms (p90 40.0), reference all 82.0 ms (p90 89.0)") in out
    # a timed request part by part, in the order its parts happen: here, then the runner, then here again
    assert ("a timed request part by part: here queue and send 0.300 ms (p90 0.300), runner prepare 0.080 ms "
            "(p90 0.080), runner queue 0.400 ms (p90 0.400), runner GPU wait 1.200 ms (p90 1.200), runner deliver "
            "0.030 ms (p90 0.030), here reply wait 2.500 ms (p90 3.200), here close 0.010 ms (p90 0.010)") in out


def test_parts_of_a_batch_skip_failed_verdicts_and_notes_without_the_load_line():
    bench = load_script("benchmarks/bench_vec.py", "bench_vec_under_test")
    batch = {"status": ["ok", "incorrect", "ok"], "wall_time_s": [1.0, 9.0, 2.0],
             "cost": {f"{n}_s": [0.1, 9.0, 0.2] for n in ("load", "check", "timing", "profile")},
             "notes": [[load_note(0.5)], [], ["no load line here"]]}
    parts = bench.job_parts(batch)
    assert [p["wall"] for p in parts] == [1.0, 2.0]
    assert parts[0]["runner ready"] == 0.5 and "runner ready" not in parts[1]
    assert bench.describe_parts([], 1.0, 1) == "no correct verdict"
