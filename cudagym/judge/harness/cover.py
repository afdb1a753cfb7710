"""The launch cover: GPU work queued ahead of the start event, so the host's first-launch latency is not timed.

With CUDA events on an idle GPU, the start event fires the moment it is recorded and the first kernel of
``forward`` starts only once the host has launched it: Python, the module call and argument checks (a few to
tens of microseconds, varying with the host's load) are timed as GPU time. The cover is a spin kernel queued
just before the start event. It fills every SM, every thread slot of every SM resident at once (two blocks
of 1024 threads on an SM that holds 2048), for a calibrated time, so by the time the start event fires the
first kernel is already queued behind it. While it runs no block of any other kernel, from any stream, can
start: work a candidate queues on a side stream waits for the cover like its current-stream work, and lands
inside the timed region or after it, where the ``side_stream`` guard sees it. Copy-engine transfers
(``cudaMemcpyAsync`` on another stream) are not held back.

Its length is the protocol's ``launch_cover_us``, or for a baseline under ``launch_cover_max_us`` a length
sized to that baseline's host time (:class:`~cudagym.judge.harness.timing.CoverSizing`), passed per launch.

The kernel is hand-written PTX (``cover_spin.ptx``, loaded through :mod:`cudagym.runtime`): the driver
compiles it, so no compiler is needed on the GPU worker.
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path
from typing import Any

import torch

from cudagym.errors import ConfigError
from cudagym.judge.harness.integrity import PRISTINE

PTX_FILE = Path(__file__).with_name("cover_spin.ptx")
KERNEL, GATED_KERNEL = "cudagym_cover_spin", "cudagym_cover_gated"
DECLARATION = (f'extern "C" __global__ void {KERNEL}(long long cycles) {{}}\n'
               f'extern "C" __global__ void {GATED_KERNEL}(long long cycles, unsigned long long gate, '
               'unsigned int round, long long max_cycles) {}')
GATE_MAX_US = 2_000_000.0  # the longest a gated cover waits for its word (its opener is the judge: it never waits so)
MAX_BLOCK = 1024
# Resident threads per SM where torch does not report it: compute capability -> threads (else 2048)
_THREADS_PER_SM = {(7, 5): 1024, (8, 6): 1536, (8, 7): 1536, (8, 9): 1536, (12, 0): 1536, (12, 1): 1536}
CALIBRATION_CYCLES = 1_000_000


def fill_shape(sm_count: int, threads_per_sm: int) -> tuple[int, int]:
    """(grid, block) that occupies every thread slot of every SM at once, blocks of at most 1024 threads."""
    if sm_count < 1 or threads_per_sm < 32:
        raise ConfigError(f"expected a GPU with SMs and thread slots, got {sm_count} SMs x {threads_per_sm}")
    per_sm = -(-threads_per_sm // MAX_BLOCK)
    return sm_count * per_sm, threads_per_sm // per_sm


def threads_per_sm(props: Any) -> int:
    """Resident threads per SM of a device (torch's figure, else by compute capability)."""
    reported = getattr(props, "max_threads_per_multi_processor", 0)
    return int(reported) if reported else _THREADS_PER_SM.get((props.major, props.minor), 2048)


@functools.lru_cache(maxsize=1)
def _module() -> Any:
    from cudagym import runtime

    return runtime.load_image(PTX_FILE, DECLARATION)


def spin_kernel() -> Any:
    """The spin kernel (one module per process; the driver loads it into each context on first launch)."""
    return _module()[KERNEL]


def gated_kernel() -> Any:
    """The spin kernel that also waits for a word (:meth:`LaunchCover.launch_gated`)."""
    return _module()[GATED_KERNEL]


class LaunchCover:
    """A calibrated spin that fills ``device`` for about ``cover_us`` microseconds when launched.

    Calibration and launches use the harness's pristine event and synchronize functions.
    """

    def __init__(self, device: torch.device, cover_us: float) -> None:
        props = torch.cuda.get_device_properties(device)
        self.grid, self.block = fill_shape(props.multi_processor_count, threads_per_sm(props))
        self._kernel = spin_kernel()
        self._gated = gated_kernel()  # its function loaded now, with nothing waiting (lazy loading)
        self.cover_us = cover_us
        self.cycles_per_us = self._calibrate(device)

    def launch(self, stream: Any, cover_us: float | None = None) -> None:
        """Queue the cover on ``stream`` (asynchronous), for ``cover_us`` (default: the length it was made with)."""
        self._kernel(grid=self.grid, block=self.block, args=(self._cycles(cover_us),), stream=stream)

    def launch_gated(self, stream: Any, address: int, round_: int, cover_us: float | None = None) -> None:
        """Queue on ``stream`` a cover that spins its length, then on until the word at ``address`` reaches ``round_``.

        The 32-bit word is compared cyclically; the spin lasts :data:`GATE_MAX_US` at most. While it spins every SM
        is held: work queued on any stream meanwhile starts only once the word is written (the split's audited
        forwards: the word is written once the forward has returned and the side-stream check has queued its reads,
        :mod:`cudagym.judge.split.signals`).
        """
        cycles = self._cycles(cover_us)
        most = max(cycles, int(GATE_MAX_US * self.cycles_per_us))
        self._gated(grid=self.grid, block=self.block, args=(cycles, address, round_ & 0xFFFFFFFF, most),
                    stream=stream)

    def _cycles(self, cover_us: float | None) -> int:
        """The spin's length in clock cycles (at least one) for ``cover_us`` (default: the length it was made with)."""
        return max(1, int((self.cover_us if cover_us is None else cover_us) * self.cycles_per_us))

    def _calibrate(self, device: torch.device) -> float:
        start, end = PRISTINE.event(enable_timing=True), PRISTINE.event(enable_timing=True)
        stream = PRISTINE.current_stream(device)
        per_us = 0.0
        for _ in range(2):  # the first spin may run at an idle clock
            PRISTINE.sync(device)
            PRISTINE.event_record(start, stream)
            self._kernel(grid=self.grid, block=self.block, args=(CALIBRATION_CYCLES,), stream=stream)
            PRISTINE.event_record(end, stream)
            PRISTINE.sync(device)
            per_us = CALIBRATION_CYCLES / max(PRISTINE.event_elapsed_time(start, end) * 1000.0, 1e-3)
        return per_us


class OwnGate:
    """An audited forward's gate that its own process opens: the judge with the candidate in its process.

    The split's runner gates its audited forwards on a word the trusted side can write too (``_AuditGate`` in
    :mod:`cudagym.judge.split.runner`); with no runner, :meth:`close` queues the launch cover spinning its length and
    on until :meth:`open` writes this gate's own word, on a stream that waits for nothing. So work a forward queues
    on another stream while its caller's stream is busy cannot start before the side-stream check's reads are
    queued (the cover-aware hack: without the gate, this process's check did not name it on the H100, session 48).
    A forward that waits for the GPU inside would wait for its own gate: as the split's judge does, a timer opens
    it after ``arm_wait_s`` (``late_wait_s`` once one was late) and counts the call late (:attr:`late_audits`). One that
    holds the interpreter while it waits, or loads a kernel module under the gate (lazy loading may wait for the
    whole context), is held at most :data:`GATE_MAX_US`.
    """

    def __init__(self, device: torch.device, cover: LaunchCover, arm_wait_s: float, late_wait_s: float) -> None:
        # the split's judge's names (RunnerLink): the result's counts and note read either the same way
        self.cover, self.arm_wait_s, self.late_wait_s = cover, arm_wait_s, late_wait_s
        self.word = torch.zeros(1, dtype=torch.int32, device=device)
        self.side = torch.cuda.Stream(device)
        self.round = 0
        self.late_audits = [0, 0]  # late (opened by the timer), gated
        self._opened = 0  # the latest round written
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        torch.cuda.synchronize(device)  # the word is zero before any cover reads it

    @property
    def covers(self) -> bool:
        """:meth:`close` queues the launch cover (the forward then queues none of its own)."""
        return True

    def close(self, stream: Any) -> None:
        """Queue on ``stream`` the cover, spinning until :meth:`open`, the timer, or :data:`GATE_MAX_US`."""
        self.round += 1
        self.late_audits[1] += 1
        self.cover.launch_gated(stream, self.word.data_ptr(), self.round)
        wait_s = self.late_wait_s if self.late_audits[0] else self.arm_wait_s
        self._timer = threading.Timer(wait_s, self._write_late, args=(self.round,))
        self._timer.daemon = True
        self._timer.start()

    def open(self) -> None:
        """Write the word the cover waits for, on the gate's own stream."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._write(self.round, False)

    def _write_late(self, round_: int) -> None:
        """The timer's write; one that fails (a context the candidate broke) is left to :meth:`open` and the limit."""
        try:
            self._write(round_, True)
        except Exception:  # noqa: BLE001 - a thread of its own: nothing above it to tell, open() raises it again
            return

    def _write(self, round_: int, late: bool) -> None:
        from cudagym.judge.split.signals import write_value

        with self._lock:
            if self._opened == round_:
                return
            write_value(self.side.cuda_stream, self.word.data_ptr(), round_)
            self._opened = round_
            if late:
                self.late_audits[0] += 1
