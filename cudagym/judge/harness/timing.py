"""Timing of candidate and baselines: timers with one signature, the L2 flush, and the interleaved loop.

One timed call, with CUDA events (the default protocol)::

    copy the round's inputs; flush L2   # a buffer twice the L2's size is overwritten: no call starts warm
    synchronize the device         # nothing queued earlier is counted
    host clock t0
    [record covered; launch cover]  # launch_cover_us > 0 only: every SM busy while forward's kernels are
                                    # launched
    record start on the current stream
    outputs = forward(inputs)      # host clock around it: the enqueue time
    record end on the current stream; synchronize the DEVICE   # every stream: side-stream work included
    host clock t1
    time = elapsed(start, end); wall = t1 - t0 [- elapsed(covered, start)]

The event time is the measurement. Without the cover (``launch_cover_us=0``, KernelBench's way) the start
event fires on an idle GPU the moment it is recorded, so the host's latency until the first kernel is launched
(Python, the module call, argument checks: a few to tens of microseconds that vary with the host's load) is
timed as GPU time; with it, the first kernel is already queued when the start event fires. With
``launch_cover_max_us`` the baselines' covers are sized (:class:`CoverSizing`) to outlast their host's whole
enqueue, so eager's and torch.compile's Python overhead leaves their samples: they are timed at their device
work. The candidate's cover stays ``launch_cover_us``: host work of its own beyond that leaves the GPU idle
inside the timed region and is timed. (A cover sized to the candidate would hide host work of the candidate's
choosing: the inputs are readable during the spin, since a copy-engine transfer on a side stream is not held
back by it, so the candidate could pull them to the host and compute there unseen.) The host wall
time brackets the same region and includes work that escaped the current stream (a side stream the
candidate did not join, a kernel launched late): the ``side_stream`` guard compares the two. The timer
uses function references captured before any candidate code ran
(:data:`~cudagym.judge.harness.integrity.PRISTINE`).

The loop draws a fresh input set for every round (inputs created on the GPU from a new seed), so no two
timed calls see the same data: a cache keyed on pointers, shapes or contents cannot hit. Within a round
the candidate runs first, then the baselines on their own copies of the same inputs; every output is
overwritten with the poison pattern before it is freed (a baseline's right after its call and the spot
check, the candidate's at the end of the round), so no contender finds another's results in recycled memory
and at most two contenders' outputs are alive at once. Rounds continue until the stopping rule holds for
every contender.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from cudagym.errors import ConfigError
from cudagym.judge.harness.inputs import clone_tree, poison_tree_, tensors_in
from cudagym.judge.harness.integrity import PRISTINE
from cudagym.judge.harness.stats import StoppingRule, median
from cudagym.judge.split.trace import trace, tracing

TRACE_EVERY = 50  # a traced loop's line every this many timed rounds (cudagym.judge.split.trace)

MAX_WARMUP_ROUNDS = 10_000  # a time-based warm-up of a microsecond kernel stops here


class Cover(Protocol):
    """GPU work queued before the start event (:class:`~cudagym.judge.harness.cover.LaunchCover`)."""

    def launch(self, stream: Any, cover_us: float | None = None) -> None:
        """Queue it on ``stream``, ``cover_us`` long (default: its own length)."""


class Bracket(Protocol):
    """The runner's half of a call the trusted process brackets on the GPU (:mod:`cudagym.judge.split.signals`)."""

    def open(self, stream: Any) -> None:
        """Queue, on ``stream``, the wait for the trusted side's go (before anything of the call)."""

    def close(self, outputs: Any, stream: Any) -> None:
        """Queue the outputs' delivery and the done signal after the call (nothing may wait on the host)."""


@dataclass
class Measurement:
    """One timed call, in microseconds.

    Attributes:
        outputs: What the call returned.
        time_us: The timer's time (the measurement).
        wall_us: Host wall time around the call (less the cover's time).
        enqueue_us: Host time in the call itself, until it returned: the launches, not the wait.
        wait_us: Host time blocked in the closing device synchronize, after everything was queued.
        closing_us: A bracketed call's delivery on the GPU's clock: from its end event to its done.
        closing_host_us: The host time spent queueing that delivery.
    """

    outputs: Any
    time_us: float
    wall_us: float
    enqueue_us: float = 0.0
    wait_us: float = 0.0
    closing_us: float = 0.0
    closing_host_us: float = 0.0


class Timer(abc.ABC):
    """Times one call of a forward function; every timer has this signature."""

    name: str = ""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    @abc.abstractmethod
    def measure(self, call: Callable[[], Any], cover_us: float | None = None) -> Measurement:
        """Run ``call`` once and time it (``cover_us``: the launch cover's length, where the timer has one)."""


class CudaEventTimer(Timer):
    """CUDA events on the current stream around the call, then a device-wide synchronize.

    Args:
        device: The GPU.
        cover: Launched before the start event (see the module docstring and
            :mod:`~cudagym.judge.harness.cover`); ``None`` for none.
    """

    name = "cuda_events"

    def __init__(self, device: torch.device, cover: Cover | None = None) -> None:
        super().__init__(device)
        self._start = PRISTINE.event(enable_timing=True)
        self._end = PRISTINE.event(enable_timing=True)
        self._covered = PRISTINE.event(enable_timing=True)
        self._closed = PRISTINE.event(enable_timing=True)
        self.cover = cover

    def measure(self, call: Callable[[], Any], cover_us: float | None = None,
                bracket: Bracket | None = None) -> Measurement:
        """Time ``call`` with events; see the module docstring for the exact sequence.

        With a ``bracket`` (a runner's call the trusted process times on the GPU) the stream first waits for
        the trusted side's go and, after the end event, delivers the outputs and signals done; no cover then:
        the whole call is queued before the go, so the GPU never waits for this host inside it. The wall
        time leaves out the wait and the delivery.
        """
        stream = PRISTINE.current_stream(self.device)
        PRISTINE.sync(self.device)
        t0 = PRISTINE.perf_counter()
        if bracket is not None:
            PRISTINE.event_record(self._covered, stream)  # fires at once: the wait for the go follows it
            bracket.open(stream)
        elif self.cover is not None:
            PRISTINE.event_record(self._covered, stream)
            self.cover.launch(stream, cover_us)
        PRISTINE.event_record(self._start, stream)
        c0 = PRISTINE.perf_counter()
        outputs = call()
        c1 = PRISTINE.perf_counter()
        PRISTINE.event_record(self._end, stream)  # the stream captured before the call, whatever it set
        if bracket is not None:
            bracket.close(outputs, stream)
            PRISTINE.event_record(self._closed, stream)
        queued = PRISTINE.perf_counter()
        closing_ms = 0.0
        PRISTINE.sync(self.device)  # device-wide: work on every stream has finished
        t1 = PRISTINE.perf_counter()
        elapsed_ms = PRISTINE.event_elapsed_time(self._start, self._end)
        hidden_ms = PRISTINE.event_elapsed_time(self._covered, self._start) \
            if bracket is not None or self.cover is not None else 0.0
        if bracket is not None:
            closing_ms = PRISTINE.event_elapsed_time(self._end, self._closed)
            hidden_ms += closing_ms
        return Measurement(outputs, elapsed_ms * 1000.0, (t1 - t0) * 1e6 - hidden_ms * 1000.0, (c1 - c0) * 1e6,
                           (t1 - queued) * 1e6, closing_ms * 1000.0, (queued - c1) * 1e6)


class ProfilerTimer(Timer):
    """Sum of the device time of every GPU kernel and memory operation of the call (the CUDA Agent method).

    This excludes launch overhead and idle gaps; it counts side-stream kernels too.
    """

    name = "profiler"

    def measure(self, call: Callable[[], Any], cover_us: float | None = None) -> Measurement:
        """Profile ``call`` alone and sum its device activity (no cover: host latency is not in the sum)."""
        from cudagym.judge.harness.profiling import device_activity_us, profiled

        PRISTINE.sync(self.device)
        t0 = PRISTINE.perf_counter()
        with profiled(self.device) as prof:
            c0 = PRISTINE.perf_counter()
            outputs = call()
            c1 = PRISTINE.perf_counter()
            PRISTINE.sync(self.device)
            c2 = PRISTINE.perf_counter()
        t1 = PRISTINE.perf_counter()
        return Measurement(outputs, device_activity_us(prof), (t1 - t0) * 1e6, (c1 - c0) * 1e6, (c2 - c1) * 1e6)


class HostTimer(Timer):
    """Host wall clock around the call (the CPU test path: there is no device to synchronize)."""

    name = "host"

    def measure(self, call: Callable[[], Any], cover_us: float | None = None) -> Measurement:
        """Time ``call`` with the captured ``perf_counter``."""
        t0 = PRISTINE.perf_counter()
        outputs = call()
        elapsed = (PRISTINE.perf_counter() - t0) * 1e6
        return Measurement(outputs, elapsed, elapsed, elapsed)


TIMERS: dict[str, type[Timer]] = {t.name: t for t in (CudaEventTimer, ProfilerTimer, HostTimer)}


def make_timer(method: str, device: torch.device, cover: Cover | None = None) -> Timer:
    """The timer for a protocol's ``timing`` on ``device`` (the host clock on a CPU device).

    Args:
        method: ``cuda_events`` or ``profiler``.
        device: Where the calls run.
        cover: The protocol's launch cover (``cuda_events`` only).

    Raises:
        ConfigError: ``method`` names no timer.
    """
    if method not in TIMERS:
        raise ConfigError(f"unknown timing method {method!r}; expected one of {sorted(TIMERS)}")
    if device.type != "cuda":
        return HostTimer(device)
    if method == CudaEventTimer.name:
        return CudaEventTimer(device, cover)
    return TIMERS[method](device)


class L2Flusher:
    """Overwrites a buffer twice the L2's size, so no timed call finds its data in the L2 cache."""

    def __init__(self, device: torch.device, l2_bytes: int, enabled: bool) -> None:
        self.enabled = enabled and device.type == "cuda" and l2_bytes > 0
        self.buffer = torch.empty(2 * l2_bytes, dtype=torch.uint8, device=device) if self.enabled else None
        self._value = 0

    @property
    def nbytes(self) -> int:
        """Device memory the buffer holds (0 where flushing is off)."""
        return self.buffer.numel() if self.buffer is not None else 0

    def flush(self) -> None:
        """Write the whole buffer (a different byte each time); asynchronous on the current stream."""
        if self.buffer is not None:
            self._value = (self._value + 1) % 251
            self.buffer.fill_(self._value)


@dataclass(frozen=True)
class Contender:
    """One implementation being timed: ``candidate``, or a baseline (``eager``, ``compiled``).

    Baselines are trusted code: their launch covers may be sized to hide all of their host overhead.
    """

    name: str
    forward: Callable[[list[Any]], Any]
    baseline: bool = False
    measure: Callable[[list[Any], float | None], Measurement] | None = None  # timed elsewhere (the runner)
    # The contender copies the inputs itself (the runner's arena) and only reads the set it is handed; this
    # returns its copy after the call. None: the loop hands it a copy of its own.
    seen: Callable[[], list[Any]] | None = None


@dataclass
class Samples:
    """Timed calls of one contender."""

    time_us: list[float] = field(default_factory=list)
    wall_us: list[float] = field(default_factory=list)
    enqueue_us: list[float] = field(default_factory=list)

    def add(self, measured: Measurement) -> None:
        """Record one timed call."""
        self.time_us.append(measured.time_us)
        self.wall_us.append(measured.wall_us)
        self.enqueue_us.append(measured.enqueue_us)


@dataclass
class TimingRun:
    """Everything the loop measured.

    Attributes:
        samples: Each contender's timed calls.
        rounds: Timed rounds.
        stop_reason: Why timing stopped.
        cover_us: The baselines' sized launch covers.
        outlasted_us: The baselines whose host enqueue (its settled quantile, here) outlasted the longest
            cover, so their samples include host time.
        retaken: Per baseline, the timed rounds taken again because its host outlasted its cover in them
            (:attr:`TimingLoop.retake_limit`); their samples are not in ``samples``.
    """

    samples: dict[str, Samples]
    rounds: int = 0
    stop_reason: str = ""
    cover_us: dict[str, float] = field(default_factory=dict)
    outlasted_us: dict[str, float] = field(default_factory=dict)
    retaken: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class CoverSizing:
    """How long a baseline's launch cover lasts.

    ``factor`` times the ``quantile`` of its host enqueue time over the warm-up calls after the first (which
    compiles, loads and autotunes), within [``min_us``, ``max_us``].

    A cover as long as the host takes to queue the whole forward means the GPU never waits for the host inside
    the timed region: the events then time the forward's device work and the gaps its own dependencies leave,
    whatever its Python overhead (torch.compile's default mode spends 100-300 us of host time per call, more
    than many kernels take). Only baselines get one: see the module docstring.
    """

    min_us: float
    max_us: float
    factor: float = 1.5
    quantile: float = 0.9

    def settled_enqueue_us(self, enqueue_us: list[float]) -> float:
        """The ``quantile`` of the warm-up calls' host times after the first (0 without any)."""
        settled = sorted(enqueue_us[1:] or enqueue_us)
        if not settled:
            return 0.0
        return settled[min(len(settled) - 1, max(0, math.ceil(self.quantile * len(settled)) - 1))]

    def size(self, enqueue_us: list[float]) -> float:
        """The cover for a contender whose warm-up calls took these host times to return."""
        if not enqueue_us:
            return self.min_us
        return min(self.max_us, max(self.min_us, self.factor * self.settled_enqueue_us(enqueue_us)))

    def outlasted(self, enqueue_us: list[float]) -> bool:
        """Whether the contender's host takes longer than the longest cover: host time then enters its samples."""
        return self.settled_enqueue_us(enqueue_us) > self.max_us


class RoundHook(Protocol):
    """The spot check's view of a timed round (the runner's :class:`~cudagym.judge.harness.runner.SpotCheck`).

    ``call`` runs after each timed call, before that call's inputs are dropped and (for every contender but
    the first) its outputs poisoned; ``end`` runs once the round's calls are done, before the first
    contender's outputs are poisoned, unless ``done_with_first`` said earlier that they were no longer needed
    (they are poisoned then, before the next contender's call). Warm-up rounds call none of them.
    """

    def call(self, index: int, name: str, inputs: list[Any], args: list[Any], outputs: Any) -> None:
        """Contender ``name`` of round ``index`` returned ``outputs`` for its copy ``args`` of ``inputs``."""

    def done_with_first(self, index: int) -> bool:
        """Whether round ``index`` needs its first contender's outputs no more (after a ``call``)."""

    def end(self, index: int) -> None:
        """Round ``index`` is over: drop anything kept from it."""


class NoHook:
    """A round hook that checks nothing."""

    def call(self, index: int, name: str, inputs: list[Any], args: list[Any], outputs: Any) -> None:
        """Nothing."""

    def done_with_first(self, index: int) -> bool:
        """Never asked for them: done."""
        return True

    def end(self, index: int) -> None:
        """Nothing."""


def _trace_rounds(group: list[Contender], run: TimingRun, done: int, warm_ups: int, stop: str) -> None:
    """A trace line (:mod:`cudagym.judge.split.trace`): the timed rounds so far, each contender's median, the stop."""
    medians = {c.name: median(run.samples[c.name].time_us) if run.samples[c.name].time_us else None for c in group}
    trace("rounds", done=done, warm_ups=warm_ups, medians_us=medians, stop=stop)


@dataclass
class TimingLoop:
    """The timing schedule of one evaluation.

    Attributes:
        contenders: In call order within a round; the candidate first.
        make_inputs: A fresh input set for a round number (negative numbers are warm-up rounds).
        timer: How one call is timed.
        flusher: The L2 flush before every call.
        rule: When to stop.
        warmup_runs: Untimed rounds first (torch.compile compiles in the first).
        warmup_s: ... and more untimed rounds until this much wall time has passed (at most 10,000).
        interleave: Round-robin over contenders within each round; else each contender's rounds in a block.
        budget_s: Stop timing after this many seconds of wall time, whatever the rule says.
        may_poison: Whether an output tensor may be overwritten after its round (not a model's weights).
        on_round: The spot-check hook.
        cover_sizing: Size each baseline's launch cover from its warm-up (the timer needs a cover); ``None``
            keeps the cover's own length.
        baselines_share_inputs: The baselines run on the round's set itself, not a copy each (true when the
            reference does not write to its inputs: it then leaves the set as it found it).
        between_contenders: Called before each contender's block after the first (not interleaved), before its
            warm-up: where the harness gives the last one's cached blocks back.
        retake_limit: With sized covers, a timed round in which a baseline's host took longer to return than its
            cover lasted is dropped and taken again, up to this many rounds per block (0: never). A baseline
            whose host outlasts the longest cover (``TimingRun.outlasted_us``) is never the reason.
    """

    contenders: list[Contender]
    make_inputs: Callable[[int], list[Any]]
    timer: Timer
    flusher: L2Flusher
    rule: StoppingRule
    warmup_runs: int
    warmup_s: float
    interleave: bool
    budget_s: float
    may_poison: Callable[[torch.Tensor], bool]
    on_round: RoundHook = field(default_factory=NoHook)
    cover_sizing: CoverSizing | None = None
    baselines_share_inputs: bool = False
    between_contenders: Callable[[], None] | None = None
    retake_limit: int = 0

    def run(self) -> TimingRun:
        """Warm up, then time rounds until the rule holds for every contender (or the cap or budget)."""
        run = TimingRun({c.name: Samples() for c in self.contenders})
        deadline = time.monotonic() + self.budget_s
        groups = [self.contenders] if self.interleave else [[c] for c in self.contenders]
        for number, group in enumerate(groups):
            if number and self.between_contenders is not None:
                self.between_contenders()
            warmup = TimingRun({c.name: Samples() for c in group})
            warm, warm_until = 0, time.monotonic() + self.warmup_s
            while warm < self.warmup_runs or (time.monotonic() < warm_until and warm < MAX_WARMUP_ROUNDS):
                warm += 1
                self._round(group, -warm, warmup, timed=False)
            if self.cover_sizing is not None:
                for c in group:
                    if c.baseline:
                        enqueue = warmup.samples[c.name].enqueue_us
                        run.cover_us[c.name] = self.cover_sizing.size(enqueue)
                        if self.cover_sizing.outlasted(enqueue):
                            run.outlasted_us[c.name] = self.cover_sizing.settled_enqueue_us(enqueue)
            round_index = retakes = 0
            while True:
                kept = self._round(group, round_index, run, timed=True, may_retake=retakes < self.retake_limit)
                retakes += not kept
                round_index += 1
                reason = self._stop_reason(group, run, deadline)
                if tracing() and (reason or round_index % TRACE_EVERY == 0):  # how far the loop got, and why it ended
                    _trace_rounds(group, run, round_index, warm, reason)
                if reason:
                    run.stop_reason = reason
                    break
            run.rounds = max(run.rounds, round_index)
        return run

    def _round(self, group: list[Contender], index: int, into: TimingRun, *, timed: bool,
               may_retake: bool = False) -> bool:
        """One call per contender on one input set, recorded in ``into``; whether the round was kept.

        A warm-up's run has no sized covers. With ``may_retake``, a round in which a baseline's host outlasted
        its sized cover is not kept (:attr:`TimingLoop.retake_limit`): its spot checks ran, its samples go.

        Bounded memory: besides the round's inputs, only the first contender's outputs (in a timed round, until
        the hook is done with them) and the current contender's copy and outputs are alive; each later
        contender's are poisoned right after its call. A
        contender that copies the inputs itself (``seen``: the split's runner) gets the round's set, and so do
        the baselines where they leave it unchanged (``baselines_share_inputs``).
        """
        inputs = self.make_inputs(index)
        held: Any = None
        taken: list[tuple[str, Measurement]] = []
        leaked: list[str] = []
        for position, contender in enumerate(group):
            shared = contender.seen is not None or (contender.baseline and self.baselines_share_inputs)
            args = inputs if shared else clone_tree(inputs)
            self.flusher.flush()
            cover_us = into.cover_us.get(contender.name)
            measured = (contender.measure(args, cover_us) if contender.measure is not None
                        else self.timer.measure(functools.partial(contender.forward, args), cover_us))
            taken.append((contender.name, dataclasses.replace(measured, outputs=None)))
            if (contender.baseline and cover_us is not None and contender.name not in into.outlasted_us
                    and measured.enqueue_us > cover_us):
                leaked.append(contender.name)
            if timed:
                seen = contender.seen() if contender.seen is not None else args
                self.on_round.call(index, contender.name, inputs, seen, measured.outputs)
                del seen
            del args
            if position == 0 and timed:  # a warm-up round compares nothing: its outputs go at once
                held = measured.outputs
            else:
                _poison_outputs(measured.outputs, self.may_poison)
                if held is not None and self.on_round.done_with_first(index):  # held: a timed round
                    # compared already: not held through the next contender's call (its peak is its own)
                    _poison_outputs(held, self.may_poison)
                    held = None
            del measured
        if timed:
            self.on_round.end(index)
        _poison_outputs(held, self.may_poison)
        if timed and may_retake and leaked:
            for name in leaked:
                into.retaken[name] = into.retaken.get(name, 0) + 1
            return False
        for name, kept in taken:
            into.samples[name].add(kept)
        return True

    def _stop_reason(self, group: list[Contender], run: TimingRun, deadline: float) -> str:
        samples = [run.samples[c.name].time_us for c in group]
        if all(self.rule.done(s) for s in samples):
            n = len(samples[0])
            if n >= self.rule.max_runs:
                return "max_runs"
            return "min_runs" if self.rule.target_ci_pct == 0 else "ci_target"
        if time.monotonic() > deadline and len(samples[0]) >= self.rule.min_runs:
            return "time_budget"
        return ""


def _poison_outputs(outputs: Any, may_poison: Callable[[torch.Tensor], bool]) -> None:
    for tensor in tensors_in(outputs):
        if type(tensor) is torch.Tensor and may_poison(tensor):
            poison_tree_(tensor)
