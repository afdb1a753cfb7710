"""The CUDA-events timer and its launch cover: against a simulated GPU timeline, the cover's PTX through the real
ptxas, and (GPU tests) the cover on a real GPU."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import types
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from cudagym import runtime
from cudagym.errors import ConfigError
from cudagym.judge.harness import timing
from cudagym.judge.harness.cover import DECLARATION, GATED_KERNEL, KERNEL, PTX_FILE, fill_shape, threads_per_sm
from cudagym.judge.harness.integrity import _Pristine
from cudagym.judge.harness.timing import CudaEventTimer, HostTimer, make_timer


class FakeGpu:
    """One stream: events and kernels start no earlier than the host queued them and run in order."""

    def __init__(self) -> None:
        self.host_us = 0.0
        self.gpu_us = 0.0  # when the stream runs dry

    def launch(self, duration_us: float) -> None:
        self.gpu_us = max(self.gpu_us, self.host_us) + duration_us

    def host_work(self, us: float) -> None:
        self.host_us += us

    def pristine(self) -> _Pristine:
        gpu = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                self.at_us = 0.0

        def record(event: Event, stream: object = None) -> None:
            gpu.launch(0.0)
            event.at_us = gpu.gpu_us

        def sync(*_: object) -> None:
            gpu.host_us = max(gpu.host_us, gpu.gpu_us)

        return dataclasses.replace(
            timing.PRISTINE, perf_counter=lambda: gpu.host_us / 1e6, synchronize=sync, raw_synchronize=sync,
            event=Event, event_record=record, event_elapsed_time=lambda a, b: (b.at_us - a.at_us) / 1000.0,
            current_stream=lambda device=None: None)


class FakeCover:
    def __init__(self, gpu: FakeGpu, cover_us: float) -> None:
        self.gpu, self.cover_us = gpu, cover_us

    def launch(self, stream: object, cover_us: float | None = None) -> None:
        self.gpu.launch(self.cover_us if cover_us is None else cover_us)


def forward(gpu: FakeGpu, host_us: float, kernel_us: float) -> Callable[[], str]:
    def call() -> str:
        gpu.host_work(host_us)  # Python, the module call, argument checks
        gpu.launch(kernel_us)
        return "out"
    return call


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch) -> FakeGpu:
    fake = FakeGpu()
    monkeypatch.setattr(timing, "PRISTINE", fake.pristine())
    return fake


def test_without_a_cover_the_first_launchs_host_latency_is_timed(gpu):
    timer = CudaEventTimer(torch.device("cuda", 0))
    m = timer.measure(forward(gpu, host_us=20.0, kernel_us=60.0))
    assert m.outputs == "out" and m.time_us == pytest.approx(80.0) and m.wall_us == pytest.approx(80.0)


@pytest.mark.parametrize("host_us", [0.0, 7.0, 20.0, 95.0])
def test_a_cover_takes_host_latency_below_it_out_of_the_sample(gpu, host_us):
    timer = CudaEventTimer(torch.device("cuda", 0), FakeCover(gpu, 100.0))
    m = timer.measure(forward(gpu, host_us=host_us, kernel_us=60.0))
    assert m.time_us == pytest.approx(60.0, abs=0.1)  # the same sample whatever the host's jitter
    assert m.wall_us == pytest.approx(60.0, abs=0.1)  # the spin is not counted as escaped host time either


def test_host_work_beyond_the_cover_is_still_timed(gpu):
    timer = CudaEventTimer(torch.device("cuda", 0), FakeCover(gpu, 100.0))
    m = timer.measure(forward(gpu, host_us=1100.0, kernel_us=60.0))  # 1 ms of host work before the kernel
    assert m.time_us == pytest.approx(1060.0, abs=0.5)


def test_the_timer_reports_the_hosts_enqueue_time_and_takes_a_cover_length(gpu):
    timer = CudaEventTimer(torch.device("cuda", 0), FakeCover(gpu, 100.0))
    m = timer.measure(forward(gpu, host_us=1100.0, kernel_us=60.0), cover_us=1500.0)
    assert m.enqueue_us == pytest.approx(1100.0)
    assert m.time_us == pytest.approx(60.0, abs=0.1)  # a cover longer than the enqueue: device time only


def test_cover_sizing_takes_a_high_quantile_of_warm_up_after_the_first_call():
    sizing = timing.CoverSizing(min_us=100.0, max_us=2000.0)
    assert sizing.size([]) == 100.0
    assert sizing.size([5_000_000.0, 10.0, 12.0, 11.0]) == 100.0  # the first call (compiling) is dropped
    calls = [9_000.0] + [100.0 + i for i in range(10)]  # 100..109: the 90th percentile is 108
    assert sizing.size(calls) == pytest.approx(1.5 * 108.0)
    assert sizing.size([1.0, 5_000.0, 5_000.0]) == 2000.0  # capped
    assert sizing.size([300.0]) == 450.0  # one call: it is all there is
    assert not sizing.outlasted([1.0, 1_900.0, 1_900.0])  # capped at 2000, but the host still finishes in time
    assert sizing.outlasted([1.0, 2_500.0, 2_500.0]) and sizing.settled_enqueue_us([1.0, 2_500.0]) == 2_500.0


def _loop(gpu: FakeGpu, host: dict[str, float], sized: bool) -> timing.TimingRun:
    """A timing loop over contenders (name: host microseconds before their one 60 us kernel) on the fake GPU;
    every name but ``candidate`` is a baseline."""
    from cudagym.judge.harness.stats import StoppingRule

    def make(host_us: float) -> Callable[[list], str]:
        return lambda args: forward(gpu, host_us=host_us, kernel_us=60.0)()

    return timing.TimingLoop(
        contenders=[timing.Contender(name, make(us), baseline=name != "candidate") for name, us in host.items()],
        make_inputs=lambda r: [], timer=CudaEventTimer(torch.device("cuda", 0), FakeCover(gpu, 100.0)),
        flusher=timing.L2Flusher(torch.device("cpu"), 0, False), rule=StoppingRule(5, 5, 0.0, "median"),
        warmup_runs=3, warmup_s=0.0, interleave=True, budget_s=60.0, may_poison=lambda t: False,
        cover_sizing=timing.CoverSizing(100.0, 2000.0) if sized else None).run()


def test_sized_covers_take_the_baselines_host_overhead_out_of_their_samples(gpu):
    host = {"candidate": 10.0, "eager": 40.0, "compiled": 300.0}  # torch.compile: ~100s of us of Python
    fixed = _loop(gpu, host, sized=False)
    assert fixed.cover_us == {}
    assert fixed.samples["compiled"].time_us == pytest.approx([260.0] * 5)  # 200 us of host time timed
    sized = _loop(gpu, host, sized=True)
    assert sized.cover_us == pytest.approx({"eager": 100.0, "compiled": 450.0})  # the candidate's is not sized
    for name in host:
        assert sized.samples[name].time_us == pytest.approx([60.0] * 5), name
        assert sized.samples[name].enqueue_us == pytest.approx([host[name]] * 5), name


def test_a_baseline_whose_host_outlasts_the_longest_cover_is_named_with_its_host_time_in_its_samples(gpu):
    run = _loop(gpu, {"candidate": 10.0, "eager": 40.0, "compiled": 3_000.0}, sized=True)
    assert run.cover_us["compiled"] == 2000.0 and run.outlasted_us == pytest.approx({"compiled": 3_000.0})
    assert run.samples["compiled"].time_us == pytest.approx([1_060.0] * 5)  # 1 ms of host time beyond the cover
    assert run.samples["eager"].time_us == pytest.approx([60.0] * 5)


@pytest.mark.parametrize("host_us, expected", [(50.0, 60.0), (150.0, 110.0), (1_000.0, 960.0)])
def test_the_candidates_host_time_beyond_its_cover_is_timed(gpu, host_us, expected):
    """A baseline's cover grows with its host time; the candidate's does not: work it does on the host counts."""
    run = _loop(gpu, {"candidate": host_us, "eager": host_us}, sized=True)
    assert run.samples["candidate"].time_us == pytest.approx([expected] * 5)
    assert run.samples["eager"].time_us == pytest.approx([60.0] * 5)  # a baseline is timed at its device work


def test_make_timer_passes_the_cover_to_the_event_timer_only(gpu):
    cover = FakeCover(gpu, 100.0)
    assert make_timer("cuda_events", torch.device("cuda", 0)).cover is None  # type: ignore[attr-defined]
    assert make_timer("cuda_events", torch.device("cuda", 0), cover).cover is cover  # type: ignore[attr-defined]
    assert isinstance(make_timer("cuda_events", torch.device("cpu"), cover), HostTimer)


def test_a_cover_that_cannot_be_set_up_is_a_clear_error(monkeypatch):
    from cudagym.judge.harness import cover
    from cudagym.judge.harness.context import EvalContext
    from cudagym.judge.protocol import CUDAGYM_V0

    def broken(*args: object) -> None:
        raise RuntimeError("cuModuleLoadData failed: CUDA_ERROR_INVALID_PTX")

    monkeypatch.setattr(cover, "LaunchCover", broken)
    ctx = types.SimpleNamespace(protocol=CUDAGYM_V0.with_changes(launch_cover_us=50.0), device=torch.device("cuda", 0))
    with pytest.raises(RuntimeError, match=r"launch cover \(50 us\) could not be set up: cuModuleLoadData"):
        EvalContext.setup_cover(ctx)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------------------
# The cover kernel: shape, PTX, and on a GPU
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("sms", "threads", "grid", "block"),
                         [(132, 2048, 264, 1024), (84, 1536, 168, 768), (40, 1024, 40, 1024), (1, 2048, 2, 1024)])
def test_the_cover_fills_every_thread_slot_of_every_sm(sms, threads, grid, block):
    assert fill_shape(sms, threads) == (grid, block)
    assert grid * block == sms * threads and block <= 1024 and block % 32 == 0


def test_a_gpu_without_sms_is_refused():
    with pytest.raises(ConfigError, match="SMs"):
        fill_shape(0, 2048)


def test_threads_per_sm_from_torch_or_the_compute_capability():
    class Props:
        major, minor = 8, 9

    assert threads_per_sm(Props()) == 1536
    Props.major, Props.minor = 9, 0
    assert threads_per_sm(Props()) == 2048
    Props.max_threads_per_multi_processor = 1024  # type: ignore[attr-defined]
    assert threads_per_sm(Props()) == 1024


def test_the_cover_kernel_is_declared_and_its_ptx_ships_with_the_package():
    module = runtime.load_image(PTX_FILE, DECLARATION)
    assert module.names == (KERNEL, GATED_KERNEL)
    assert [p.kind for p in module[KERNEL].signature.params] == ["i64"]
    assert [p.kind for p in module[GATED_KERNEL].signature.params] == ["i64", "u64", "u32", "i64"]
    text = PTX_FILE.read_text()
    assert f".visible .entry {KERNEL}(" in text and "%clock64" in text
    assert f".visible .entry {GATED_KERNEL}(" in text and "ld.volatile.global.u32" in text  # the word, re-read
    with pytest.raises(ValueError, match="no extern"):
        runtime.load_image(PTX_FILE, "void not_a_kernel(int x);")


def _ptxas() -> str | None:
    return shutil.which("ptxas") or next((str(p) for p in [Path("/usr/local/cuda/bin/ptxas")] if p.exists()), None)


@pytest.mark.skipif(_ptxas() is None, reason="ptxas (CUDA toolkit) not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_the_cover_ptx_compiles_and_fits_two_1024_thread_blocks_per_sm(tmp_path, arch):
    proc = subprocess.run([_ptxas(), f"-arch={arch}", "-v", str(PTX_FILE), "-o", str(tmp_path / "cover.cubin")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    registers = [int(n) for n in re.findall(r"Used (\d+) registers", proc.stderr)]
    assert len(registers) == 2 and max(registers) <= 32  # each kernel: 2048 threads x 32 = the SM's 64K registers
    assert proc.stderr.count("0 bytes spill") == 2 * 2  # stores and loads, each kernel


needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@needs_gpu
def test_the_cover_lasts_as_long_as_asked_on_a_gpu():
    from cudagym.judge.harness.cover import LaunchCover

    device = torch.device("cuda", 0)
    cover = LaunchCover(device, 100.0)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for asked in (None, 500.0, 2000.0):  # its own length, then lengths a sized cover asks for
        lasted = []
        for _ in range(5):
            torch.cuda.synchronize()
            start.record()
            cover.launch(torch.cuda.current_stream(), asked)
            end.record()
            torch.cuda.synchronize()
            lasted.append(start.elapsed_time(end) * 1000.0)
        want = asked or 100.0
        print(f"cover of {want:g} us: grid {cover.grid} x {cover.block}, {cover.cycles_per_us:.0f} cycles/us, "
              f"lasted {lasted} us")
        # at least about as long as asked (shorter would time launch latency again); longer only costs GPU time
        # (the SM clock can sit below the calibration's between launches: 100 us lasted 137 us on an H200)
        assert 0.8 * want <= sorted(lasted)[2] <= 1.5 * want + 20.0


@pytest.mark.gpu
@needs_gpu
def test_side_stream_work_cannot_run_during_the_cover():
    from cudagym.judge.harness.cover import LaunchCover

    device = torch.device("cuda", 0)
    cover = LaunchCover(device, 200.0)
    x = torch.randn(1 << 20, device=device)
    side = torch.cuda.Stream(device)
    covered, side_done = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    main = torch.cuda.current_stream()
    for _ in range(3):
        torch.cuda.synchronize()
        begin = torch.cuda.Event(enable_timing=True)
        begin.record(main)
        cover.launch(main)
        covered.record(main)
        with torch.cuda.stream(side):  # a short kernel queued on another stream while the cover runs
            x.mul_(1.0001)
            side_done.record(side)
        torch.cuda.synchronize()
        # the side kernel (a few us of work, queued some 20-50 us into a 200 us cover) finished no earlier than
        # the cover: it could not start a block while every SM spun (20 us of slack for the cover's last blocks)
        side_ms, cover_ms = begin.elapsed_time(side_done), begin.elapsed_time(covered)
        print(f"cover ended at {cover_ms * 1000:.1f} us, the side kernel at {side_ms * 1000:.1f} us")
        assert side_ms >= cover_ms - 0.02


@pytest.mark.gpu
@needs_gpu
def test_the_gated_cover_holds_every_sm_until_its_word_is_written():
    # the split's audited forwards (cudagym.judge.split.signals, GATE): the cover spins on until the word reaches its
    # round, and work queued on another stream meanwhile cannot start; written by a stream memory operation on a
    # third stream (as the runner opens it), the cover ends and the side work runs
    import time

    from cudagym.judge.harness.cover import LaunchCover
    from cudagym.judge.split.signals import write_value

    device = torch.device("cuda", 0)
    cover = LaunchCover(device, 100.0)
    word = torch.zeros(64, dtype=torch.int32, device=device)
    x = torch.randn(1 << 20, device=device)
    main, side, opener = torch.cuda.current_stream(), torch.cuda.Stream(device), torch.cuda.Stream(device)
    for round_ in (1, 2, 3):
        torch.cuda.synchronize()
        cover.launch_gated(main, word.data_ptr(), round_)
        covered = torch.cuda.Event()
        covered.record(main)
        with torch.cuda.stream(side):
            x.mul_(1.0001)
            side_done = torch.cuda.Event()
            side_done.record(side)
        time.sleep(0.005)  # 50 times the cover's own length
        assert not covered.query() and not side_done.query(), "the cover ended before its word was written"
        write_value(opener.cuda_stream, word.data_ptr(), round_)
        t0 = time.perf_counter()
        torch.cuda.synchronize()
        print(f"round {round_}: cover and side work done {(time.perf_counter() - t0) * 1e6:.0f} us after the write")
        assert covered.query() and side_done.query()
    # a word already past its round (the judge opened it first) holds it no longer than its own length
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(main)
    cover.launch_gated(main, word.data_ptr(), 2)
    end.record(main)
    torch.cuda.synchronize()
    assert start.elapsed_time(end) * 1000.0 < 1000.0


def test_contenders_timed_in_blocks_get_a_hook_between_blocks_and_interleaved_ones_none(gpu):
    from cudagym.judge.harness.stats import StoppingRule

    calls: list[str] = []

    def make(name: str) -> Callable[[list], str]:
        def call(args: list) -> str:
            calls.append(name)
            return forward(gpu, host_us=5.0, kernel_us=60.0)()
        return call

    def loop(interleave: bool) -> timing.TimingRun:
        return timing.TimingLoop(
            contenders=[timing.Contender(n, make(n), baseline=n != "candidate") for n in ("candidate", "eager")],
            make_inputs=lambda r: [], timer=CudaEventTimer(torch.device("cuda", 0), FakeCover(gpu, 100.0)),
            flusher=timing.L2Flusher(torch.device("cpu"), 0, False), rule=StoppingRule(4, 4, 0.0, "median"),
            warmup_runs=2, warmup_s=0.0, interleave=interleave, budget_s=60.0, may_poison=lambda t: False,
            between_contenders=lambda: calls.append("release")).run()

    run = loop(interleave=False)
    # the candidate's 2 warm-ups and 4 timed calls, the release, then eager's: its warm-ups refill the cache
    assert calls == ["candidate"] * 6 + ["release"] + ["eager"] * 6
    assert len(run.samples["eager"].time_us) == 4
    calls.clear()
    loop(interleave=True)
    assert "release" not in calls and calls[:2] == ["candidate", "eager"]


def _hiccup_loop(gpu: FakeGpu, timed_host: Callable[[int], float], *, interleave: bool,
                 retake_limit: int) -> tuple[timing.TimingRun, list[int]]:
    """Candidate and eager on the fake GPU, one 60 us kernel each; eager's warm-up calls spend 40 us on the host
    (its cover is sized to 100 us), its timed calls ``timed_host(call number)``. Also: the spot check's rounds."""
    from cudagym.judge.harness.stats import StoppingRule

    eager_calls = {"warm": 0, "timed": 0}
    checked: list[int] = []

    def eager(args: list) -> str:
        if eager_calls["warm"] < 3:
            eager_calls["warm"] += 1
            host = 40.0
        else:
            host = timed_host(eager_calls["timed"])
            eager_calls["timed"] += 1
        return forward(gpu, host_us=host, kernel_us=60.0)()

    class Hook(timing.NoHook):
        def end(self, index: int) -> None:
            checked.append(index)

    run = timing.TimingLoop(
        contenders=[timing.Contender("candidate", lambda args: forward(gpu, 10.0, 60.0)()),
                    timing.Contender("eager", eager, baseline=True)],
        make_inputs=lambda r: [], timer=CudaEventTimer(torch.device("cuda", 0), FakeCover(gpu, 100.0)),
        flusher=timing.L2Flusher(torch.device("cpu"), 0, False), rule=StoppingRule(5, 5, 0.0, "mean"),
        warmup_runs=3, warmup_s=0.0, interleave=interleave, budget_s=60.0, may_poison=lambda t: False,
        on_round=Hook(), cover_sizing=timing.CoverSizing(100.0, 10_000.0), retake_limit=retake_limit).run()
    return run, checked


@pytest.mark.parametrize("interleave", [False, True])
def test_a_baseline_round_whose_host_outlasted_its_cover_is_retaken(gpu, interleave):
    """Eager's second and fourth timed calls have a 3 ms host hiccup: without retakes two of its five samples hold
    2.9 ms of host time (a mean then credits any candidate); with them those rounds are taken again, spot-checked
    all the same, and counted."""
    hiccup = lambda n: 3_000.0 if n in (1, 3) else 40.0  # noqa: E731
    kept, _ = _hiccup_loop(gpu, hiccup, interleave=interleave, retake_limit=0)
    assert kept.cover_us == {"eager": 100.0} and kept.retaken == {}
    assert sorted(kept.samples["eager"].time_us) == pytest.approx([60.0] * 3 + [2_960.0] * 2)
    run, checked = _hiccup_loop(gpu, hiccup, interleave=interleave, retake_limit=100)
    assert run.samples["eager"].time_us == pytest.approx([60.0] * 5)
    assert run.retaken == {"eager": 2} and run.rounds == 7 and len(checked) == (7 if interleave else 5 + 7)
    # interleaved, a retaken round drops the candidate's call of that round too: the rounds stay paired
    assert len(run.samples["candidate"].time_us) == 5
    assert run.samples["candidate"].time_us == pytest.approx([60.0] * 5)


def test_retakes_stop_at_the_limit_and_the_rest_is_kept_as_measured(gpu):
    run, _ = _hiccup_loop(gpu, lambda n: 3_000.0, interleave=False, retake_limit=3)
    assert run.retaken == {"eager": 3} and run.samples["eager"].time_us == pytest.approx([2_960.0] * 5)


def test_a_baseline_that_outlasts_the_longest_cover_every_time_is_never_retaken(gpu):
    """Its host time is in every sample by the protocol's own account (named in the result), not a hiccup."""
    from cudagym.judge.harness.stats import StoppingRule

    loop = timing.TimingLoop(
        contenders=[timing.Contender("candidate", lambda args: forward(gpu, 10.0, 60.0)()),
                    timing.Contender("eager", lambda args: forward(gpu, 3_000.0, 60.0)(), baseline=True)],
        make_inputs=lambda r: [], timer=CudaEventTimer(torch.device("cuda", 0), FakeCover(gpu, 100.0)),
        flusher=timing.L2Flusher(torch.device("cpu"), 0, False), rule=StoppingRule(5, 5, 0.0, "mean"),
        warmup_runs=3, warmup_s=0.0, interleave=False, budget_s=60.0, may_poison=lambda t: False,
        cover_sizing=timing.CoverSizing(100.0, 2_000.0), retake_limit=100)
    run = loop.run()
    assert run.outlasted_us == pytest.approx({"eager": 3_000.0}) and run.retaken == {}
    assert run.samples["eager"].time_us == pytest.approx([1_060.0] * 5)
