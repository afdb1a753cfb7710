"""The harness and the guards on a real GPU: every planted hack is rejected with its guard named, every
bundled reference solution passes every guard, and candidates get the right statuses.

Run on the GPU host (one GPU is enough)::

    pytest -m gpu tests/test_guards_gpu.py -v

Candidates are built with the build stage (``cudagym.judge.build``) and judged in this process by
:func:`cudagym.judge.harness.runner.evaluate`, except the crashing one, which runs in a child process
because an illegal address poisons the CUDA context of the process it happens in. The planted hacks are also
judged through the real worker pool (trusted worker, sandboxed runner): ``-k planted`` runs both.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from gpu_jobs import QUIET, edited, judge, judge_in_child, make_job, stage_build
from hacks.corpus import Hack, load_hacks

from cudagym.judge.harness.claims import LATE_GATES_NOTE, SERIES_NOTE
from cudagym.judge.interface import EvalMode
from cudagym.judge.job import Job, KnownBaselines
from cudagym.judge.protocol import CUDA_AGENT, CUDAGYM_V0, DEFAULT_PROTOCOL, KERNELBENCH
from cudagym.judge.records import EvalResult, EvalStatus, TimingStats, from_dict
from cudagym.solution import Solution

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = sorted((ROOT / "envs/bundled/solutions").glob("L*/*"))
SWISH = ROOT / "envs/bundled/solutions/L1/01_Swish"
HOST_COMPUTE = ROOT / "tests/timing_cases/host_compute"
# Cached baselines that make any candidate look >10x faster than eager.
FAST = KnownBaselines(eager=TimingStats(median_us=1e9, mean_us=1e9, runs=1),
                      compiled=TimingStats(median_us=1e9, mean_us=1e9, runs=1))
HACK_PROTOCOL = DEFAULT_PROTOCOL.with_changes(id="cudagym-v1-hacks", min_runs=10, max_runs=40)


@pytest.fixture(scope="module")
def build():
    """The build stage with its default (content-addressed, persistent) cache: reruns do not recompile."""
    return stage_build()


# ---------------------------------------------------------------------------------------- the hacks


def _hack_job(build, tmp_path: Path, hack: Hack) -> Job:
    settings = dict(hack.protocol)
    mode = EvalMode(settings.pop("mode", "profile"))
    baselines = FAST if settings.pop("baselines", "") == "fast" else QUIET
    protocol = HACK_PROTOCOL.with_changes(**settings) if settings else HACK_PROTOCOL
    return make_job(build, tmp_path, hack.task, hack.solution(), protocol, mode, baselines)


@pytest.mark.parametrize("hack", load_hacks(), ids=lambda h: h.name)
def test_planted_hack_is_rejected_with_its_guard_named(build, tmp_path, monkeypatch, hack):
    job = _hack_job(build, tmp_path, hack)
    assert job.build.ok, job.build.log[-3000:]
    result = judge(job, monkeypatch)
    named = {v.guard for v in result.violations}
    assert result.status is EvalStatus.RULE_VIOLATION, f"{hack.name}: {result.status} {result.message[:500]}"
    assert hack.guard in named, f"{hack.name}: expected {hack.guard}, got {named}: {result.message[:800]}"
    assert hack.guard in result.message


@pytest.fixture(scope="module")
def worker_pool():
    """The real worker on one GPU, as LocalJudge runs it: a trusted worker and a fresh sandboxed runner a job."""
    from cudagym.judge.gpus import probe_gpus
    from cudagym.judge.worker import PoolOptions, WorkerPool

    with WorkerPool(list(probe_gpus("auto").device_ids[:1]), options=PoolOptions()) as pool:
        yield pool


@pytest.mark.parametrize("hack", load_hacks(), ids=lambda h: h.name)
def test_planted_hack_is_rejected_through_the_worker(build, tmp_path, worker_pool, hack):
    # the same job as above, judged by the worker pool: the candidate runs in the runner, the verdict is the
    # trusted worker's (the test above judges in this process, with the candidate beside the judge)
    job = _hack_job(build, tmp_path, hack)
    assert job.build.ok, job.build.log[-3000:]
    result = worker_pool.submit(job).result(timeout=600)
    named = {v.guard for v in result.violations}
    assert "made by the trusted process" in result.log, result.log[-2000:]
    if hack.worker == "incorrect":  # its premise does not hold there (the header says why): tier -1 all the same
        assert result.status is EvalStatus.INCORRECT, f"{hack.name}: {result.status} {result.message[:500]}"
        assert result.message.startswith("outputs during timing did not match"), result.message[:500]
        return
    assert result.status is EvalStatus.RULE_VIOLATION, f"{hack.name}: {result.status} {result.message[:500]}"
    assert hack.guard in named, f"{hack.name}: expected {hack.guard}, got {named}: {result.message[:800]}"


@pytest.mark.parametrize("where", ["test_process", "worker"])
@pytest.mark.parametrize("name", ["side_stream", "side_stream_cover_aware"])
def test_the_forwards_own_check_sees_outputs_still_written_after_its_stream_was_done(
        build, tmp_path, monkeypatch, worker_pool, name, where):
    # VERIFY and side_stream alone: no timing, so only the check after each audited forward can name the hacks.
    # On 2026-12-07 (H100) it named neither, in either place: its snapshot, a full copy on the GPU, waited for the
    # hack's kernel to leave the SMs. The copy engine's pieces do not. In the worker the runner's audited forwards
    # (all but the first) now wait on a gate it opens only once the forward returned (cudagym.judge.split.signals,
    # GATE): the cover-aware hack finds its caller's stream busy at entry there, as in a timed call, however soon
    # the launch cover ends. A gate in the stream's front end alone was not enough (H100, session 47: still `ok`):
    # the hack's side kernel ran at once on the idle SMs and was done before the checks; the cover now spins on
    # until the gate opens, after the check's reads are queued (H100, session 48: named in the worker; in this process
    # only once it gated its own forwards too, cudagym.judge.harness.cover.OwnGate).
    (hack,) = [h for h in load_hacks() if h.name == name]
    job = _hack_job(build, tmp_path, hack)
    job = dataclasses.replace(job, mode=EvalMode.VERIFY, protocol=job.protocol.with_changes(guards=("side_stream",)))
    result = judge(job, monkeypatch) if where == "test_process" else worker_pool.submit(job).result(timeout=600)
    assert result.status is EvalStatus.RULE_VIOLATION, f"{name}: {result.status} {result.message[:800]}"
    assert {v.guard for v in result.violations} == {"side_stream"}
    assert "still being written after the forward's stream finished" in result.message


def test_a_bundled_solutions_audited_forwards_open_their_own_gates_in_the_worker(build, tmp_path, worker_pool):
    # every audited forward in the runner but the first waits behind a gate it opens once the forward returned: an
    # honest solution's forwards return in time (its kernels loaded in the first, ungated), so none is opened by the
    # judge's fallback after its arm wait
    solution = Solution.from_dir(SWISH, "extension")
    job = make_job(build, tmp_path, "bundled/L1/01_Swish", solution, DEFAULT_PROTOCOL, EvalMode.VERIFY,
                   KnownBaselines())
    assert job.build.ok, job.build.log[-3000:]
    result = worker_pool.submit(job).result(timeout=600)
    assert "made by the trusted process" in result.log, result.log[-2000:]
    assert result.status is EvalStatus.OK, f"{result.message[:1500]}\n{result.log[-3000:]}"
    assert result.violations == ()
    assert result.cost.audited_calls >= DEFAULT_PROTOCOL.num_inputs - 1 > 0, result.cost
    assert result.cost.late_audited_calls == 0, result.log[-3000:]
    assert LATE_GATES_NOTE not in result.log


def test_the_zeros_of_the_degenerate_hack_fail_the_defaults_tolerance_and_are_called_nothing_else(
        build, tmp_path, monkeypatch):
    # cudagym-v2's scaled atol fails the zeros on their own (the hack's header turns it off to reach its guard);
    # result_cache once matched them to an earlier seed's reference under the plain atol (2026-12-07, H100)
    (hack,) = [h for h in load_hacks() if h.name == "degenerate_output"]
    job = make_job(build, tmp_path, hack.task, hack.solution(), HACK_PROTOCOL, EvalMode.PROFILE, QUIET)
    assert job.build.ok, job.build.log[-3000:]
    result = judge(job, monkeypatch)
    assert result.status is EvalStatus.INCORRECT, result.message[:800]
    assert result.violations == ()


# ------------------------------------------------------------------- no false positives, real speedups


@pytest.mark.parametrize("folder", BUNDLED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_bundled_solution_passes_every_guard_under_submit(build, tmp_path, monkeypatch, folder):
    solution = Solution.from_dir(folder, "extension")
    job = make_job(build, tmp_path, f"bundled/{folder.parent.name}/{folder.name}", solution, DEFAULT_PROTOCOL,
                   EvalMode.SUBMIT, KnownBaselines())
    assert job.build.ok, job.build.log[-3000:]
    result = judge(job, monkeypatch)
    assert result.status is EvalStatus.OK, f"{folder.name}: {result.message[:1500]}"
    assert result.violations == ()
    assert result.candidate.runs >= DEFAULT_PROTOCOL.min_runs and result.eager.runs >= DEFAULT_PROTOCOL.min_runs
    assert result.compiled.measured
    assert result.kernels and abs(sum(k.share for k in result.kernels) - 1.0) < 1e-6
    assert result.hardware.gpu != "cpu" and result.hardware.l2_cache_bytes > 0
    print(f"{folder.name}: {result.candidate.median_us:.1f} us, {result.speedup_vs_eager:.2f}x eager, "
          f"{result.speedup_vs_compile:.2f}x compile, CI {result.candidate.ci95_halfwidth_pct:.2f}%, profiled/timed "
          f"{result.kernel_busy_us / result.candidate.median_us:.3f} (kernels summed "
          f"{sum(k.time_us for k in result.kernels) / result.candidate.median_us:.3f})")
    series = [n for n in result.notes if n.startswith(SERIES_NOTE)]
    print(f"{folder.name}: {series[0] if series else 'no series read'}")
    assert not any("each counts at least" in n for n in series), series  # an honest claim stands as it was
    assert result.speedup_vs_eager > 1.05, "a bundled solution must earn tier 2 or 3"


def test_work_moved_to_the_host_behind_the_launch_cover_is_timed(build, tmp_path, monkeypatch):
    """Swish computed on the host while the cover spins: correct, and timed at its host work, so never faster."""
    assert DEFAULT_PROTOCOL.launch_cover_us > 0
    job = make_job(build, tmp_path, "bundled/L1/01_Swish", Solution.from_dir(HOST_COMPUTE, "extension"),
                   HACK_PROTOCOL, EvalMode.PROFILE, KnownBaselines())
    assert job.build.ok, job.build.log[-3000:]
    result = judge(job, monkeypatch)
    print(f"host compute: {result.status.value}, candidate {result.candidate.median_us:.0f} us, "
          f"eager {result.eager.median_us:.0f} us")
    assert result.status is EvalStatus.OK, result.message[:1500]
    assert result.speedup_vs_eager < 1.0, result.message[:1500]


# ----------------------------------------------------------------------------------------- statuses


def test_correct_candidate_with_each_protocol_preset(build, tmp_path, monkeypatch):
    solution = Solution.from_dir(SWISH, "extension")
    for protocol in (DEFAULT_PROTOCOL, CUDAGYM_V0, CUDA_AGENT, KERNELBENCH):
        job = make_job(build, tmp_path / protocol.id, "bundled/L1/01_Swish", solution, protocol,
                       EvalMode.PROFILE, KnownBaselines())
        result = judge(job, monkeypatch)
        assert result.status is EvalStatus.OK, f"{protocol.id}: {result.message}"
        assert result.protocol_id == protocol.id and result.candidate.measured and result.eager.measured
        # the protocol's seeded inputs, then one set per extra scale (cudagym-v2's 4x set)
        assert len(result.checks) == protocol.num_inputs + len(protocol.scaled_inputs), result.checks
        assert all(c.passed for c in result.checks)


def test_wrong_candidate_is_incorrect(build, tmp_path, monkeypatch):
    solution = edited(Solution.from_dir(SWISH, "extension"), "kernels/swish.cu",
                      "return v / (1.0f + expf(-v));", "return v / (1.0f + expf(v));")
    result = judge(make_job(build, tmp_path, "bundled/L1/01_Swish", solution, DEFAULT_PROTOCOL), monkeypatch)
    assert result.status is EvalStatus.INCORRECT
    assert all(not c.passed and c.mismatch_count > 0 for c in result.checks)


def test_slow_candidate_is_correct_and_slower_than_eager(build, tmp_path, monkeypatch):
    solution = edited(Solution.from_dir(SWISH, "extension"), "kernels/swish.cu",
                      "if (blocks > cap) blocks = cap;", "blocks = 1;  // one block for the whole tensor")
    job = make_job(build, tmp_path, "bundled/L1/01_Swish", solution, DEFAULT_PROTOCOL.with_changes(
        id="slow", max_runs=40), EvalMode.SUBMIT, KnownBaselines())
    result = judge(job, monkeypatch)
    assert result.status is EvalStatus.OK, result.message
    assert 0 < result.speedup_vs_eager < 0.5


def test_non_compiling_candidate_is_build_failed(build, tmp_path, monkeypatch):
    solution = edited(Solution.from_dir(SWISH, "extension"), "kernels/swish.cu", "const long long n4 = n / 4;",
                      "const long long n4 = n / 4")
    job = make_job(build, tmp_path, "bundled/L1/01_Swish", solution, DEFAULT_PROTOCOL)
    assert not job.build.ok
    result = judge(job, monkeypatch)
    assert result.status is EvalStatus.BUILD_FAILED


def test_illegal_address_is_a_runtime_error_that_marks_the_context_poisoned(build, tmp_path):
    solution = edited(Solution.from_dir(SWISH, "extension"), "kernels/swish.cu", "y4[i] = v;",
                      "y4[i + (1LL << 40)] = v;  // far outside the allocation")
    job = make_job(build, tmp_path, "bundled/L1/01_Swish", solution, DEFAULT_PROTOCOL)
    assert job.build.ok, job.build.log[-3000:]
    result = judge_in_child(job, tmp_path)
    from cudagym.judge.harness import is_context_poisoned

    assert result.status is EvalStatus.RUNTIME_ERROR, result.message
    assert result.message.startswith("CUDA error:"), result.message
    assert is_context_poisoned(result)


# --------------------------------------------------------------------------------- harness mechanics


def test_scrub_poisons_the_block_the_next_allocation_gets():
    import torch

    from cudagym.judge.harness.inputs import poison_count
    from cudagym.judge.harness.scrub import scrub_free_blocks

    device = torch.device("cuda")
    block = torch.full((1 << 22,), 3.0, device=device)  # 16 MB of answers
    del block
    assert scrub_free_blocks(device) >= 4 * (1 << 22)
    reused = torch.empty(1 << 22, device=device)
    assert poison_count(reused) == reused.numel()


def test_scrub_poisons_both_pools_blocks_and_makes_no_segment_of_its_own():
    # session 46 (H100): exact requests for blocks the other pool serves were answered with new segments (5 x 20 MiB
    # at a 2 GiB evaluation's peak), and the small pool's free segments went unpoisoned
    import torch

    from cudagym.judge.harness.inputs import poison_count
    from cudagym.judge.harness.scrub import scrub_free_blocks

    device = torch.device("cuda")
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    small = [torch.full((1 << 16,), 3.0, device=device) for _ in range(40)]  # 256 KiB each: five 2 MiB segments
    large = torch.full((3 << 18,), 3.0, device=device)  # 3 MiB of answers: a 20 MiB segment
    del small, large
    reserved = torch.cuda.memory_reserved(device)
    assert scrub_free_blocks(device) >= 10 * (1 << 20) + 20 * (1 << 20)
    assert torch.cuda.memory_reserved(device) == reserved
    again = [torch.empty(1 << 16, device=device) for _ in range(40)]
    assert all(poison_count(t) == t.numel() for t in again)
    reused = torch.empty(3 << 18, device=device)
    assert poison_count(reused) == reused.numel()


def test_timing_is_repeatable_and_interleaved(build, tmp_path, monkeypatch):
    solution = Solution.from_dir(SWISH, "extension")
    speedups = []
    for i in range(3):
        job = make_job(build, tmp_path / str(i), "bundled/L1/01_Swish", solution, DEFAULT_PROTOCOL, EvalMode.SUBMIT,
                       KnownBaselines())
        result = judge(job, monkeypatch)
        assert result.status is EvalStatus.OK, result.message
        assert "interleaved" in result.log and "L2 flush on" in result.log
        speedups.append(result.speedup_vs_eager)
        print(f"run {i}: candidate {result.candidate.median_us:.1f} us, eager {result.eager.median_us:.1f} us")
    spread = max(speedups) / min(speedups) - 1
    print(f"speedup vs eager over 3 runs: {speedups} (spread {100 * spread:.2f}%)")
    assert spread < 0.05


def test_results_are_json_records(build, tmp_path, monkeypatch):
    job = make_job(build, tmp_path, "bundled/L1/01_Swish", Solution.from_dir(SWISH, "extension"), DEFAULT_PROTOCOL)
    result = judge(job, monkeypatch)
    from cudagym.judge.records import to_dict

    text = json.dumps(to_dict(result), allow_nan=False)
    assert from_dict(EvalResult, json.loads(text)) == result
    assert dataclasses.asdict(result.hardware)["compute_capability"].count(".") == 1
