"""The CUDA-events timer's launch cover, against a simulated GPU timeline (no GPU needed)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import torch

from cudagym.judge.harness import timing
from cudagym.judge.harness.integrity import _Pristine
from cudagym.judge.harness.timing import CudaEventTimer, HostTimer, make_timer


class FakeGpu:
    """One stream: events and kernels start no earlier than the host queued them and run in order."""

    def __init__(self, cycles_per_us: float = 1980.0) -> None:
        self.host_us = 0.0
        self.gpu_us = 0.0  # when the stream runs dry
        self.cycles_per_us = cycles_per_us

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
            current_stream=lambda device=None: None, spin=lambda cycles: gpu.launch(cycles / gpu.cycles_per_us))


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
    timer = CudaEventTimer(torch.device("cuda", 0), launch_cover_us=0.0)
    m = timer.measure(forward(gpu, host_us=20.0, kernel_us=60.0))
    assert m.outputs == "out" and m.time_us == pytest.approx(80.0) and m.wall_us == pytest.approx(80.0)


@pytest.mark.parametrize("host_us", [0.0, 7.0, 20.0, 95.0])
def test_a_cover_takes_host_latency_below_it_out_of_the_sample(gpu, host_us):
    timer = CudaEventTimer(torch.device("cuda", 0), launch_cover_us=100.0)
    m = timer.measure(forward(gpu, host_us=host_us, kernel_us=60.0))
    assert m.time_us == pytest.approx(60.0, abs=0.1)  # the same sample whatever the host's jitter
    assert m.wall_us == pytest.approx(60.0, abs=0.1)  # the spin is not counted as escaped host time either


def test_host_work_beyond_the_cover_is_still_timed(gpu):
    timer = CudaEventTimer(torch.device("cuda", 0), launch_cover_us=100.0)
    m = timer.measure(forward(gpu, host_us=1100.0, kernel_us=60.0))  # 1 ms of host work before the kernel
    assert m.time_us == pytest.approx(1060.0, abs=0.5)


def test_the_cover_is_calibrated_to_the_gpus_clock(monkeypatch):
    for cycles_per_us in (1000.0, 1980.0):
        fake = FakeGpu(cycles_per_us)
        monkeypatch.setattr(timing, "PRISTINE", fake.pristine())
        timer = CudaEventTimer(torch.device("cuda", 0), launch_cover_us=100.0)
        before = fake.gpu_us
        timer.measure(forward(fake, host_us=0.0, kernel_us=0.0))
        assert fake.gpu_us - before == pytest.approx(100.0, rel=0.01)


def test_no_spin_kernel_in_this_torch_means_no_cover(monkeypatch):
    fake = FakeGpu()
    monkeypatch.setattr(timing, "PRISTINE", dataclasses.replace(fake.pristine(), spin=None))
    timer = CudaEventTimer(torch.device("cuda", 0), launch_cover_us=100.0)
    assert timer.launch_cover_us == 0.0
    assert timer.measure(forward(fake, host_us=20.0, kernel_us=60.0)).time_us == pytest.approx(80.0)


def test_make_timer_passes_the_cover_to_the_event_timer_only(gpu):
    timer = make_timer("cuda_events", torch.device("cuda", 0), 50.0)
    assert isinstance(timer, CudaEventTimer) and timer.launch_cover_us == 50.0
    assert isinstance(make_timer("cuda_events", torch.device("cpu"), 50.0), HostTimer)
