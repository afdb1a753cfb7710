"""The trusted side's handle on its runner: the candidate model as the harness sees it, living elsewhere.

:class:`RemoteModel` stands in for ``ModelNew`` in the trusted process. Calling it copies the arguments into
the input arena, asks the runner to run the real model there, and rebuilds the outputs from the output
arena as tensors the trusted process allocates itself: the harness compares, fingerprints and poisons
those, never an object the candidate made. The input arena is the candidate's copy of the inputs: the
trusted side places the pristine set there and keeps its own tensors untouched, so it needs no copy of its
own; what the candidate did to its copy is read from the arena (:meth:`RemoteModel.inputs_seen`).

Everything the runner says is checked before use; what cannot be used is :class:`RunnerLost`, which the
harness turns into the candidate's failure (``RUNTIME_ERROR``, ``CRASHED`` or ``TIMEOUT``), never the judge's.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from cudagym.judge.harness.failures import CandidateFailure
from cudagym.judge.harness.inputs import tensors_in
from cudagym.judge.harness.profiling import DeviceEvent, KernelProfile
from cudagym.judge.harness.stats import median, quantile
from cudagym.judge.harness.timing import Measurement
from cudagym.judge.split import RUNNER_PHASES
from cudagym.judge.split.arena import Arena, ArenaError, ArenaView, Slot, layout, new_arena, place, views
from cudagym.judge.split.channel import MAX_MESSAGE_BYTES, Channel, RunnerLost
from cudagym.judge.split.heap import gather, heap_sizes, library_fd, reset_words, undelivered
from cudagym.judge.split.signals import CALL_DONE, CALL_GO, CALL_SPIN_S, SIGNAL_BYTES
from cudagym.judge.split.trace import trace, tracing

# the parts of the judge's own staging in a bracket, before its go (RunnerLink.staged_parts_us); the poison's part
# holds the heap's words reset too
STAGING_PARTS = ("inputs", "poison", "flush")


class Stage(Protocol):
    """What queues a call's inputs into the input arena, then poisons the output arena."""

    def __call__(self, placed: Callable[[], None] | None = None) -> None:
        """Queue both; ``placed`` (when given) runs between the two."""


MIN_REPLY_S = 5.0  # the least time a request gets, whatever the job's budget says
SERIES_CALLS = 32  # calls in one series (RemoteModel.series), where the arenas' cap allows that many ...
SERIES_ARENA_BYTES = 512 << 20  # ... input and output sets in all
SERIES_CALIBRATION_ROUNDS = 5
CALIBRATION_ROUNDS = 15
RECALIBRATION_ROUNDS = 8  # the second round, after the runner's reference timing: a median of its own, at half cost
# A runner that has not queued its whole call within the protocol's wait (Protocol.arm_wait_ms) waits on its host
# (a sync inside forward) or queues slowly: the go is given without it, and its host time after the go is timed.
# Later calls of that kind then wait at most ARM_WAIT_S, so a forward that syncs inside pays the long wait once.
ARM_WAIT_S = 0.005
ARM_WAIT_MAX_S = 1.0
ARM_POLL_S = 0.0005  # how often the judge looks whether the runner has queued its call (the go never waits on it)


def late_charge(claim_us: float, bracket_us: float, base_us: float, staged_us: float | None = None,
                after_go_base_us: float | None = None) -> float:
    """The time a late call counts: its GPU bracket less ``base_us``, what an empty call's bracket holds beyond it.

    A call the runner had not queued before the go waits for its host inside the bracket: after the forward
    returns, the runner's host still has to queue the output copy and the done while the GPU idles. The claim
    leaves that wait out; the bracket holds it, with whatever the call hid from its claim, and nothing there
    tells the two apart. So a late call, the reference's or the candidate's, is timed by the judge's clock less
    the cost of an empty call queued in time (the calibration, before any candidate code was in the runner): it
    pays the wait its host left the GPU in, and can hide no more than an on-time call can (what it skips of the
    empty call's path).

    Where the judge's own staging of this call (``staged_us``) and an empty call's cost after its go
    (``after_go_base_us``) are known, the same reading after the go counts too, and the larger of the two
    stands: a large input set's copy can run slower in the calibration than here (the whole bracket would then
    undercount the call), while work hidden beside the judge's copy slows that copy (after the go alone would
    miss it). Never less than the claim (a claim beyond the bracket is a violation of its own).
    """
    counted = max(bracket_us - base_us, claim_us)
    if staged_us is not None and after_go_base_us is not None:
        counted = max(counted, bracket_us - staged_us - after_go_base_us)
    return counted


ON_TIME_SLACK = 0.05  # an on-time call's claim may fall this fraction short of what the judge's clock shows ...
ON_TIME_SLACK_US = 10.0  # ... and this many microseconds more (the bracket rule's allowance, BRACKET_SLACK(_US))


ON_TIME_CHARGE_SLACK = 0.01  # what an on-time call's claim may fall short of the judge's clock uncharged: this share
ON_TIME_CHARGE_PATH = 0.01  # ... of the claim, this share of an empty call's path (the copies in the bracket) ...
# ... and ON_TIME_SLACK_US. Honest calls stay well inside it: on the H200 the KernelBench sweep's timed calls (each
# task's 20th percentile) were within 1% of their claims beyond an empty call on 189 of 190 tasks, and small
# tasks' calls within -6 to +3 us. The bracket rule (a violation) keeps the wider ON_TIME_SLACK.


def on_time_allowance_us(claim_us: float, path_us: float) -> float:
    """How far the judge's clock may show an on-time call past its claim before the call counts the clock (µs).

    ``path_us`` is an empty call's cost in the bracket (after the go where the judge's staging is known): its copies'
    own noise grows with it. A forged claim keeps at most this much (:func:`on_time_charge`).
    """
    return ON_TIME_CHARGE_SLACK * claim_us + ON_TIME_CHARGE_PATH * max(path_us, 0.0) + ON_TIME_SLACK_US


def shown_us(bracket_us: float, base_us: float, staged_us: float | None = None,
             after_go_base_us: float | None = None) -> float:
    """What the judge's clock shows of an on-time call: its bracket less an empty call's (:func:`on_time_charge`)."""
    shown = bracket_us - base_us
    if staged_us is not None and after_go_base_us is not None:
        shown = min(shown, bracket_us - staged_us - after_go_base_us)
    return shown


def on_time_charge(claim_us: float, bracket_us: float, base_us: float, staged_us: float | None = None,
                   after_go_base_us: float | None = None) -> float:
    """The time an on-time call counts: its claim, unless the judge's clock shows more than it by the allowance.

    What the clock shows of a call is its bracket less an empty call's (``base_us``), or the same after the go
    where the judge's staging is known (the smaller of the two: a large input set's copy may run slower here than
    in the calibration). An honest call's claim is within a few microseconds of that; a call that did its work
    outside its own timer (in its delivery, or beside it) shows it, and counts all it shows.
    Claims judged call by call, not by a percentile over all of them: a runner that forged three claims in four
    kept the bracket rule's 20th percentile on an honest call while the median claim was a forged one.
    """
    shown = shown_us(bracket_us, base_us, staged_us, after_go_base_us)
    path = after_go_base_us if staged_us is not None and after_go_base_us is not None else base_us
    # a claim short by more than the clock's noise is no measurement: the call counts all the clock shows (a forger
    # keeps the allowance at most: on the H200, under 5% + 10 us, claims forged in three calls of four were timed at
    # 0.90x the honest)
    return shown if shown - claim_us > on_time_allowance_us(claim_us, path) else claim_us


SERIES_QUANTILE = 0.2  # of a series' call intervals (and an empty series' gaps): busy moments only lengthen calls


def series_work_us(intervals_us: Sequence[float], base_us: float) -> float:
    """The work per call a series of chained calls shows on the judge's clock (µs, never below 0).

    The :data:`SERIES_QUANTILE` of the calls' intervals (each from the done of the call ahead to its own) less what
    an empty series' call held beyond its own time (``base_us``, the same quantile). A low quantile, not the mean
    or the median: a call another process pre-empted, or another context's time slice on the GPU, only lengthens
    its interval, and on a busy host most of a series' calls can be so lengthened (a 2-core host with one
    busy process beside the judge read 2,501 us per call in the median on a 1.8 ms forward). No call can be made
    shorter than its work: each one's inputs arrive only when the call ahead is done, and its outputs are compared.
    """
    return max(quantile(list(intervals_us), SERIES_QUANTILE) - base_us, 0.0) if intervals_us else 0.0


@dataclass(frozen=True)
class SeriesReading:
    """One series of the candidate's calls (:meth:`RemoteModel.series`).

    Attributes:
        outputs: Each call's outputs (or a :class:`StructureMismatch`), in the order of the sets.
        per_call_us: The work the judge's clock showed in the series, per call.
        late: Whether the runner had not queued the whole series before the go (its host time is then in it).
    """

    outputs: list[Any]
    per_call_us: float
    late: bool


@dataclass(frozen=True)
class StructureMismatch:
    """The candidate returned outputs of another count, shape or dtype than the reference (``message`` says)."""

    message: str

    @property
    def structure_mismatch(self) -> str:
        """What the comparison reports (it reads this attribute, knowing nothing of the split)."""
        return self.message


def output_structure(outputs: Any) -> Any:
    """How outputs like ``outputs`` travel, as JSON: ``"tensor"``, ``"list"`` or ``"tuple"`` (of tensors), or a tree.

    A tree (nested tuples, lists and dicts: ``{"tuple": [...]}``, ``{"list": [...]}``, ``{"dict": [[key, ...]]}``,
    ``"T"`` a tensor) is what a reference returns beyond a flat sequence; its tensors travel in the order of a
    depth-first walk, dict entries in the reference's key order. Anything else in it (a number, ``None``, a key
    JSON cannot carry) is ``{"other": type name}``, which no output can fill: its value would be the runner's word.
    """
    if isinstance(outputs, torch.Tensor):
        return "tensor"
    if isinstance(outputs, (list, tuple)) and all(isinstance(o, torch.Tensor) for o in outputs):
        return "list" if isinstance(outputs, list) else "tuple"
    return _tree(outputs)


def _tree(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return "T"
    if isinstance(value, (list, tuple)):
        return {"list" if isinstance(value, list) else "tuple": [_tree(v) for v in value]}
    if isinstance(value, dict) and all(isinstance(k, (str, int)) and not isinstance(k, bool) for k in value):
        return {"dict": [[k, _tree(v)] for k, v in value.items()]}
    return {"other": type(value).__name__}


def untransferable(container: Any) -> str:
    """The type name of a value in an output structure that only tensors can fill (``""`` where there is none)."""
    if isinstance(container, dict):
        if "other" in container:
            return str(container["other"])
        for items in container.values():
            for item in items if isinstance(items, list) else []:
                found = untransferable(item[1] if isinstance(item, list) and len(item) == 2 else item)
                if found:
                    return found
    return ""


def delivered_tensors(outputs: Any, container: Any) -> tuple[list[Any], str]:
    """The items of ``outputs`` that fill the output slots, in the slots' order, and ``""``; or why they cannot."""
    if container == "tensor":
        return [outputs], ""
    if container in ("list", "tuple"):
        if isinstance(outputs, (tuple, list)):
            return list(outputs), ""
        return [], f"expected a {container} of tensors, got {type(outputs).__name__}"
    found: list[Any] = []
    return found, _walk(outputs, container, "", found)


def _walk(value: Any, tree: Any, where: str, found: list[Any]) -> str:
    """Collect ``value``'s leaves along ``tree`` into ``found``; ``""`` or why ``value`` does not have its shape."""
    if tree == "T":
        found.append(value)
        return ""
    kind, items = next(iter(tree.items())) if isinstance(tree, dict) and len(tree) == 1 else ("", None)
    if kind in ("list", "tuple") and isinstance(items, list):
        if not isinstance(value, (list, tuple)) or len(value) != len(items):
            return f"{_at(where)}expected a {kind} of {len(items)} items, got {_described(value)}"
        for i, (v, sub) in enumerate(zip(value, items, strict=True)):
            problem = _walk(v, sub, f"{where or 'output'}[{i}]", found)
            if problem:
                return problem
        return ""
    if kind == "dict" and isinstance(items, list):
        keys = [k for k, _ in items]
        if not isinstance(value, dict) or len(value) != len(keys) or any(k not in value for k in keys):
            return f"{_at(where)}expected a dict with keys {sorted(map(str, keys))}, got {_described(value)}"
        for k, sub in items:
            problem = _walk(value[k], sub, f"{where or 'output'}[{k!r}]", found)
            if problem:
                return problem
        return ""
    return (f"{_at(where)}the reference returns a value of type {str(items)[:60]} there, which the judge cannot take "
            "from the candidate's process (only tensors, in tuples, lists and dicts)")


def _at(where: str) -> str:
    return f"{where}: " if where else ""


def _described(value: Any) -> str:
    if isinstance(value, dict):
        return f"a dict with keys {sorted(map(str, value))[:20]}"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)} items"
    return f"a {type(value).__name__}"


def rebuilt(outs: list[torch.Tensor], container: Any) -> Any:
    """The output tree of ``container`` (:func:`output_structure`) holding ``outs`` in its slots' order."""
    if container == "tensor":
        return outs[0]
    if container in ("list", "tuple"):
        return list(outs) if container == "list" else tuple(outs)
    it = iter(outs)

    def build(tree: Any) -> Any:
        if tree == "T":
            return next(it)
        kind, items = next(iter(tree.items()))
        if kind == "dict":
            return {k: build(sub) for k, sub in items}
        built = [build(sub) for sub in items]
        return built if kind == "list" else tuple(built)

    return build(container)


def structure_problem(outputs: Any, expected: list[Slot], container: Any) -> str:
    """Why ``outputs`` cannot fill ``expected`` (``""`` when it can); used by the runner before copying.

    Each output must be a dense tensor with data (not sparse, not meta: their copy would fail in the judge's own
    code) of the slot's shape and dtype.
    """
    got, problem = delivered_tensors(outputs, container)
    if problem:
        return problem
    if len(got) != len(expected):
        return f"expected {len(expected)} output tensor(s), got {len(got)}"
    for i, (tensor, slot) in enumerate(zip(got, expected, strict=True)):
        if not isinstance(tensor, torch.Tensor):
            return f"output {i}: expected a tensor, got {type(tensor).__name__}"
        if tuple(tensor.shape) != slot.shape:
            return f"output {i}: expected shape {list(slot.shape)}, got {list(tensor.shape)}"
        if str(tensor.dtype).removeprefix("torch.") != slot.dtype:
            return f"output {i}: expected dtype {slot.dtype}, got {str(tensor.dtype).removeprefix('torch.')}"
        if tensor.layout != torch.strided or tensor.is_meta:
            layout_name = str(tensor.layout).removeprefix("torch.")
            what = "a meta tensor (no data)" if tensor.is_meta else f"layout {layout_name}"
            return f"output {i}: expected a dense tensor with its values, got {what}"
    return ""


# what reading a malformed reply can raise (a missing key, a value of the wrong type or beyond a float): the runner's
_MALFORMED = (KeyError, TypeError, ValueError, OverflowError, AttributeError, IndexError)


class RunnerLink:
    """The channel to one runner, the arenas shared with it, and the deadline of the job.

    Args:
        channel: The socket to the runner.
        deadline: ``time.monotonic()`` by which the whole job must end.
    """

    def __init__(self, channel: Channel, deadline: float) -> None:
        self.channel = channel
        self.deadline = deadline
        self.device = torch.device("cpu")
        self.candidate_sent = False  # whether the runner was told to load the candidate (:meth:`start`)
        self.on_candidate: Callable[[], None] | None = None  # called then (the worker tells its lane)
        self.arenas: dict[str, Arena] = {}
        self.violations: list[tuple[str, str]] = []  # what the runner's guards reported, in order
        self.on_violation: Any = None  # called with (guard, message) for each, as they arrive
        self.notes: list[str] = []
        self.flag_changes: list[str] = []
        self.wall_us: list[float] = []  # the trusted clock around each timed request
        self.claimed_us: list[float] = []
        self.calibration_us: list[float] = []  # wall less claim of empty timed calls, before the candidate loaded
        self.handled_us: dict[str, list[float]] = {"timed": [], "calibrate": []}  # the runner's own account
        self.phases_us: dict[str, list[list[float]]] = {"timed": [], "calibrate": []}  # RUNNER_PHASES, per request
        self.parts_us: dict[str, list[list[float]]] = {}  # this process's TRUSTED_PHASES, per timed request by kind
        self.last_parts_us: list[float] = []  # the latest request's
        self.bracket_us: list[float] = []  # the trusted GPU bracket around each timed call (the GPU path)
        self.calibration_gap_us: list[float] = []  # bracket less claim of empty timed calls, before the candidate
        self.calibration_rounds_us: list[float] = []  # each calibration round's median (the lowest round is kept)
        self.reference_batched = 0  # the reference's calls the runner timed in its own loop (time_reference)
        self.reference_cover_us = 0.0  # the launch cover before each of them (0: none)
        # the reference's untimed warm-up in the runner, by its account: building it, then its calls (µs; [] none)
        self.reference_warm_us: list[float] = []
        # the judge's own part of each bracket (inputs into the arena, the L2 flush), until its go: timed and empty
        self.staged_us: dict[str, list[float]] = {"timed": [], "calibrate": []}
        self.last_staged_us = 0.0  # the latest bracket's
        # its parts (STAGING_PARTS: inputs placed, outputs poisoned, L2 flushed), per bracket: where staging time goes
        self.staged_parts_us: dict[str, list[list[float]]] = {"timed": [], "calibrate": []}
        self.last_staged_parts_us: list[float] = []
        self.request_s: dict[str, list[float]] = {}  # this process's wall time per timed request, by kind
        self.bracket = False  # time the candidate's calls on the GPU's clock (set by the harness on the GPU path)
        self.flusher: Any = None  # the trusted side's L2 flush, queued inside each bracket
        self.arm_wait_s = ARM_WAIT_S  # how long a bracketed call may take to be queued before the go is given
        self._rehearsed: set[tuple[Any, ...]] = set()  # the brackets whose kernels this process has run (rehearse)
        # per kind of timed request: how many calls were not queued in time, of how many (their go was given anyway)
        self.unqueued: dict[str, list[int]] = {}
        self.last_late = False  # whether the latest bracketed call was not queued before its go
        # audited forwards gated on the GPU (gated): how many this process opened the gate of itself, after the arm
        # wait, because the runner had not (its forward still on its host), of how many
        self.late_audits = [0, 0]
        self._gate = 0  # the latest audited forward's gate round (its own counter: the GATE word)
        self._gate_opened: Any = None  # the event that says the runner's stream is through the gate
        self.late_timed: list[bool] = []  # per timed call on the GPU path (beside ``claimed_us``): late or not
        # per timed call (beside ``claimed_us``): whether the judge compared its outputs with the reference's; only
        # those calls' clocks confirm claims (a warm-up's or an unchecked round's outputs may be no work at all)
        self.checked_timed: list[bool] = []
        # per kind of timed request (timed, reference): each late call's claim and what it counted (late_charge)
        self.late_counted_us: dict[str, list[tuple[float, float]]] = {}
        # per kind: each late call's delivery by the runner's own account (GPU clock, host time, then the host time
        # of its parts: the outputs queued, done, armed; notes only)
        self.late_closing_us: dict[str, list[list[float]]] = {}
        # each on-time timed call the judge's clock showed longer than its claim and the allowance: (claim, counted)
        self.on_time_charged_us: list[tuple[float, float]] = []
        # per kind of timed request (timed, reference): each on-time call's claim, bracket and the judge's staging in
        # it (µs); what the judge's clock showed of it (its bracket less an empty call's) is read against the
        # calibration that stands at the verdict (on_time_shown): how far honest claims and that clock part
        self.on_time_calls_us: dict[str, list[tuple[float, float, float]]] = {}
        # series of empty forwards timed before the candidate loaded (RemoteModel.calibrate_series): how many calls
        # a series holds (0: none), each series' 20th-percentile call interval less that call's claim, and each
        # calibration round's median (the cheaper round stands)
        self.series_calls = 0
        self.series_gap_us: list[float] = []
        self.series_rounds_us: list[float] = []
        self.series_empty_claims_us: list[float] = []  # each calibration series' median empty call (its own time)
        self.last_intervals_us: list[float] = []  # the latest chained request's calls: each one's interval
        self._round = 0
        self._events: tuple[Any, ...] | None = None
        self._marks: list[Any] = []  # chained calls' done events (_call_mark)
        self._side: Any = None
        self.arena_peak_bytes = 0  # the most device (or host) memory the arenas held at once
        # the heap the runner's allocations lie in, from which this process copies bracketed calls' outputs itself
        # (cudagym.judge.split.heap; None: they are delivered by the runner's copy into the output arena)
        self.heap: Arena | None = None
        self.heap_reserve = 0  # its first bytes: the runner's copies of outputs made elsewhere, and the output arena
        self.last_undelivered = ""  # why the latest bracketed call's outputs could not be read from the heap
        self.runner_peak_bytes = 0  # the runner's own peak device memory, as it reports it (its allocator's)

    def request(self, message: dict[str, Any], fds: list[int] | None = None, expect: str = "",
                max_bytes: int = MAX_MESSAGE_BYTES, arrived: Callable[[], None] | None = None) -> dict[str, Any]:
        """Send one request and return the runner's reply (its violations recorded).

        Raises:
            CandidateFailure: The candidate raised (or broke the CUDA context) in the runner.
            RunnerLost: No proper reply.
        """
        t0 = time.perf_counter()
        try:
            self.channel.send(message, fds)
        except OSError as exc:
            raise RunnerLost(f"the runner's channel failed: {exc}") from None
        t1 = time.perf_counter()
        reply = self._reply(message, expect, max_bytes, arrived)
        self.last_parts_us = [(t1 - t0) * 1e6, (time.perf_counter() - t1) * 1e6, 0.0]
        if tracing():
            trace("request", kind=message.get("kind"), parts_us=self.last_parts_us,
                  runner_heap=str(reply.get("heap", ""))[:300])
        return reply

    def chained_request(self, message: dict[str, Any], calls: int, between: Callable[[int], None],
                        expect: str) -> dict[str, Any]:
        """One request of ``calls`` calls that the runner makes one at a time (a series on the host path).

        After the runner's word that call ``k`` is done, ``between(k)`` runs here (it copies the call's results
        out and places the next call's inputs), and only then does call ``k + 1`` get its go. A final reply that
        comes before every call said done (a failure, or a runner that skipped its words) ends the chain: the
        calls left are copied out as the arena holds them. Raises as :meth:`request`.
        """
        self.last_intervals_us = []
        try:
            self.channel.send({**message, "chained": True})
            mark = time.perf_counter()
            for k in range(calls):
                self.channel.spin(CALL_SPIN_S)
                word, _ = self.channel.receive(max(MIN_REPLY_S, self.deadline - time.monotonic()),
                                               max_bytes=TIMED_REPLY_BYTES)
                if word.get("kind") != CALL_DONE:
                    for rest in range(k, calls):
                        between(rest)
                    reply = self._checked_reply(word, message, expect)
                    if not reply.get("problem"):  # its calls left had no inputs: none of their outputs is an answer
                        reply["problem"] = f"the runner replied before call {k} of the {calls} back to back said done"
                    return reply
                now = time.perf_counter()
                self.last_intervals_us.append((now - mark) * 1e6)
                between(k)
                mark = time.perf_counter()  # this process's copies are not the next call's
                if k + 1 < calls:
                    self.channel.send({"kind": CALL_GO, "call": k + 1})
        except OSError as exc:
            raise RunnerLost(f"the runner's channel failed: {exc}") from None
        return self._reply(message, expect, TIMED_REPLY_BYTES)

    def _reply(self, message: dict[str, Any], expect: str, max_bytes: int = MAX_MESSAGE_BYTES,
               arrived: Callable[[], None] | None = None) -> dict[str, Any]:
        reply, _ = self.channel.receive(max(MIN_REPLY_S, self.deadline - time.monotonic()), max_bytes=max_bytes,
                                        arrived=arrived)
        return self._checked_reply(reply, message, expect)

    def _checked_reply(self, reply: dict[str, Any], message: dict[str, Any], expect: str) -> dict[str, Any]:
        """The runner's reply to ``message``, its violations recorded; raises for a failure or a wrong kind."""
        self.runner_peak_bytes = max(self.runner_peak_bytes, _count(reply.get("peak_bytes")))
        try:
            for guard, text in reply.get("violations", [])[:50]:
                found = (_text(guard, 60), _text(text, 2000))
                self.violations.append(found)
                if self.on_violation is not None:
                    self.on_violation(*found)
            kind = reply["kind"]
            if kind == "failure":
                raise CandidateFailure(_text(reply["stage"], 40), _text(reply["text"], 8000), cuda=bool(reply["cuda"]))
            if kind == "task_problem":  # the trusted side loaded the task itself: in the runner it is the candidate's
                raise CandidateFailure("load", _text(reply["text"], 4000))
            if expect and kind != expect:
                raise RunnerLost(f"the runner answered {str(kind)[:40]!r} to a {message.get('kind')!r} request")
        except _MALFORMED as exc:
            raise RunnerLost(f"the runner sent a malformed reply ({type(exc).__name__}: {exc})") from None
        return reply

    @property
    def series_empty_us(self) -> float:
        """An empty call's own time in the series calibrated before the candidate loaded (median; 0: none)."""
        return median(self.series_empty_claims_us) if self.series_empty_claims_us else 0.0

    def arena_bytes(self) -> int:
        """Device (or host) memory the arenas (and the heap) hold now."""
        held = sum(a.size for a in self.arenas.values() if not isinstance(a, ArenaView))  # a view is the heap's
        return held + (self.heap.size if self.heap is not None else 0)

    def mark_checked(self) -> None:
        """The latest timed call's outputs were compared with the reference's (see :attr:`checked_timed`)."""
        if self.checked_timed:
            self.checked_timed[-1] = True

    def bracketed(self, message: dict[str, Any], stage: Stage, out_slots: list[Slot],
                  expect: str, keep: bool = True, arm_wait_s: float | None = None, calls: int = 1,
                  between: Callable[[int], None] | None = None) -> tuple[dict[str, Any], float, list[torch.Tensor]]:
        """One timed request that the trusted process brackets on the GPU (:mod:`cudagym.judge.split.signals`).

        ``stage`` queues the call's inputs into the arena (and poisons the outputs); the L2 flush follows
        it. Returns the reply, the bracket in microseconds, and the outputs as they were in the arena when
        the bracket closed (copied out in stream order right after it: what the judge compares), or none
        where ``keep`` is false (a calibration's: nothing compares them, and a copy is a whole output set).
        ``arm_wait_s``: how long the runner may take to queue the request (default :attr:`arm_wait_s`).

        ``calls`` above 1 chains that many calls in the bracket (a series): ``between(k)`` is queued after call
        ``k`` signalled done and before call ``k + 1`` gets its go (it copies call ``k``'s results out and places
        call ``k + 1``'s inputs), and after the last call once the bracket closed.
        """
        from cudagym.judge.split.signals import ARMED, DONE, GO, wait_value, write_value

        t0 = time.perf_counter()
        if self._events is None:
            self._events = tuple(torch.cuda.Event(enable_timing=True) for _ in range(5))
            self._side = torch.cuda.Stream(self.device)
        first = self._round + 1
        self._round += calls
        n, base = self._round, self.arenas["signals"].tensor.data_ptr()
        start, placed, poisoned, staged, end = self._events
        stream = torch.cuda.current_stream(self.device)
        self.rehearse((str(message.get("kind")), calls, keep, between is not None, tuple(out_slots)), stage,
                      out_slots if keep else [], calls)
        wait_value(stream.cuda_stream, base + ARMED, n)  # until the runner has queued the whole request
        start.record(stream)
        stage(lambda: placed.record(stream))
        if self.heap is not None:  # the runner must say again, in these calls, where their outputs lie
            reset_words(self.arenas["signals"].tensor.view(torch.int32), calls)
        poisoned.record(stream)
        if self.flusher is not None:
            self.flusher.flush()
        staged.record(stream)  # the judge's own part ends: what follows is the runner's calls and delivery
        marks = [staged]
        for k in range(calls):
            write_value(stream.cuda_stream, base + GO, first + k)
            wait_value(stream.cuda_stream, base + DONE, first + k)
            marks.append(end if k == calls - 1 else self._call_mark(k))
            marks[-1].record(stream)
            if between is not None:
                between(k)
        valid = None
        if keep and self.heap is not None:
            outputs, valid = self.gather(0, out_slots)
        else:
            outputs = [v.clone() for v in views(self.arenas["outputs"].tensor, out_slots)] if keep else []
        t1 = t0
        self.last_late = False
        if tracing():  # this process's part queued: a trace that stops here never sent the runner its request
            trace("queued", kind=message.get("kind"), round=first, calls=calls,
                  queue_us=(time.perf_counter() - t0) * 1e6)
        try:
            self.channel.send({**message, "round": first})
            t1 = time.perf_counter()
            if not self._queued_in_time(str(message.get("kind", "")), start, t1, arm_wait_s):
                self.last_late = True
                write_value(self._side.cuda_stream, base + ARMED, n)  # go without it
            reply = self._reply(message, expect)
        except OSError as exc:
            raise RunnerLost(f"the runner's channel failed: {exc}") from None
        finally:  # whatever the runner did, this process's stream must not wait for it forever
            t2 = time.perf_counter()
            write_value(self._side.cuda_stream, base + ARMED, n)
            write_value(self._side.cuda_stream, base + DONE, n)
            end.synchronize()
        self.last_staged_us = start.elapsed_time(staged) * 1000.0
        self.last_staged_parts_us = [a.elapsed_time(b) * 1000.0
                                     for a, b in ((start, placed), (placed, poisoned), (poisoned, staged))]
        bracket_us = start.elapsed_time(end) * 1000.0
        self.last_intervals_us = [a.elapsed_time(b) * 1000.0 for a, b in zip(marks, marks[1:], strict=False)]
        self.last_parts_us = [(t1 - t0) * 1e6, (t2 - t1) * 1e6, (time.perf_counter() - t2) * 1e6]
        self.last_undelivered = "" if valid is None or bool(valid.item()) else undelivered(0)
        if tracing():
            trace("bracketed", kind=message.get("kind"), round=first, calls=calls, late=self.last_late,
                  bracket_us=bracket_us, staged_us=self.last_staged_us, staged_parts_us=self.last_staged_parts_us,
                  parts_us=self.last_parts_us,
                  claim_us=reply.get("time_us"), runner_heap=str(reply.get("heap", ""))[:300])
        return reply, bracket_us, outputs

    def rehearse(self, key: tuple[Any, ...], stage: Stage | None, slots: list[Slot],
                 calls: int = 1) -> None:
        """Run once, outside any bracket, the kernels this process queues inside a bracket of kind ``key``.

        Inside a bracket this process's stream waits for the runner's word, which comes only after the request
        is sent; a kernel launched there for the first time may make CUDA load its module, and a module load may
        wait for the whole context (CUDA's lazy loading): that wait would never end. So the staging, the words'
        reset, the L2 flush and the heap's gather of ``slots`` run here first, with nothing waiting, and the
        stream is synchronized. ``stage`` runs again in the bracket (it only places inputs and poisons outputs).
        """
        if key in self._rehearsed or self.device.type != "cuda":
            return
        if stage is not None:
            stage()
        if self.heap is not None:
            reset_words(self.arenas["signals"].tensor.view(torch.int32), calls)
            if slots:
                self.gather(0, slots)
        if self.flusher is not None:
            self.flusher.flush()
        torch.cuda.current_stream(self.device).synchronize()
        self._rehearsed.add(key)

    def gather(self, call: int, slots: list[Slot]) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Queue the copy of call ``call``'s outputs out of the heap, from where the runner's words say.

        The outputs as this process's tensors, and whether every word was written and in bounds (a boolean on the
        device: read it once the copy is done).
        """
        assert self.heap is not None
        return gather(self.heap.tensor, self.arenas["signals"].tensor.view(torch.int32), call, slots)

    def setup_heap(self, slots: list[Slot], output_bytes: int, need_bytes: int = 0) -> None:
        """Share a heap with the runner, before it times anything: its allocations lie there from then on.

        Bracketed calls' outputs are then copied out of it by this process (:mod:`cudagym.judge.split.heap`).
        ``need_bytes``: what the reference needs beside its input set (:func:`~cudagym.judge.split.heap.heap_bytes`).

        Raises:
            HeapError: The allocator could not be built here.
            RunnerLost: The runner could not take the heap (before any candidate code: the judge's failure).
        """
        import os

        reserve, sizes = heap_sizes(slots, output_bytes, need_bytes)
        for arena in self.arenas.values():  # the output arena will be the heap's reserve
            arena.close()
        self.arenas = {}
        for i, size in enumerate(sizes):  # the full room, else room for one output set (the rest from the runner's)
            try:
                self.heap = new_arena(size, self.device)
                break
            except ArenaError as exc:
                if i + 1 == len(sizes) or "out of memory" not in str(exc).lower():
                    raise
                self.notes.append(f"the shared heap: {size} bytes did not fit; {sizes[i + 1]} tried")
        assert self.heap is not None
        self.heap_reserve = reserve
        self.arena_peak_bytes = max(self.arena_peak_bytes, self.arena_bytes())
        fds = [self.heap.descriptor(), library_fd()]
        try:
            self.request({"kind": "heap", "size": self.heap.size, "reserve": reserve}, fds, expect="heap_attached")
        except CandidateFailure as failure:  # no candidate code is in the runner yet
            raise RunnerLost(f"the runner could not map the shared heap ({failure.stage}: "
                             f"{failure.text.strip()[-600:]})") from None
        finally:
            for fd in fds:
                os.close(fd)

    def _call_mark(self, k: int) -> Any:
        """The timing event recorded as call ``k`` of a chained bracket signalled done (one per call, kept)."""
        while len(self._marks) <= k:
            self._marks.append(torch.cuda.Event(enable_timing=True))
        return self._marks[k]

    @property
    def late_base_us(self) -> float:
        """What an empty call queued in time holds in its bracket beyond its claim (median; 0 uncalibrated)."""
        return median(self.calibration_gap_us) if self.calibration_gap_us else 0.0

    def _after_go_base_us(self) -> float | None:
        """An empty call's bracket beyond its claim after its go (median), where the staging was measured."""
        staged = self.staged_us["calibrate"]
        return (median([g - s for g, s in zip(self.calibration_gap_us, staged, strict=True)])
                if staged and len(staged) == len(self.calibration_gap_us) else None)

    def count_late(self, kind: str, claim_us: float, bracket_us: float) -> float:
        """What the latest call, a late one of ``kind``, counts (:func:`late_charge`), kept for the result's note."""
        counted = late_charge(claim_us, bracket_us, self.late_base_us, self.last_staged_us, self._after_go_base_us())
        self.late_counted_us.setdefault(kind, []).append((claim_us, counted))
        return counted

    def count_on_time(self, claim_us: float, bracket_us: float) -> float:
        """What the latest timed call, an on-time one, counts (:func:`on_time_charge`); more than its claim noted."""
        if not self.calibration_gap_us:
            return claim_us  # uncalibrated: the bracket rule flags the claims (judge_bracketed_claims)
        after_go = self._after_go_base_us()
        counted = on_time_charge(claim_us, bracket_us, self.late_base_us, self.last_staged_us, after_go)
        self.note_shown("timed", claim_us, bracket_us)
        if counted > claim_us:
            self.on_time_charged_us.append((claim_us, counted))
        return counted

    def note_shown(self, kind: str, claim_us: float, bracket_us: float) -> None:
        """Keep the latest on-time call of ``kind``: its claim, its bracket and the judge's staging in it."""
        if self.calibration_gap_us:
            self.on_time_calls_us.setdefault(kind, []).append((claim_us, bracket_us, self.last_staged_us))

    def on_time_shown(self) -> dict[str, list[tuple[float, float]]]:
        """Each kept on-time call's claim and what the judge's clock showed of it (:func:`shown_us`), by kind.

        Read against the calibration that stands now: the reference's calls are timed between two calibration
        rounds, and where the later round was the cheaper one (a transient lengthened the first) it replaced the
        cost they were first read against (KernelBench `L2/1` on an H100: -308.6 us per call, the two rounds' medians
        1,314.0 and 1,006.4 us).
        """
        if not self.calibration_gap_us:
            return {}
        after_go, base = self._after_go_base_us(), self.late_base_us
        return {kind: [(claim, shown_us(bracket, base, staged, after_go)) for claim, bracket, staged in rows]
                for kind, rows in self.on_time_calls_us.items()}

    @property
    def on_time_path_us(self) -> float:
        """An empty call's path in the bracket (after the go where the staging is known): the allowance's base."""
        after_go = self._after_go_base_us()
        return after_go if after_go is not None else self.late_base_us

    @property
    def late_wait_s(self) -> float:
        """How long a call waits to be queued once a call of its kind was late (:data:`ARM_WAIT_S` at most)."""
        return min(self.arm_wait_s, ARM_WAIT_S)

    def _queued_in_time(self, kind: str, start: Any, sent: float, wait_s: float | None = None) -> bool:
        """Whether the runner queued the whole call (``start`` passed ARMED), or replied, within the wait.

        The go itself waits on the GPU, never on this loop; the loop only decides when to give it without the
        runner: after :attr:`arm_wait_s`, or :attr:`late_wait_s` for a kind of call that was late before.
        """
        counts = self.unqueued.setdefault(kind, [0, 0])
        counts[1] += 1
        first = self.arm_wait_s if wait_s is None else wait_s
        deadline = sent + (min(first, self.late_wait_s) if counts[0] else first)
        while not start.query():
            left = deadline - time.perf_counter()
            if left <= 0:  # it waits on its host (a sync inside forward), or queues slowly
                counts[0] += 1
                return False
            if self.channel.readable(min(left, ARM_POLL_S)):
                return True  # it answered without queueing a call (a failure): the finally releases the stream
        return True

    def gated(self, message: dict[str, Any], expect: str) -> dict[str, Any]:
        """One audited forward whose stream in the runner waits behind a gate until its forward has returned.

        The request names the gate's round (``"gate"``); the runner opens it once the candidate's forward returned
        and the side-stream check queued its reads (:mod:`cudagym.judge.split.signals`). Where it has not within
        :attr:`arm_wait_s` (:attr:`late_wait_s` once an audited forward was late), this process opens it itself and
        counts the call late (:attr:`late_audits`); it opens it again after the reply in every case. Raises as
        :meth:`request`.
        """
        from cudagym.judge.split.signals import GATE, wait_value, write_value

        if self._side is None:
            self._side = torch.cuda.Stream(self.device)
        if self._gate_opened is None:
            self._gate_opened = torch.cuda.Event()
        self._gate += 1
        n, address = self._gate, self.arenas["signals"].tensor.data_ptr() + GATE
        counts = self.late_audits
        counts[1] += 1
        wait_s = self.late_wait_s if counts[0] else self.arm_wait_s
        # this process's stream passes the gate as the runner's does (nothing waits on it here before the reply)
        stream = torch.cuda.current_stream(self.device)
        wait_value(stream.cuda_stream, address, n)
        self._gate_opened.record(stream)
        late = False
        try:
            self.channel.send({**message, "gate": n})
            if not self._opened_in_time(time.perf_counter() + wait_s):
                late = True
                counts[0] += 1
                write_value(self._side.cuda_stream, address, n)  # its forward is still on its host: open it
            reply = self._reply(message, expect)
        except OSError as exc:
            raise RunnerLost(f"the runner's channel failed: {exc}") from None
        finally:  # whatever the runner did, its stream must not wait forever
            write_value(self._side.cuda_stream, address, n)
            self._side.synchronize()  # in place before the next gate's round: never written over it late
        if tracing():
            trace("gated", round=n, late=late, wait_ms=wait_s * 1000)
        return reply

    def _opened_in_time(self, deadline: float) -> bool:
        """Whether the runner opened the latest gate, or replied, by ``deadline`` (``time.perf_counter``)."""
        while not self._gate_opened.query():
            left = deadline - time.perf_counter()
            if left <= 0:
                return False
            if self.channel.readable(min(left, ARM_POLL_S)):
                return True  # it answered (a failure before its forward, say): the finally opens the gate
        return True

    def hand(self, job: Any) -> None:
        """Hand the runner its job (it loads nothing of it until :meth:`start`)."""
        try:
            ready, _ = self.channel.receive(max(MIN_REPLY_S, self.deadline - time.monotonic()))
            if ready.get("kind") != "ready":
                raise RunnerLost("the runner did not start properly")
            self.channel.send_pickle(job)
        except OSError as exc:
            raise RunnerLost(f"the runner's channel failed: {exc}") from None

    def start(self, start: dict[str, Any]) -> str:
        """Let the runner load the candidate: once it is loaded (or raises its failure), its account of the time.

        The account is the runner's own (``setup 0.01 s, ...``), for notes only.
        """
        self.candidate_sent = True  # from here on the runner's process holds candidate code
        if self.heap is not None:  # nothing the reference's calls left there is readable by the candidate
            self.heap.tensor.zero_()
            torch.cuda.synchronize(self.device)
        if self.on_candidate is not None:
            self.on_candidate()
        reply = self.request({"kind": "start", **start}, expect="loaded")
        stages = reply.get("stages_s")
        if not isinstance(stages, dict):
            return ""
        return ", ".join(f"{str(k)[:30]} {_number(v):.2f} s" for k, v in list(stages.items())[:10])

    def ensure_arenas(self, input_bytes: int, output_bytes: int) -> None:
        """Arenas at least this large, shared with the runner (replaced when too small)."""
        have = self.arenas
        if have and have["inputs"].size >= input_bytes and have["outputs"].size >= output_bytes:
            return
        self.fit_arenas(input_bytes, output_bytes)

    def fit_arenas(self, input_bytes: int, output_bytes: int) -> None:
        """Arenas of exactly this size, shared with the runner (replaced unless they already are).

        After a series (:meth:`RemoteModel.series`) the arenas go back to one set's size, so its sets are held
        only while it runs.
        """
        have = self.arenas
        if have and have["inputs"].size == input_bytes and have["outputs"].size == output_bytes:
            return
        for arena in have.values():
            arena.close()
        self.arenas = {}  # the old ones are closed: never both at once
        self.arenas["inputs"] = new_arena(input_bytes, self.device)
        if self.heap is not None and output_bytes <= self.heap_reserve:  # the heap's reserve is the output arena
            self.arenas["outputs"] = ArenaView(self.heap, max(output_bytes, 1))
        else:
            self.arenas["outputs"] = new_arena(output_bytes, self.device)
        if self.device.type == "cuda":  # the bracket's words (cudagym.judge.split.signals), zero before use
            self.arenas["signals"] = new_arena(SIGNAL_BYTES, self.device)
            self.arenas["signals"].tensor.zero_()
            torch.cuda.synchronize(self.device)
            self._round = self._gate = 0  # the words start again from zero
        self.arena_peak_bytes = max(self.arena_peak_bytes, self.arena_bytes())
        shared = [name for name, a in self.arenas.items() if not isinstance(a, ArenaView)]
        fds = [self.arenas[name].descriptor() for name in shared]
        try:
            self.request({"kind": "arenas", "names": shared, "sizes": {k: a.size for k, a in self.arenas.items()},
                          "device": "cuda" if self.device.type == "cuda" else "cpu"}, fds, expect="attached")
        finally:
            import os

            for fd in fds:
                os.close(fd)

    def end(self) -> tuple[list[str], list[str]]:
        """Tell the runner the job is over; the files and connections it tried (its escape audit)."""
        try:
            reply = self.request({"kind": "end"}, expect="ended")
            self.notes.extend(_strings(reply.get("notes"), 50, 500))
            return _strings(reply.get("files"), 100, 300), _strings(reply.get("network"), 100, 300)
        except (RunnerLost, CandidateFailure):
            return [], []
        finally:
            self.close()

    def close(self) -> None:
        """Close the channel and the arenas."""
        self.channel.close()
        for arena in self.arenas.values():
            arena.close()
        self.arenas = {}
        if self.heap is not None:
            self.heap.close()
            self.heap = None


class RemoteModel:
    """``ModelNew`` as the trusted process calls it: every call runs in the runner.

    Args:
        link: The runner.
        outputs_like: The reference's outputs of the priming run (their structure: count, shapes, dtypes).
    """

    def __init__(self, link: RunnerLink, outputs_like: Any) -> None:
        self.link = link
        self.container = output_structure(outputs_like)  # nested trees and dicts too, not only flat sequences
        self.out_slots, self.out_bytes = layout(tensors_in(outputs_like))
        self.out_like = [(t.shape, t.dtype) for t in tensors_in(outputs_like)]
        # the last call's plain arguments (None where a tensor went into a slot) and its slots: no tensor is kept
        self._last: tuple[list[Any], list[bool], list[Slot]] | None = None
        self._series_seen: list[list[Any]] = []  # each call's copy of its inputs in the latest series, as it ended
        self._series_read: list[torch.Tensor] = []  # per call of it, read from the heap: whether its words were right
        self._series_set_bytes = 0  # one input set's bytes in the latest series (the arenas go back to that)
        self._called = False  # whether the candidate was called in the runner yet (its first call goes ungated)

    def parameters(self) -> list[torch.Tensor]:
        """None here: the weights live in the runner."""
        return []

    def buffers(self) -> list[torch.Tensor]:
        """None here: the buffers live in the runner."""
        return []

    def _place(self, args: tuple[Any, ...]) -> list[dict[str, Any]]:
        """Copy the argument tensors into the input arena (``args`` themselves are only read); their spec."""
        spec, stage = self._staged(args)
        stage()
        arena = self.link.arenas["inputs"].tensor
        if arena.is_cuda:
            torch.cuda.synchronize(arena.device)
        return spec

    def _staged(self, args: tuple[Any, ...]) -> tuple[list[dict[str, Any]], Stage]:
        """The arguments' spec, and what queues them into the input arena and poisons the output arena."""
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        slots, nbytes = layout(tensors)
        self.link.ensure_arenas(nbytes, self.out_bytes)

        def stage(placed: Callable[[], None] | None = None) -> None:
            place(self.link.arenas["inputs"].tensor, slots, tensors)
            if placed is not None:
                placed()
            self.link.arenas["outputs"].tensor.fill_(0xFF)  # nothing of the last call stays readable as an answer

        spec = _args_spec(args, slots)
        is_tensor = [isinstance(a, torch.Tensor) for a in args]
        self._last = ([None if t else a for a, t in zip(args, is_tensor, strict=True)], is_tensor, slots)
        return spec, stage

    @property
    def bracketed(self) -> bool:
        """Whether timed calls are bracketed on the GPU by this process (else: its host clock)."""
        return self.link.bracket and self.link.device.type == "cuda"

    def _timed_request(self, kind: str, args: list[Any], expect: str,
                       keep: bool = True) -> tuple[dict[str, Any], float, Any]:
        """One timed request: its reply, the trusted clock around it, and the outputs.

        The clock is the GPU bracket (the outputs then copied as it closed, unless ``keep`` is false) or, on
        the host path, the wall time (the outputs copied from the arena as the reply arrives; ``None`` where
        ``keep`` is false or the reply names a problem).
        """
        request = {"kind": kind, "outputs": [s.to_json() for s in self.out_slots], "container": self.container}
        began = time.perf_counter()
        outs: list[torch.Tensor] | None
        if self.bracketed:
            spec, stage = self._staged(tuple(args))
            reply, clock_us, outs = self.link.bracketed({**request, "args": spec}, stage, self.out_slots, expect,
                                                        keep)
            if self.link.last_late:  # where the late path's time went, by the runner's word (explains, decides nothing)
                self.link.late_closing_us.setdefault(kind, []).append(_numbers(reply.get("closing_us"), 5))
        else:
            spec = self._place(tuple(args))
            copied: list[torch.Tensor] = []

            def copy_out() -> None:  # the runner lives on: what it writes after replying is not the call's
                if keep:
                    copied.extend(v.clone() for v in views(self.link.arenas["outputs"].tensor, self.out_slots))

            t0 = time.perf_counter()
            reply = self.link.request({**request, "args": spec}, expect=expect, max_bytes=TIMED_REPLY_BYTES,
                                      arrived=copy_out)
            clock_us = (time.perf_counter() - t0) * 1e6
            outs = copied if copied and not reply.get("problem") else None
            self.link.last_parts_us[0] += (t0 - began) * 1e6  # the inputs placed, then the request sent
        self.link.request_s.setdefault(kind, []).append(time.perf_counter() - began)
        self.link.parts_us.setdefault(kind, []).append(list(self.link.last_parts_us))
        return reply, clock_us, outs

    def inputs_seen(self) -> list[Any]:
        """The candidate's copy of the last call's arguments after the call: views of the input arena.

        Valid until the next call (which overwrites the arena); the harness compares them with its pristine
        set at once. A runner that rewrites them later can only make its candidate look worse.
        """
        return self._seen(self._last)

    def series_inputs_seen(self, k: int) -> list[Any]:
        """The candidate's copy of call ``k``'s arguments in the latest series, copied out as the call said done."""
        return self._series_seen[k]

    def _seen(self, last: tuple[list[Any], list[bool], list[Slot]] | None) -> list[Any]:
        if last is None:
            return []
        values, is_tensor, slots = last
        placed = iter(views(self.link.arenas["inputs"].tensor, slots))
        return [next(placed) if t else v for v, t in zip(values, is_tensor, strict=True)]

    def _collect(self, reply: dict[str, Any], outs: list[torch.Tensor] | None = None) -> Any:
        """The outputs, copied out of the output arena into this process's own tensors (or the mismatch).

        A copy: the runner's process stays alive, so the arena's bytes could change while they are compared.
        ``outs``: the copy already made (a bracketed call's, taken as its bracket closed).
        """
        problem = reply.get("problem", "")
        if not isinstance(problem, str):
            raise RunnerLost("the runner sent a malformed reply (problem)")
        if problem:
            return StructureMismatch(problem[:2000])
        if outs is not None and self.bracketed and self.link.last_undelivered:
            return StructureMismatch(self.link.last_undelivered)
        if outs is None:
            outs = [v.clone() for v in views(self.link.arenas["outputs"].tensor, self.out_slots)]
        return rebuilt(outs, self.container)

    def __call__(self, *args: Any) -> Any:
        """One audited forward in the runner; the outputs as tensors of this process."""
        spec = self._place(args)
        message = {"kind": "forward", "args": spec, "outputs": [s.to_json() for s in self.out_slots],
                   "container": self.container}
        # On the GPU its stream in the runner is held busy for its whole host-side call, as a timed call's is; but for
        # the candidate's first call, the first of every job (so it tells the candidate nothing it cannot count):
        # the kernels it launches for the first time load then, with nothing waiting (a lazy module load may wait
        # for the whole context, so for the gate: see RunnerLink.rehearse)
        gated, self._called = self.bracketed and self._called, True
        reply = self.link.gated(message, "outputs") if gated else self.link.request(message, expect="outputs")
        return self._collect(reply)

    def timed(self, args: list[Any], cover_us: float | None) -> Measurement:
        """One timed call in the runner; its claim is kept only if the trusted clock around it agrees."""
        reply, wall, outs = self._timed_request("timed", args, "timed")
        try:
            claim = float(reply["time_us"])
            runner_wall, enqueue = float(reply["wall_us"]), float(reply["enqueue_us"])
            self.link.flag_changes.extend(_strings(reply.get("flag_changes"), 10, 300))
        except _MALFORMED as exc:
            raise RunnerLost(f"the runner sent a malformed timing ({exc})") from None
        if not (math.isfinite(claim) and MIN_CLAIM_US <= claim <= MAX_TIME_US):
            raise RunnerLost(f"the runner claimed an impossible time ({claim!r} us)")
        if not all(math.isfinite(x) and 0 <= x <= MAX_TIME_US for x in (runner_wall, enqueue)):
            raise RunnerLost(f"the runner sent impossible times ({runner_wall!r}, {enqueue!r} us)")
        (self.link.bracket_us if self.bracketed else self.link.wall_us).append(wall)
        counted = claim
        if self.bracketed:
            self.link.staged_us["timed"].append(self.link.last_staged_us)
            self.link.staged_parts_us["timed"].append(list(self.link.last_staged_parts_us))
            self.link.late_timed.append(self.link.last_late)
            if self.link.last_late:  # its claim leaves out host time the bracket holds: the judge's clock counts
                counted = self.link.count_late("timed", claim, wall)
            else:  # a claim short of what the judge's clock shows counts what it shows
                counted = self.link.count_on_time(claim, wall)
        self.link.claimed_us.append(claim)
        self.link.checked_timed.append(False)
        self.link.handled_us["timed"].append(_number(reply.get("handled_us")))
        self.link.phases_us["timed"].append(_numbers(reply.get("phases_us"), len(RUNNER_PHASES)))
        outputs = self._collect(reply, outs)
        return Measurement(outputs, counted, max(runner_wall, 0.0), max(enqueue, 0.0))

    def calibrate(self, args: list[Any], rounds: int = CALIBRATION_ROUNDS,
                  between: Callable[[], None] | None = None) -> None:
        """Timed calls of an empty forward in the runner, before it loads the candidate: their cost.

        The runner's code alone answers them (no candidate is in its process yet), so its claims are true and
        the wall time beyond them is what every timed request costs besides the forward itself. ``between``,
        when given, runs here before each call, as the baselines' turns will run between the timed calls.

        Called again before the candidate loads, the round whose empty calls cost less (median) stands, and each
        round's median is kept (``RunnerLink.calibration_rounds_us``): a transient on the GPU (another process's
        teardown, a clock change) only lengthens a call, and a round taken in one would make honest calls look
        short of an empty call's cost (H200, session 24: 837.2 us against 671-672 us in the jobs around it).
        """
        gaps: list[float] = []
        staged: list[float] = []
        parts: list[list[float]] = []
        for _ in range(rounds):
            if between is not None:
                between()
                if self.link.arenas and self.link.arenas["inputs"].tensor.is_cuda:
                    torch.cuda.synchronize(self.link.arenas["inputs"].tensor.device)
            reply, wall, _ = self._timed_request("calibrate", args, "calibrated", keep=False)
            try:
                claim = float(reply["time_us"])
            except _MALFORMED as exc:
                raise RunnerLost(f"the runner sent a malformed calibration ({exc})") from None
            if reply.get("problem"):  # no candidate is loaded: an empty call that cannot deliver is the judge's bug,
                # and its cost, without the outputs' copy, would undercount every timed call's
                why = _text(reply["problem"], 300)
                raise RunnerLost(f"the runner's empty call could not deliver its outputs ({why})")
            if math.isfinite(claim) and 0 <= claim <= wall:
                gaps.append(wall - claim)
                staged.append(self.link.last_staged_us)
                parts.append(list(self.link.last_staged_parts_us))
                self.link.handled_us["calibrate"].append(_number(reply.get("handled_us")))
                self.link.phases_us["calibrate"].append(_numbers(reply.get("phases_us"), len(RUNNER_PHASES)))
        if not gaps:
            return
        self.link.calibration_rounds_us.append(median(gaps))
        kept = self.link.calibration_gap_us if self.bracketed else self.link.calibration_us
        if not kept or median(gaps) < median(kept):
            kept[:] = gaps
            if self.bracketed:
                self.link.staged_us["calibrate"][:] = staged
                self.link.staged_parts_us["calibrate"][:] = parts

    def series_size(self, args: list[Any]) -> int:
        """How many calls a series holds for input sets like ``args`` (below 2: none is taken).

        :data:`SERIES_CALLS`, or fewer where that many input and output sets would pass :data:`SERIES_ARENA_BYTES`.
        """
        set_bytes = layout([a for a in args if isinstance(a, torch.Tensor)])[1] + self.out_bytes
        return min(SERIES_CALLS, SERIES_ARENA_BYTES // max(set_bytes, 1))

    def _series_request(self, kind: str, sets: list[list[Any]],
                        expect: str) -> tuple[dict[str, Any], list[float], list[torch.Tensor], list[list[Any]]]:
        """One series request: the reply, each call's interval on the trusted clock, its outputs and its inputs.

        A call's interval runs from the done of the call ahead of it (the first's: from its go) to its own done
        (:attr:`RunnerLink.last_intervals_us`). The outputs come flat, set after set, and each call's copy of its
        inputs beside them, both as they were when the call signalled done. The calls are chained
        (:mod:`cudagym.judge.split.signals`): each call's input set is placed only after the call ahead of it is
        done and its outputs and inputs are copied out, so the runner never holds a later set while an earlier
        call's answer is still open. On the host path the runner says "done" for each call over the channel and
        gets its go back.
        """
        flat = [t for args in sets for t in args if isinstance(t, torch.Tensor)]
        slots, nbytes = layout(flat)
        self._series_set_bytes = layout([t for t in sets[0] if isinstance(t, torch.Tensor)])[1]
        heap = self.bracketed and self.link.heap is not None  # the outputs read from the heap, not from the arena
        self.link.ensure_arenas(nbytes, (1 if heap else len(sets)) * self.out_bytes)
        inputs, outputs = self.link.arenas["inputs"].tensor, self.link.arenas["outputs"].tensor
        items, own, tensors, plain, at = [], [], [], [], 0
        for k, args in enumerate(sets):
            is_tensor = [isinstance(a, torch.Tensor) for a in args]
            own.append(slots[at:at + sum(is_tensor)])
            tensors.append([a for a in args if isinstance(a, torch.Tensor)])
            plain.append(([None if t else a for a, t in zip(args, is_tensor, strict=True)], is_tensor))
            items.append({"args": _args_spec(args, own[k]), "outputs": [o.to_json() for o in self._series_slots(k)]})
            at += len(own[k])
        outs: list[torch.Tensor] = []
        seen: list[list[Any]] = []
        self._series_read = []

        def stage(placed: Callable[[], None] | None = None) -> None:
            place(inputs, own[0], tensors[0])
            if placed is not None:
                placed()
            outputs.fill_(0xFF)  # nothing of an earlier call stays readable as an answer

        def between(k: int) -> None:  # call k is done: what it left, then the next call's inputs
            if heap:  # copied out of the heap from where the runner said, before the next call can reuse it
                got, read = self.link.gather(k, self.out_slots)
                outs.extend(got)
                self._series_read.append(read)
            else:
                outs.extend(v.clone() for v in views(outputs, self._series_slots(k)))
            copies = iter([v.clone() for v in views(inputs, own[k])])
            values, is_tensor = plain[k]
            seen.append([next(copies) if t else v for v, t in zip(values, is_tensor, strict=True)])
            if k + 1 < len(sets):
                place(inputs, own[k + 1], tensors[k + 1])

        message = {"kind": kind, "sets": items, "container": self.container}
        if self.bracketed:
            wait = min(len(sets) * self.link.arm_wait_s, ARM_WAIT_MAX_S)  # each call as long to queue as one alone
            if heap:  # between's gathers run inside the bracket: their kernels loaded before it (rehearse)
                self.link.rehearse(("series gather", tuple(self.out_slots)), None, self.out_slots)
            reply, _, _ = self.link.bracketed(message, stage, [], expect, False, wait, calls=len(sets),
                                              between=between)
            return reply, self.link.last_intervals_us, outs, seen
        stage()
        if inputs.is_cuda:
            torch.cuda.synchronize(inputs.device)
        def between_here(k: int) -> None:
            between(k)
            if inputs.is_cuda:  # the next call's inputs in place before its go
                torch.cuda.synchronize(inputs.device)

        reply = self.link.chained_request(message, len(sets), between_here, expect)
        return reply, self.link.last_intervals_us, outs, seen

    def calibrate_series(self, args: list[Any], rounds: int = SERIES_CALIBRATION_ROUNDS, loaded: bool = False) -> None:
        """Series of empty forwards in the runner: what a series' call costs beside the call itself.

        See :meth:`series`; nothing is taken where :meth:`series_size` is below 2. Before the candidate loads
        the runner's code alone answers them, so their claims (each empty call's own time) are true. Called
        again, the calibration whose calls cost less (median) stands, as with :meth:`calibrate`. ``loaded``: the
        candidate is in the runner now, so its claims are not read (the empty call's own time is the one measured
        before it loaded) and its process can only make an empty series dearer, which does not stand, or cheaper,
        which raises what its own series show; a first calibration that a busy host made dear then does not lower
        every reading.
        """
        count = self.link.series_calls or self.series_size(args)
        if count < 2 or (loaded and not self.link.series_gap_us):
            return
        gaps: list[float] = []
        for _ in range(rounds):
            reply, intervals, _, _ = self._series_request("calibrate_series", [args] * count, "series_calibrated")
            if reply.get("problem") and not loaded:  # before the candidate loads, the judge's bug (see calibrate)
                raise RunnerLost(f"the runner's empty series could not deliver its outputs "
                                 f"({_text(reply['problem'], 300)})")
            if reply.get("problem") or len(intervals) != count:
                continue  # no reading (with the candidate loaded, its doing: the first calibration stands)
            if loaded:
                gaps.append(quantile(intervals, SERIES_QUANTILE) - self.link.series_empty_us)
                continue
            claims = _numbers(reply.get("times_us"), count)
            if min(claims) >= 0 and all(c <= i for c, i in zip(claims, intervals, strict=True)):
                gaps.append(quantile([i - c for c, i in zip(claims, intervals, strict=True)], SERIES_QUANTILE))
                self.link.series_empty_claims_us.append(median(claims))
        if not loaded:  # loaded, the series follows in arenas of the same size (and gives them back)
            self.end_series()
        if not gaps:
            return
        self.link.series_calls = count
        self.link.series_rounds_us.append(median(gaps))
        if not self.link.series_gap_us or median(gaps) < median(self.link.series_gap_us):
            self.link.series_gap_us[:] = gaps

    def series(self, sets: list[list[Any]]) -> SeriesReading:
        """The candidate called once on each input set, back to back in one request; what the judge's clock read.

        Needs :meth:`calibrate_series` first, with as many sets as it calibrated (``link.series_calls``).
        """
        count = self.link.series_calls
        if count < 2 or len(sets) != count:
            raise ValueError(f"a series of {len(sets)} call(s) was not calibrated (calibrated: {count})")
        reply, intervals, outs, self._series_seen = self._series_request("series", sets, "series_timed")
        self.link.flag_changes.extend(_strings(reply.get("flag_changes"), 10, 300))
        problem = reply.get("problem", "")
        if not isinstance(problem, str):
            raise RunnerLost("the runner sent a malformed reply (problem)")
        n = len(self.out_slots)
        outputs: list[Any] = []
        read = [bool(r.item()) for r in self._series_read]
        for k in range(count):  # every call's outputs were copied out as it said done (or as the series ended)
            if problem:
                outputs.append(StructureMismatch(problem[:2000]))
            elif read and not read[k]:
                outputs.append(StructureMismatch(undelivered(k)))
            else:
                outputs.append(rebuilt(outs[k * n:(k + 1) * n], self.container))
        return SeriesReading(outputs, series_work_us(intervals, median(self.link.series_gap_us)),
                             self.bracketed and self.link.last_late)

    def end_series(self) -> None:
        """The arenas back to one input set (the latest series') and one output set (a series held many)."""
        self.link.fit_arenas(self._series_set_bytes, self.out_bytes)

    def _series_slots(self, k: int) -> list[Slot]:
        return [Slot(s.offset + k * self.out_bytes, s.shape, s.dtype) for s in self.out_slots]

    def time_reference(self, args: list[Any], runs: int, warmup: int, budget_s: float,
                       enough: Callable[[list[float]], bool] | None = None, batch: int = 0,
                       cover: Callable[[list[float]], float | None] | None = None) -> list[float]:
        """The task's reference timed in the runner, before it loads the candidate: the runner's own claims (µs).

        No candidate code is in the runner's process yet, so its claims are the reference's time there; a claim
        the trusted clock around it contradicts (beyond that clock, or not a time) is dropped. ``warmup`` calls
        go first, untimed, back to back in one request (:meth:`warm_reference`); the timed calls stop early once
        ``enough`` says so of the claims kept, or, after 5, once ``budget_s`` has passed. A call not queued
        before its go counts as a late candidate call does (:func:`late_charge`), so the two are timed alike.

        With ``batch`` > 0, once at least two calls have gone as requests of their own and none after the first
        was late, the runner times the rest ``batch`` calls a request in its own loop
        (``RunnerLink.reference_batched`` then says how many). ``cover``, given the host times those single
        calls took to queue, says how long a launch cover the runner puts before each batched call (``None``:
        its host outlasts any cover allowed, and every call stays a request of its own, queued in full before its
        go). A batched call whose host outlasted its cover is dropped (its sample holds host time); a batch
        whose claims this process's clock around the request contradicts, or that lost half its calls so, is
        dropped whole, and the calls after it go one a request again.
        """
        kept: list[float] = []
        began = time.monotonic()
        if warmup > 0:
            self.warm_reference(args, warmup)
        single = min(2 if batch > 0 else runs, runs)
        late_after_first = False
        enqueued: list[float] = []
        for i in range(single):
            reply, wall, _ = self._timed_request("reference", args, "reference_timed", keep=False)
            try:
                claim = float(reply["time_us"])
            except _MALFORMED as exc:
                raise RunnerLost(f"the runner sent a malformed reference time ({exc})") from None
            enqueued.append(_number(reply.get("enqueue_us")))
            late = self.bracketed and self.link.last_late
            late_after_first = late_after_first or (late and i > 0)
            if math.isfinite(claim) and 0 < claim <= wall:  # a late one as a late candidate's
                kept.append(self.link.count_late("reference", claim, wall) if late else claim)
                if self.bracketed and not late:
                    self.link.note_shown("reference", claim, wall)
            self.link.handled_us.setdefault("reference", []).append(_number(reply.get("handled_us")))
            self.link.phases_us.setdefault("reference", []).append(_numbers(reply.get("phases_us"), len(RUNNER_PHASES)))
            if (len(kept) >= 5 and time.monotonic() - began > budget_s) or (enough is not None and enough(kept)):
                return kept
        if single >= runs:
            return kept
        cover_us = cover(enqueued) if cover is not None and enqueued and min(enqueued) >= 0 else None
        left = runs - single

        def one_a_request() -> list[float]:  # the calls left, each a request of its own, within what is left of it all
            return kept + self.time_reference(args, left, 0, max(budget_s - (time.monotonic() - began), 0.0),
                                              _after(enough, kept))

        if late_after_first or (cover is not None and cover_us is None):  # it waits for the GPU inside, or its host
            return one_a_request()  # outlasts any cover: queued in full before its go (or timed as a late one)
        self.link.reference_cover_us = cover_us or 0.0
        while left > 0:
            count = min(batch, left)
            spec = self._place(tuple(args))
            t0 = time.perf_counter()
            reply = self.link.request({"kind": "reference_batch", "args": spec, "count": count, "cover_us": cover_us},
                                      expect="reference_batch_timed")
            wall_us = (time.perf_counter() - t0) * 1e6
            self.link.request_s.setdefault("reference_batch", []).append(wall_us / 1e6)
            self.link.handled_us.setdefault("reference_batch", []).append(_number(reply.get("handled_us")))
            claims = _numbers(reply.get("times_us"), count)
            hosts = _numbers(reply.get("enqueue_us"), count)
            covered = [c for c, h in zip(claims, hosts, strict=True) if cover_us is None or 0 <= h <= cover_us]
            if min(claims) <= 0 or sum(claims) > wall_us or 2 * len(covered) < count:
                return one_a_request()
            kept.extend(covered)
            self.link.reference_batched += len(covered)
            left -= count
            if (len(kept) >= 5 and time.monotonic() - began > budget_s) or (enough is not None and enough(kept)):
                break
        return kept

    def warm_reference(self, args: list[Any], count: int) -> None:
        """``count`` untimed calls of the task's reference in the runner, before it loads the candidate.

        One request, not bracketed: the runner builds the reference, calls it back to back and synchronizes. A
        fresh process's first call loads kernels and sets up library handles, and may wait for the GPU while it
        does; as a bracketed call it could not be queued before its go and held this process for the whole arm
        wait (:attr:`RunnerLink.arm_wait_s`). The runner's account (building it, then the calls) is kept in
        :attr:`RunnerLink.reference_warm_us`.
        """
        spec = self._place(tuple(args))
        t0 = time.perf_counter()
        reply = self.link.request({"kind": "reference_warm", "args": spec, "count": count},
                                  expect="reference_warmed")
        self.link.request_s.setdefault("reference_warm", []).append(time.perf_counter() - t0)
        self.link.handled_us.setdefault("reference_warm", []).append(_number(reply.get("handled_us")))
        self.link.reference_warm_us = [_number(reply.get("built_us")), _number(reply.get("calls_us"))]

    def profile(self, args: list[Any], keep: str = "last") -> tuple[KernelProfile, Any]:
        """The runner's kernel profile of the candidate on ``args`` (as it reports it), and one call's outputs.

        The runner profiles forwards on its copy of ``args`` and hands back the ``keep`` (``"last"`` or
        ``"first"``) one's outputs, for the trusted side to compare with the reference's like any other call's.
        """
        from cudagym.judge.harness.context import PROFILE_REPEATS

        spec = self._place(tuple(args))
        reply = self.link.request({"kind": "profile", "args": spec, "outputs": [s.to_json() for s in self.out_slots],
                                   "container": self.container, "keep": keep}, expect="profile")
        try:
            events = tuple(DeviceEvent(str(e["name"])[:300], max(_number(e["duration_us"]), 0.0),
                                       _count(e.get("stream", 0)), bool(e["is_memory_op"]),
                                       max(1, _count(e.get("calls", 1)))) for e in reply["events"][:5000])
            busy = float(reply["busy_us"])
        except _MALFORMED as exc:
            raise RunnerLost(f"the runner sent a malformed profile ({exc})") from None
        if not math.isfinite(busy) or not 0 <= busy <= MAX_TIME_US:
            raise RunnerLost(f"the runner sent a malformed profile (busy time {busy!r})")
        return KernelProfile(events=events, busy_us=busy, repeats=PROFILE_REPEATS), self._collect(reply)

    def hook(self, name: str) -> None:
        """Run the runner's side of a guard hook (``after_correctness``, ``after_timing``)."""
        reply = self.link.request({"kind": "hook", "name": name}, expect="hooked")
        self.link.notes.extend(_strings(reply.get("notes"), 20, 500))


TIMED_REPLY_BYTES = 256 << 10  # a timed call's reply: a few numbers and notes (a large one bought the runner time)
MAX_TIME_US = 1e12  # about 11.6 days: no call of a job lasts that long, so a time beyond it measures nothing
MIN_CLAIM_US = 1.0  # no timed call (a kernel launched, its outputs written) takes less: 5e-324 us was an inf speedup
MAX_NUMBER = 1e16  # any time in us or byte count the runner reports is below this; sums of them stay finite


def _args_spec(args: Sequence[Any], slots: list[Slot]) -> list[dict[str, Any]]:
    """How ``args`` travel to the runner: each tensor as its slot (in order), each plain value as itself.

    Raises:
        TypeError: An argument that is neither.
    """
    spec: list[dict[str, Any]] = []
    tensors = iter(slots)
    for a in args:
        if isinstance(a, torch.Tensor):
            spec.append({"slot": next(tensors).to_json()})
        elif a is None or isinstance(a, (bool, int, float, str)):
            spec.append({"value": a})
        else:
            raise TypeError(f"the task's inputs include a {type(a).__name__}, which cannot be sent to the runner")
    return spec


def _number(value: Any) -> float:
    """A finite number the runner sent, within +-:data:`MAX_NUMBER`, or -1.0."""
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        return -1.0
    return x if math.isfinite(x) and abs(x) <= MAX_NUMBER else -1.0


def _after(enough: Callable[[list[float]], bool] | None,
           before: list[float]) -> Callable[[list[float]], bool] | None:
    """``enough`` judged on ``before`` and the claims a later part of the same timing adds to them."""
    if enough is None:
        return None
    return lambda more: enough(before + more)


def _numbers(value: Any, count: int) -> list[float]:
    """``count`` finite numbers the runner sent (-1.0 for each one missing or malformed)."""
    items = value if isinstance(value, list) else []
    return [_number(items[i]) if i < len(items) else -1.0 for i in range(count)]


MAX_REPORTED_BYTES = 1 << 50  # a PiB: no GPU holds more; a larger count is not a measurement


def _count(value: Any) -> int:
    """A byte count the runner sent (0 for anything but a finite number from 0 to :data:`MAX_REPORTED_BYTES`)."""
    x = _number(value)
    return int(x) if 0 <= x <= MAX_REPORTED_BYTES else 0


def _strings(value: Any, limit: int, length: int) -> list[str]:
    """At most ``limit`` strings of at most ``length`` characters from what the runner sent (anything else: none).

    Only strings are kept: turning an object of the runner's into text (a list of 150,000 numbers) took the judge
    longer than the candidate's call, a window in which its runner wrote its outputs after it had replied.
    """
    if not isinstance(value, list):
        return []
    return [_text(v, length) for v in value[:limit] if isinstance(v, str)]


def _text(value: Any, length: int) -> str:
    """A string the runner sent, cut to ``length`` and made valid UTF-8 (a lone surrogate escaped); else its type."""
    text = value[:length] if isinstance(value, str) else f"<{type(value).__name__}>"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
