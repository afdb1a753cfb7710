"""The speedups' yardstick taken in the candidate's own process (``Protocol.runner_reference_runs``), on the CPU
path through the real worker pool: a trusted worker and a fresh sandboxed runner per job.

On the H200 the same code ran at other speeds in the judge's process and in the runner (where its tensors lay in
device memory; a call that waits for the GPU inside), so the reference judged as its own candidate earned tiers
it did not. Here a task whose forward is slower in the judge's process than in the runner stands in for that:
without the runner's own time of the reference the same code is judged several times faster than eager; with it,
as fast as eager.
"""

from __future__ import annotations

import math
import re
import textwrap

import pytest
from script_module import load_script
from split_pools import cpu_split_pool

from cudagym.judge.interface import EvalMode
from cudagym.judge.job import Job, KnownBaselines
from cudagym.judge.protocol import (
    CUDAGYM_V0,
    CUDAGYM_V3,
    CUDAGYM_V4,
    CUDAGYM_V5,
    DEFAULT_PROTOCOL,
    KERNELBENCH,
    Protocol,
)
from cudagym.judge.records import BuildResult, BuildStatus, EvalResult, EvalStatus, TimingStats, Yardstick
from cudagym.judge.split import RUNNER_PHASES, TRUSTED_PHASES
from cudagym.judge.worker import WorkerPool
from cudagym.reward import reward_config, score, tier_of
from cudagym.solution import Solution
from cudagym.task import make_task

# The runner is started with --sock (the channel to the judge); the judge's own worker never is.
TASK = '''
import sys
import time
import torch
import torch.nn as nn

IN_RUNNER = "--sock" in sys.argv

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        time.sleep(0.0015 if IN_RUNNER else 0.006)
        return torch.relu(self.lin(x))

def get_inputs():
    return [torch.randn(8, 32)]

def get_init_inputs():
    return [32]
'''

# The reference's own code as the candidate: it earns no speedup on its merits.
SAME_CODE = TASK.split("class Model(")[0] + "class ModelNew(" + TASK.split("class Model(")[1].split("def get_inputs")[0]

# Slows, at import, the ops the reference uses in the candidate's process (the reference's yardstick there would
# grow), and computes its own answer by other ops: the reference was timed before this ran, so it gains nothing.
SLOWS_THE_REFERENCE = '''
import time
import torch
import torch.nn as nn
import torch.nn.functional as F

_linear = F.linear

def slow_linear(*args, **kwargs):
    time.sleep(0.02)
    return _linear(*args, **kwargs)

F.linear = slow_linear
torch.relu = lambda x, _relu=torch.relu: (time.sleep(0.02), _relu(x))[1]

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        time.sleep(0.0015)
        return torch.clamp_min(torch.addmm(self.lin.bias, x, self.lin.weight.t()), 0)
'''


# A reference that fails in the runner (and only there), and one that takes 0.4 s a call there: the candidate is
# its own code, an addmm and a clamp, fast and correct in both.
FAILS_IN_RUNNER = TASK.replace("time.sleep(0.0015 if IN_RUNNER else 0.006)",
                               "if IN_RUNNER:\n            raise RuntimeError('no such op here')")
SLOW_IN_RUNNER = TASK.replace("time.sleep(0.0015 if IN_RUNNER else 0.006)", "time.sleep(0.4 if IN_RUNNER else 0.001)")
OWN_CODE = """
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        return torch.clamp_min(torch.addmm(self.lin.bias, x, self.lin.weight.t()), 0)
"""


pool = pytest.fixture(scope="module", name="pool")(cpu_split_pool)


def protocol(runs: int) -> Protocol:
    return CUDAGYM_V0.with_changes(id=f"test-runner-reference-{runs}", guards=(), num_inputs=2, warmup_runs=2,
                                   warmup_ms=0.0, min_runs=15, max_runs=15, target_ci_pct=0.0,
                                   runner_reference_runs=runs)


def judge(pool: WorkerPool, candidate: str, proto: Protocol, mode: EvalMode = EvalMode.PROFILE,
          job_id: str = "job", task: str = TASK, baselines: KnownBaselines | None = None) -> EvalResult:
    job = Job(
        job_id=job_id,
        task=make_task(textwrap.dedent(task), id="test/runner-reference", suite="test", level=1, name="rr",
                       origin="test"),
        solution=Solution("inline", {"model_new.py": textwrap.dedent(candidate)}),
        build=BuildResult(BuildStatus.OK, "inline"),
        mode=mode,
        protocol=proto,
        baselines=baselines or KnownBaselines(),
    )
    return pool.submit(job).result(timeout=300)


def test_the_same_code_is_as_fast_as_eager_when_the_yardstick_is_the_runners(pool: WorkerPool) -> None:
    alone = judge(pool, SAME_CODE, protocol(0), job_id="alone")
    assert alone.status is EvalStatus.OK, alone.message + alone.log[-3000:]
    assert alone.speedup_vs_eager > 2.5, alone.message  # the process alone: a tier the code did not earn
    assert not alone.runner_reference.measured
    assert "speedups against the reference" not in alone.log

    fair = judge(pool, SAME_CODE, protocol(10), job_id="fair")
    assert fair.status is EvalStatus.OK, fair.message + fair.log[-3000:]
    assert fair.runner_reference.runs == 10 and 1400 < fair.runner_reference.median_us < 5000
    assert fair.eager.median_us > 5500  # the judge's process still times eager at its own speed ...
    assert 0.8 < fair.speedup_vs_eager < 1.25, fair.message + fair.log[-3000:]  # ... and the verdict is fair
    # and the reward's tier takes the same yardstick (it once took the raw times: a tier 2 or 3 for the same code)
    assert fair.baseline_scale == pytest.approx(fair.runner_reference.median_us / fair.eager.median_us)
    config = reward_config(None, threshold=protocol(10).threshold, statistic=protocol(10).statistic)
    scored = score(fair, config)
    assert scored.speedup_vs_eager == pytest.approx(fair.speedup_vs_eager)
    assert scored.tier == tier_of(1.0, fair.speedup_vs_eager, fair.speedup_vs_compile,
                                  threshold_vs_eager=config.threshold_vs_eager,
                                  threshold_vs_compile=config.threshold_vs_compile)  # the verdict's own figures' tier
    assert alone.baseline_scale == 1.0 and score(alone, config).tier >= 2  # alone, the raw times stand
    note = next(n for n in fair.notes if n.startswith("speedups against the reference in the candidate's runner"))
    assert re.search(r"median of 10, 95% interval \+-[0-9.]+%, timed before the candidate loaded\) against "
                     r"eager's [0-9.]+ us here "
                     r"\(beside the candidate, x0\.[0-9]+\): [0-9.]+x vs eager, [0-9.]+x vs torch.compile "
                     r"\(against this process's times alone: [0-9.]+x", note), note
    assert f"{fair.speedup_vs_eager:.3f}x vs eager" in fair.message
    # what each kind of timed request cost the judge, beside the runner's own part: 15 + 8 empty calls (a second
    # round after the reference's, the cheaper standing), the reference's 2 warm-ups in one untimed request, then
    # its 10 timed calls
    cost = next(n for n in fair.notes if n.startswith("timed requests, this process's wall time each (median): "))
    assert re.search(r"calibrate 23 x [0-9.]+ ms \(the runner's own [0-9.]+ ms\) \[first [0-9.]+ ms, all \d+ ms\], "
                     r"reference_warm 1 x [0-9.]+ ms \(the runner's own [0-9.]+ ms\) \[first [0-9.]+ ms, all \d+ ms\], "
                     r"reference 10 x [0-9.]+ ms \(the runner's own [0-9.]+ ms\) \[first [0-9.]+ ms, all \d+ ms\], "
                     r"timed \d+ x [0-9.]+ ms", cost), cost
    warm = next(n for n in fair.notes if n.startswith("the reference's warm-up in the runner: "))
    built, calls = map(float, re.search(r"2 untimed call\(s\) in one request, the reference built there in ([0-9.]+) "
                                         r"ms, its calls ([0-9.]+) ms$", warm).groups())
    assert calls >= 2 * 1.5, warm  # two calls of the reference, each 1.5 ms of sleep in the runner
    bench = load_script("benchmarks/bench_vec.py", "bench_vec_reads_the_harness")  # the GPU driver reads it so
    parts = bench.job_parts({"status": ["ok"], "wall_time_s": [1.0], "notes": [list(fair.notes)],
                             "cost": {f"{name}_s": [0.1] for name in ("load", "check", "timing", "profile")}})
    assert {"reference first ms", "reference all ms", "calibrate all ms", "reference_warm all ms",
            "reference built ms", "reference warm calls ms"} <= set(parts[0]), parts
    # and where a timed request's time went, by each side's account: the runner's parts fit inside what this
    # process waited for its reply, and this process's parts inside its wall time per request
    anatomy = next(n for n in fair.notes if n.startswith("timed requests, part by part (ms, medians): "))
    for kind in ("calibrate", "reference", "timed"):
        here = [parts[0][f"{kind} here {name} ms"] for name in TRUSTED_PHASES]
        there = [parts[0][f"{kind} runner {name} ms"] for name in RUNNER_PHASES]
        assert all(x >= 0 for x in here + there), anatomy
        assert sum(there) <= here[1] * 1.5 + 0.2, anatomy  # the runner's work is inside the reply wait ...
        assert sum(here) <= parts[0][f"{kind} request ms"] * 1.5 + 0.2, anatomy  # ... which is inside the request
    assert "here queue and send" in anatomy and "the runner prepare" in anatomy and "GPU wait 0.000" in anatomy


def test_cached_baselines_from_another_process_are_scaled_to_the_candidates_too(pool: WorkerPool) -> None:
    """PROFILE looks the baselines up (timed in some earlier process): the runner's own reference time scales them."""
    cached = KnownBaselines(TimingStats(median_us=1000.0, mean_us=1000.0, min_us=990.0, max_us=1010.0, runs=20),
                            TimingStats(median_us=800.0, mean_us=800.0, min_us=790.0, max_us=810.0, runs=20))
    result = judge(pool, SAME_CODE, protocol(10), job_id="cached", baselines=cached)
    assert result.status is EvalStatus.OK, result.message + result.log[-3000:]
    assert result.eager.median_us == 1000.0 and result.candidate.median_us > 1400  # 1.5 ms sleeps in the runner
    assert 0.8 < result.speedup_vs_eager < 1.25, result.message  # against the cached 1 ms alone: about 0.6x
    assert 0.8 * 0.8 < result.speedup_vs_compile < 0.8 * 1.25  # torch.compile's cached 0.8 ms, by the same scale
    # outside SUBMIT the claims rest on the fastest of the checked calls: at least three of them (MIN_CHECKED_ROUNDS),
    # so one call's scheduler hiccup on a loaded host cannot make an honest claim unverifiable (CI once saw 1 call,
    # read 4,235.6 us against a 1,678.4 us claim)
    checked = re.search(r"fastest of the (\d+) timed call\(s\) whose outputs it checked", "\n".join(result.notes))
    assert checked and int(checked.group(1)) >= 3, result.notes


def test_a_candidate_that_slows_the_reference_in_its_process_gains_nothing(pool: WorkerPool) -> None:
    result = judge(pool, SLOWS_THE_REFERENCE, protocol(10), job_id="slows")
    assert result.status is EvalStatus.OK, result.message + result.log[-3000:]
    assert result.runner_reference.median_us < 5000  # timed before the candidate's import ran: no 40 ms sleeps
    # the attack, had it reached the yardstick, would read about 20x (40 ms of sleeps against 1.9 ms); the CPU path's
    # ten reference calls move with the host's load: 0.92-0.99x on an idle 2-core host, 1.43x once in CI (a runner
    # starting beside the reference's calls)
    assert 0.5 < result.speedup_vs_eager < 2.0, result.message


def test_verify_times_nothing_in_the_runner(pool: WorkerPool) -> None:
    result = judge(pool, SAME_CODE, protocol(10), mode=EvalMode.VERIFY, job_id="verify")
    assert result.status is EvalStatus.OK, result.message
    assert not result.runner_reference.measured and result.speedup_vs_eager == 0.0


def test_a_reference_that_fails_in_the_runner_leaves_the_speedups_unscaled_and_says_so(pool: WorkerPool) -> None:
    result = judge(pool, OWN_CODE, protocol(10), job_id="fails", task=FAILS_IN_RUNNER)
    assert result.status is EvalStatus.OK, result.message + result.log[-3000:]  # not the candidate's failure
    assert not result.runner_reference.measured and result.speedup_vs_eager > 0
    said = [n for n in result.notes if n.startswith("speedups against the reference in the candidate's runner")]
    assert said == ["speedups against the reference in the candidate's runner: not taken, the reference failed in "
                    "the runner (RuntimeError: no such op here)"], said


def test_a_slow_reference_in_the_runner_stops_after_five_calls_and_its_budget(pool: WorkerPool) -> None:
    result = judge(pool, OWN_CODE, protocol(20), job_id="slow", task=SLOW_IN_RUNNER)
    assert result.status is EvalStatus.OK, result.message + result.log[-3000:]
    assert 5 <= result.runner_reference.runs < 20 and result.runner_reference.median_us > 390_000
    assert result.speedup_vs_eager > 100  # 0.4 s a call in the runner: the yardstick says so, and it counts


def test_the_runners_reference_stops_once_its_median_is_as_precise_as_the_protocol_asks(pool: WorkerPool) -> None:
    # up to 200 calls (about 1.5 ms each here, well inside the 3 s budget), stopping at a multiple of 10 calls
    # from min_runs on once the median's 95% interval is within 5%
    proto = protocol(200).with_changes(id="test-runner-reference-precise", min_runs=10, max_runs=15,
                                       target_ci_pct=5.0)
    result = judge(pool, SAME_CODE, proto, job_id="precise")
    assert result.status is EvalStatus.OK, result.message + result.log[-3000:]
    own = result.runner_reference
    assert 10 <= own.runs < 200 and own.runs % 10 == 0 and own.ci95_halfwidth_pct <= 5.0, own
    assert re.search(rf"median of {own.runs}, 95% interval \+-\d+\.\d%", result.log), result.log[-2000:]
    # without a precision target it takes every call the protocol names
    plain = judge(pool, SAME_CODE, protocol(40), job_id="plain")
    assert plain.status is EvalStatus.OK and plain.runner_reference.runs == 40, plain.log[-2000:]


def test_the_default_and_kernelbench_presets_take_the_runners_yardstick() -> None:
    assert DEFAULT_PROTOCOL.runner_reference_runs == CUDAGYM_V5.runner_reference_runs == 200
    assert CUDAGYM_V4.min_runs < 200 and CUDAGYM_V4.target_ci_pct > 0  # it stops once precise enough
    assert CUDAGYM_V3.runner_reference_runs == 20  # kept by id
    assert KERNELBENCH.id == "kernelbench-v0.9" and KERNELBENCH.runner_reference_runs == 100


def _scaled(protocol: Protocol, own_us: float, late: list[int],
            shown_less_claimed: float = 0.0, cached: Yardstick | None = None) -> tuple[float, list[str]]:
    """The speedup vs eager after the runner's yardstick: eager 1,000 us and the candidate 1,000 us here.

    ``shown_less_claimed``: what the judge's clock showed of each of the reference's on-time calls beyond its claim.
    ``cached``: the yardstick from the baseline cache (this job's link then timed no reference call).
    """
    import types

    from cudagym.judge.harness.runner import _against_runner_reference

    notes: list[str] = []
    on_time = [(own_us, own_us + shown_less_claimed)] * (late[1] - late[0])
    remote = types.SimpleNamespace(unqueued={"reference": late}, on_time_path_us=300.0,
                                   on_time_shown=lambda: {"reference": on_time, "timed": []})
    ctx = types.SimpleNamespace(
        protocol=protocol, remote=remote, notes=notes, cached_yardstick=cached, runner_reference_disputed="",
        note=notes.append, speedup_vs_eager=1.0, speedup_vs_compile=0.5,
        runner_reference=TimingStats(median_us=own_us, runs=50), eager_beside_yardstick=TimingStats(),
        timed={"eager": TimingStats(median_us=1000.0, runs=50),
               "candidate": TimingStats(median_us=1000.0, runs=50)})
    _against_runner_reference(ctx)  # type: ignore[arg-type]
    notes.append(f"disputed: {ctx.runner_reference_disputed}")
    return ctx.speedup_vs_eager, notes


def test_a_reference_that_waits_for_the_gpu_inside_cannot_raise_the_speedups() -> None:
    # its runner's calls were late (not queued before the go): host time in both processes' times, so the speedups
    # stay the smaller of the two yardsticks' (cudagym-v5); queued in full, or under cudagym-v4, it scales them
    raised, notes = _scaled(CUDAGYM_V5, 1500.0, [96, 96])
    assert raised == 1.0 and "96 of its 96 calls there were not queued before the go" in notes[0]
    assert _scaled(CUDAGYM_V5, 800.0, [96, 96])[0] == pytest.approx(0.8)  # lowering them stands
    assert _scaled(CUDAGYM_V5, 1500.0, [0, 96])[0] == pytest.approx(1.5)
    assert _scaled(CUDAGYM_V4, 1500.0, [96, 96])[0] == pytest.approx(1.5)


def test_a_reference_whose_claims_the_clock_contradicts_cannot_raise_the_speedups() -> None:
    # on time, but its claims 5% beyond what the judge's clock showed of them (KernelBench L1/72 on an H100: the same
    # code 1.053x eager): which clock read it right is unknown, so the speedups stay against this process's times
    raised, notes = _scaled(CUDAGYM_V5, 1050.0, [0, 30], shown_less_claimed=-50.0)
    assert raised == 1.0, notes
    assert "30 on-time calls there -50.0 us from their claims" in notes[0] and "x1.050 there would raise" in notes[0]
    assert _scaled(CUDAGYM_V5, 1050.0, [0, 30], shown_less_claimed=-5.0)[0] == pytest.approx(1.05)  # they agree
    assert _scaled(CUDAGYM_V5, 950.0, [0, 30], shown_less_claimed=-50.0)[0] == pytest.approx(0.95)  # lowering stands
    assert _scaled(CUDAGYM_V4, 1050.0, [0, 30], shown_less_claimed=-50.0)[0] == pytest.approx(1.05)  # kept by id



def test_beside_eager_timed_around_it_the_yardstick_scales_by_two_times_taken_together(pool: WorkerPool) -> None:
    """``yardstick_beside_eager``: the scale is the runner's reference over eager timed here around it (two times
    taken together), and the speedup eager's time beside the candidate over the candidate's, times that scale."""
    proto = protocol(10).with_changes(id="test-runner-reference-beside", yardstick_beside_eager=True)
    result = judge(pool, SAME_CODE, proto, job_id="beside", mode=EvalMode.SUBMIT)
    assert result.status is EvalStatus.OK, result.message + result.log[-3000:]
    beside = result.eager_beside_yardstick
    assert beside.runs == 2 * 7 and 5500 < beside.median_us < 8000  # 15 // 2 calls before and after it, 6 ms each
    assert result.baseline_scale == pytest.approx(result.runner_reference.median_us / beside.median_us)
    assert result.speedup_vs_eager == pytest.approx(
        result.eager.median_us / result.candidate.median_us * result.baseline_scale)
    note = next(n for n in result.notes if n.startswith("speedups against the reference in the candidate's runner"))
    assert re.search(r"against eager's [0-9.]+ us here \(timed around it, x0\.[0-9]+\)", note), note
    # the reward's interval then takes the baseline's own and both of the scale's
    config = reward_config(None, threshold=proto.threshold, statistic=proto.statistic, interval=True)
    halves = [t.ci95_halfwidth_pct for t in (result.candidate, result.eager, result.runner_reference, beside)]
    assert score(result, config).interval_pct == pytest.approx(min(100.0, math.hypot(*halves)))
    # and the clean job's eager beside it goes into the baseline cache with the yardstick
    assert result.yardstick.eager_beside == beside
    off = judge(pool, SAME_CODE, protocol(10), job_id="not-beside", mode=EvalMode.SUBMIT)
    assert not off.eager_beside_yardstick.measured and off.yardstick.eager_beside == TimingStats()


def test_a_cached_yardstick_is_held_to_the_same_rules_by_the_clean_jobs_calls() -> None:
    # the job took it from the cache: its own link timed no reference call, the clean job's late calls and dispute
    # decide, as they would have there
    late = Yardstick(TimingStats(median_us=1500.0, runs=96), late_calls=96, calls=96)
    raised, notes = _scaled(CUDAGYM_V5, 1500.0, [0, 0], cached=late)
    assert raised == 1.0 and "96 of its 96 calls there were not queued before the go" in notes[0], notes
    assert "timed before any candidate loaded, in a clean job" in notes[-2], notes
    disputed = Yardstick(TimingStats(median_us=1050.0, runs=30), 0, 30, "30 on-time calls there -50.0 us from ...")
    raised, notes = _scaled(CUDAGYM_V5, 1050.0, [0, 0], cached=disputed)
    assert raised == 1.0 and "-50.0 us from ..." in notes[0], notes
    agreed = Yardstick(TimingStats(median_us=1050.0, runs=30), 0, 30)
    assert _scaled(CUDAGYM_V5, 1050.0, [0, 0], cached=agreed)[0] == pytest.approx(1.05)


def test_a_dispute_is_recorded_with_the_yardstick_whichever_way_it_would_move_the_speedups() -> None:
    # kept for the cache: a later job's eager may stand elsewhere, where the same yardstick would raise them
    lowering, notes = _scaled(CUDAGYM_V5, 950.0, [0, 30], shown_less_claimed=-50.0)
    assert lowering == pytest.approx(0.95) and "30 on-time calls there -50.0 us from their claims" in notes[-1]
    assert _scaled(CUDAGYM_V5, 950.0, [0, 30], shown_less_claimed=-5.0)[1][-1] == "disputed: "
    assert _scaled(CUDAGYM_V4, 950.0, [0, 30], shown_less_claimed=-50.0)[1][-1] == "disputed: "  # not its rule


def test_a_job_that_looks_its_baselines_up_takes_the_yardstick_from_the_cache_too(pool: WorkerPool) -> None:
    """PROFILE with cached baselines and yardstick times no reference call in its runner; SUBMIT retimes all."""
    cached = KnownBaselines(TimingStats(median_us=1000.0, mean_us=1000.0, min_us=990.0, max_us=1010.0, runs=20),
                            TimingStats(median_us=800.0, mean_us=800.0, min_us=790.0, max_us=810.0, runs=20),
                            Yardstick(TimingStats(median_us=3000.0, mean_us=3000.0, min_us=2990.0, max_us=3010.0,
                                                  runs=40), late_calls=0, calls=40))
    result = judge(pool, SAME_CODE, protocol(10), job_id="yardstick-cached", baselines=cached)
    assert result.status is EvalStatus.OK, result.message + result.log[-3000:]
    assert result.runner_reference == cached.yardstick.time and result.cost.reference_calls == 40
    # against the cached 3 ms: about 2x the runner's 1.5 ms sleeps (the cache's word, as its eager is)
    assert 1.5 < result.speedup_vs_eager < 2.4, result.message
    said = next(n for n in result.notes if "from the baseline cache" in n)
    assert "(3000.0 us, median of 40; 0 of its 40 calls one a request not queued before the go)" in said, said
    requests = next(n for n in result.notes if n.startswith("timed requests, this process's wall time each"))
    assert "reference" not in requests and "calibrate 23 x" in requests, requests  # both calibration rounds
    retimed = judge(pool, SAME_CODE, protocol(10), job_id="yardstick-submit", baselines=cached, mode=EvalMode.SUBMIT)
    assert retimed.status is EvalStatus.OK, retimed.message + retimed.log[-3000:]
    assert retimed.runner_reference.runs == 10 and retimed.runner_reference.median_us < 2500
    assert not any("from the baseline cache" in n for n in retimed.notes)
    control = protocol(10).with_changes(extra={"yardstick": "retimed"})
    probe = judge(pool, SAME_CODE, control, job_id="yardstick-retimed", baselines=cached)
    assert probe.status is EvalStatus.OK and probe.runner_reference.runs == 10, probe.log[-3000:]


def test_under_yardstick_clean_a_submit_takes_the_clean_jobs_scale(pool: WorkerPool) -> None:
    """``yardstick=clean`` (a probe setting): SUBMIT times its baselines again beside the candidate but takes the
    yardstick, and with ``yardstick_beside_eager`` the eager time around it, from the clean job: one scale per task."""
    yardstick = Yardstick(TimingStats(median_us=3000.0, mean_us=3000.0, min_us=2990.0, max_us=3010.0, runs=40),
                          late_calls=0, calls=40,
                          eager_beside=TimingStats(median_us=6000.0, mean_us=6000.0, min_us=5990.0, max_us=6010.0,
                                                   runs=14))
    # the clean eager slower than this process's 6 ms sleeps: the SUBMIT's own eager, re-timed, stands (a re-timed
    # baseline counts no slower than its clean time)
    cached = KnownBaselines(TimingStats(median_us=20000.0, mean_us=20000.0, min_us=19990.0, max_us=20010.0, runs=20),
                            TimingStats(median_us=800.0, mean_us=800.0, min_us=790.0, max_us=810.0, runs=20), yardstick)
    proto = protocol(10).with_changes(id="test-runner-reference-clean", yardstick_beside_eager=True,
                                      extra={"yardstick": "clean"})
    result = judge(pool, SAME_CODE, proto, job_id="yardstick-clean", baselines=cached, mode=EvalMode.SUBMIT)
    assert result.status is EvalStatus.OK, result.message + result.log[-3000:]
    assert result.runner_reference == yardstick.time and result.eager_beside_yardstick == yardstick.eager_beside
    assert 5500 < result.eager.median_us < 15000  # its own eager, timed again beside the candidate (6 ms sleeps here)
    assert result.baseline_scale == pytest.approx(0.5)  # 3,000 over 6,000: the clean job's two times
    assert result.speedup_vs_eager == pytest.approx(result.eager.median_us / result.candidate.median_us * 0.5)
    assert any("from the baseline cache" in n for n in result.notes)
    requests = next(n for n in result.notes if n.startswith("timed requests, this process's wall time each"))
    assert "reference " not in requests, requests  # no reference call timed in its runner
    # without the setting a SUBMIT times the yardstick again
    again = judge(pool, SAME_CODE, proto.with_changes(id="test-runner-reference-clean-off", extra={}),
                  job_id="yardstick-clean-off", baselines=cached, mode=EvalMode.SUBMIT)
    assert again.status is EvalStatus.OK and again.runner_reference.runs == 10, again.log[-3000:]
