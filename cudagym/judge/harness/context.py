"""The state of one evaluation, shared by the runner and the guards, with the helpers that run code.

Every candidate forward that the judge checks goes through :meth:`EvalContext.run_candidate`: the free
memory is scrubbed first, the guards' ``forward_scope`` context managers wrap the call, their
``after_forward`` hooks run before anything synchronises, then the device is synchronised so asynchronous
kernel errors surface here, attributed to the candidate. :meth:`EvalContext.verify_seed` is one
correctness check: the candidate runs first on its own copy of a seeded input set, then the reference on
the set itself (still pristine), so the candidate never runs on memory where this input's reference
results lived, and no third copy is held. In the split the runner's input arena is the candidate's copy
(:meth:`EvalContext.candidate_copy`): the trusted process holds no copy of its own.
"""

from __future__ import annotations

import secrets
import time
import types
import typing
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from cudagym.judge.guards.base import Guard
from cudagym.judge.harness.correctness import Tolerance, compare_outputs, nonfinite_count
from cudagym.judge.harness.failures import (
    CandidateFailure,
    TaskProblem,
    TaskTooLarge,
    candidate_traceback,
    exception_line,
    is_cuda_error,
    is_out_of_memory,
)
from cudagym.judge.harness.inputs import clone_tree, generate_inputs, poison_tree_, tensors_in, trees_bitwise_equal
from cudagym.judge.harness.integrity import PRISTINE, AttributeSnapshot, TorchFlags, protocol_flags
from cudagym.judge.harness.loading import Reference
from cudagym.judge.harness.memory import DeviceMemoryMeter, PhaseClock, any_negative
from cudagym.judge.harness.profiling import DeviceEvent, KernelProfile, profile_forward
from cudagym.judge.harness.scrub import scrub_free_blocks
from cudagym.judge.harness.timing import Cover, TimingRun
from cudagym.judge.job import Job
from cudagym.judge.protocol import Protocol
from cudagym.judge.records import InputCheck, KernelTime, TimingStats, Violation, Yardstick
from cudagym.judge.split.channel import RunnerLost

if typing.TYPE_CHECKING:  # pragma: no cover
    from cudagym.judge.harness.cover import OwnGate

PROFILE_REPEATS = 3  # forward passes per kernel profile


@dataclass
class ForwardCall:
    """One audited candidate forward, as the guards' forward hooks see it."""

    args: list[Any]
    purpose: str
    stream: Any = None  # the current CUDA stream before the call (None on the CPU)
    outputs: Any = None
    scratch: dict[str, Any] = field(default_factory=dict)  # per-guard state between scope and after_forward


class ForwardGate(typing.Protocol):
    """Holds an audited forward's stream busy for the whole host-side call (the split's runner on a GPU)."""

    def close(self, stream: Any) -> None:
        """Queue on ``stream`` a wait that lasts until :meth:`open`."""

    def open(self) -> None:
        """Release what :meth:`close` queued (the forward has returned or raised)."""

    @property
    def covers(self) -> bool:
        """Whether :meth:`close` queued the launch cover too."""


@dataclass
class CheckRecord:
    """One input set compared, as the guards' ``on_check`` hooks see it (tensors are freed afterwards).

    No pristine copy of the inputs is kept (memory: see :mod:`cudagym.judge.harness.memory`); the harness
    compares the candidate's copy with the reference's before the reference runs, and records the answer.
    """

    index: int
    seed: int
    purpose: str
    args: list[Any]  # the candidate's copy, after its call
    ref_args: list[Any]  # the reference's copy (pristine until the reference ran), after its call
    outputs: Any
    reference: Any
    check: InputCheck
    inputs_changed: bool = False  # the candidate's call changed its copy of the inputs
    reference_writes_inputs: bool = False  # ... and the reference's calls change their inputs too
    changed_inputs: tuple[int, ...] = ()  # which arguments the candidate's call changed


class EvalContext:
    """Everything one evaluation knows; created by the runner, read and extended by the guards."""

    def __init__(self, job: Job, device: torch.device, guards: list[Guard], workdir: Path) -> None:
        self.job = job
        self.protocol: Protocol = job.protocol
        self.device = device
        self.guards = guards
        self.workdir = workdir
        self.tolerance = Tolerance(job.protocol.atol, job.protocol.rtol, job.protocol.atol_scale)
        self.flags: TorchFlags = protocol_flags(job.protocol.matmul_tf32, job.protocol.cudnn_tf32)
        self.sources: dict[str, str] = {}
        self.reference: Reference | None = None
        self.module: types.ModuleType | None = None
        self.ref_model: torch.nn.Module | None = None
        self.cand_model: torch.nn.Module | None = None
        self.snapshot: AttributeSnapshot | None = None
        self.modules_before: dict[str, Any] = {}  # sys.modules as the candidate's code found it
        self.checks: list[InputCheck] = []
        self.violations: list[Violation] = []
        self.notes: list[str] = []
        self.timing: TimingRun | None = None
        self.timed: dict[str, TimingStats] = {}
        self.speedup_vs_eager = 0.0
        self.speedup_vs_compile = 0.0
        self.compile_error = ""  # why the torch.compile baseline was not timed (its exception's line)
        self.spot_failures: list[str] = []  # timed (and audited) calls after the correctness runs that were wrong
        self.profiled_failures: list[str] = []  # the profiled forwards, when their outputs were wrong
        self.flag_changes: list[str] = []  # torch switches the candidate changed during timing
        self.kernels: tuple[KernelTime, ...] = ()
        self.kernel_busy_us = 0.0  # the profiled forward's busy GPU time (overlapping kernels once)
        self.started = time.monotonic()
        self.output_dtype = torch.float32  # of the reference's first output: the scrub pattern's dtype
        self._kernel_profile: KernelProfile | None = None
        self._model_ptrs: set[int] | None = None
        self.cover: Cover | None = None  # the protocol's launch cover, when it has one (setup_cover)
        self.meter = DeviceMemoryMeter(device)  # replaced by a started one when the evaluation starts
        self.clock = PhaseClock()  # wall time per phase: load, check, timing, compile, profile
        self.reference_peak_bytes = 0  # peak device memory after the priming reference run (the task's own need)
        # the split on a GPU: what the other processes on the device held as the candidate's code loaded in its runner
        self.others_at_candidate_load: int | None = None
        self.compiled_peak_bytes = 0  # the compile warm-up's peak: the torch.compile reference's own need
        self.io_bytes = (0, 0)  # bytes of one input set and of its reference outputs
        self.flush_bytes = 0  # the L2 flush buffer's, once allocated
        self.temporaries_bytes = 0  # the most a comparison of the reference's outputs holds beside them
        self.remote: Any = None  # the runner link when the candidate runs in another process (the split)
        self.side = "both"  # "trusted" / "runner" in the split; "both" when one process does everything
        self.reference_aliases: dict[str, bool] = {}  # does the reference's output alias an input, weights, ...
        self.primed = False  # the priming reference run is done
        self.reference_writes_inputs = False  # the priming reference run changed its inputs (found then)
        self.paired: tuple[float, int] | None = None  # paired speedup vs eager and its rounds, when interleaved
        self.runner_reference = TimingStats()  # the reference timed in the runner before the candidate loaded
        self.cached_yardstick: Yardstick | None = None  # that time from the baseline cache (a clean job's), if so
        self.eager_beside_yardstick = TimingStats()  # eager here around that yardstick (yardstick_beside_eager)
        self.runner_reference_disputed = ""  # why the judge's clock disputes its on-time claims ("" if it agrees)
        self.baseline_scale = 1.0  # the speedups' yardstick factor on the baselines' times (1: not applied)
        self.runner_job: Job = job  # the job as the runner sees it (its own paths), in the split
        # the split's runner on a GPU: the gate of the audited forward being served (None: no gate)
        self.gate: ForwardGate | None = None
        self._gate_closed: ForwardGate | None = None  # that gate while it holds the forward's stream (open_gate)
        self._own_gate: OwnGate | None = None  # with no runner: the gate this process opens (_gate_for_call)
        self._audited_forwards = 0

    # ------------------------------------------------------------------------------------- reporting

    def flag(self, guard: str, message: str) -> None:
        """Record a rule violation by ``guard`` (once per distinct message)."""
        violation = Violation(guard, message)
        if violation not in self.violations:
            self.violations.append(violation)

    def flagged(self, guard: str) -> bool:
        """True when ``guard`` has flagged this evaluation."""
        return any(v.guard == guard for v in self.violations)

    def note(self, text: str) -> None:
        """Add a line to the result's log."""
        self.notes.append(text)

    @property
    def on_gpu(self) -> bool:
        """True when evaluating on a CUDA device (False on the CPU test path)."""
        return self.device.type == "cuda"

    # ----------------------------------------------------------------------------------- running code

    def make_inputs(self, seed: int, on_device: bool = True) -> list[Any]:
        """A seeded input set, created directly on the device.

        On the GPU, ``get_inputs()`` runs with the device as torch's default, so its ``torch.rand``/
        ``torch.randn`` draw from the GPU generator: a 256 MB input set takes a millisecond instead of the
        CPU's half second. The values are a function of the seed, the torch version and the GPU, like the
        baseline times (see :func:`~cudagym.judge.harness.inputs.generate_inputs`).
        """
        assert self.reference is not None
        try:
            return generate_inputs(self.reference.get_inputs, seed, self.device, on_device=on_device)
        except Exception as exc:
            if is_cuda_error(exc):
                raise
            if is_out_of_memory(exc):
                raise TaskTooLarge(f"task {self.job.task.id}: its input set does not fit in device memory "
                                   f"({exception_line(exc)})") from exc
            raise TaskProblem(f"task {self.job.task.id}: get_inputs() raised {type(exc).__name__}: {exc}") from exc

    def setup_cover(self) -> None:
        """Calibrate the protocol's launch cover on this GPU.

        Raises:
            RuntimeError: It could not be set up (the judge's failure, not the candidate's).
        """
        from cudagym.judge.harness.cover import LaunchCover

        cover_us = self.protocol.launch_cover_us
        try:
            self.cover = LaunchCover(self.device, cover_us)
        except (OSError, RuntimeError, ValueError) as exc:
            raise RuntimeError(f"the protocol's launch cover ({cover_us:g} us) could not be set up: {exc}") from exc

    def run_candidate(self, args: list[Any], purpose: str) -> Any:
        """One audited forward of the candidate on ``args`` (see the module docstring).

        With a launch cover, the forward starts behind one, as a timed forward does: the candidate cannot tell
        audited calls from timed ones by the stream being busy. With a :attr:`gate` (the split's runner), the
        stream waits behind it until the forward has returned, as a timed call's waits for the judge's go (with a
        cover, the cover spins on until then, holding the SMs).
        """
        assert self.cand_model is not None
        if self.on_gpu and self.remote is None:  # in the split the runner scrubs its own memory
            scrub_free_blocks(self.device, self.output_dtype)
        call = ForwardCall(args=args, purpose=purpose, stream=self.current_stream())
        model, cover, gate = self.cand_model, (self.cover if self.remote is None else None), self._gate_for_call()

        if gate is not None and gate.covers:
            cover = None  # the gate's wait is the cover

        def forward() -> Any:
            if cover is not None:
                cover.launch(call.stream)
            return model(*args)

        try:
            with ExitStack() as stack:
                for guard in self.guards:
                    scope = guard.forward_scope(self, call)
                    if scope is not None:
                        stack.enter_context(scope)
                if gate is not None:
                    # A kernel the candidate launches for the first time while this stream waits may make CUDA load
                    # its module, and a module load may wait for the whole context (lazy loading): the trusted side
                    # opens the gate itself after its arm wait, so the forward is delayed, never hung (and the
                    # candidate's first call, which loads most of them, is not gated).
                    gate.close(call.stream)
                    self._gate_closed = gate
                call.outputs = self.call_candidate(forward, "forward")
            try:
                for guard in self.guards:
                    if not guard.reads_behind_gate:
                        self.open_gate()  # the hook may wait for the forward's stream
                    guard.after_forward(self, call)
                self.open_gate()
                PRISTINE.sync(self.device)  # asynchronous kernel errors surface here, as the candidate's
            except Exception as exc:
                if is_cuda_error(exc):
                    raise CandidateFailure("forward", _cuda_text(exc), cuda=True) from exc
                raise
        finally:
            self.open_gate()  # whatever happened: the stream must not wait for the judge's fallback
        return call.outputs

    def _gate_for_call(self) -> ForwardGate | None:
        """The gate of the audited forward about to run (``None``: none).

        The runner's (:attr:`gate`); else, in one process on a GPU with a launch cover, this process's own from the
        second forward on (the first, ungated, loads the candidate's kernels, as the runner's first does).
        """
        self._audited_forwards += 1
        if self.gate is not None or self.side != "both" or self.remote is not None or not self.on_gpu:
            return self.gate
        from cudagym.judge.harness.cover import LaunchCover, OwnGate
        from cudagym.judge.harness.runner import arm_wait_s
        from cudagym.judge.split.remote import ARM_WAIT_S

        if not isinstance(self.cover, LaunchCover) or self._audited_forwards < 2:
            return None
        if self._own_gate is None:
            wait_s = arm_wait_s(self.protocol)  # as long as the split's judge waits for the runner to open its gate
            self._own_gate = OwnGate(self.device, self.cover, wait_s, min(wait_s, ARM_WAIT_S))
        return self._own_gate

    @property
    def own_gate(self) -> OwnGate | None:
        """With no runner on a GPU: the gate this process put its audited forwards behind, once it made one."""
        return self._own_gate

    def open_gate(self) -> None:
        """Open the audited forward's gate (:attr:`gate`) where it still holds the forward's stream; else nothing.

        Once the forward returned it stays closed only for the hooks that queue reads behind the forward's work
        (``Guard.reads_behind_gate``): those reads then run right behind that work, beside whatever the forward left
        running on other streams, which cannot have started before the gate opened (under a launch cover).
        """
        gate, self._gate_closed = self._gate_closed, None
        if gate is not None:
            gate.open()

    def call_candidate(self, fn: Callable[[], Any], stage: str) -> Any:
        """Call candidate code; its exceptions become a :class:`CandidateFailure` for ``stage``."""
        try:
            return fn()
        except RunnerLost:  # the split: the runner itself failed; the runner (pipeline) reports it as such
            raise
        except (Exception, SystemExit) as exc:  # sys.exit() in candidate code is a failure, not a worker exit
            cuda = is_cuda_error(exc)
            text = _cuda_text(exc) if cuda else candidate_traceback(exc, (self.workdir.resolve(),))
            raise CandidateFailure(stage, text, cuda=cuda) from exc

    def run_reference(self, args: list[Any]) -> Any:
        """The reference model on ``args``, under the protocol's precision switches.

        Raises:
            TaskProblem: The reference raised (a task problem, not the agent's).
        """
        assert self.ref_model is not None
        self.flags.apply()
        try:
            outputs = self.ref_model(*args)
            PRISTINE.sync(self.device)
        except Exception as exc:
            if is_cuda_error(exc):
                raise
            if is_out_of_memory(exc):
                raise TaskTooLarge(f"task {self.job.task.id}: the reference forward does not fit in device memory "
                                   f"({exception_line(exc)})") from exc
            raise TaskProblem(f"task {self.job.task.id}: the reference forward raised {type(exc).__name__}: "
                              f"{exc}") from exc
        return outputs

    def inputs_at(self, seed: int, scale: float = 1.0) -> list[Any]:
        """The input set of ``seed``, its signed floating-point tensors multiplied by ``scale``."""
        inputs = self.make_inputs(seed)
        if scale != 1.0:
            for tensor in signed_float_tensors(inputs):
                tensor.mul_(scale)
        return inputs

    def verify_seed(self, seed: int, index: int, purpose: str, scale: float = 1.0) -> InputCheck:
        """Check the candidate against the reference on the input set of ``seed``; runs ``on_check`` hooks.

        ``scale`` multiplies the set's signed floating-point inputs (the protocol's ``scaled_inputs``).

        On the device at once: the reference's copy of the inputs, the candidate's copy, the candidate's
        outputs and the reference's (the bound of :mod:`cudagym.judge.harness.memory`). The candidate runs
        first, so it never runs on memory where this input's reference results lived.

        Raises:
            TaskProblem: The reference output is not finite (the task is invalid for this input).
        """
        ref_args = self.inputs_at(seed, scale)  # pristine until the reference runs on it, after the candidate
        handed = self.candidate_copy(ref_args)
        outputs = self.run_candidate(handed, purpose)
        args = self.candidate_seen(handed)  # the candidate's copy after its call
        changed = tuple(i for i, (a, b) in enumerate(zip(args, ref_args, strict=True)) if not trees_bitwise_equal(a, b))
        reference = self.run_reference(ref_args)
        bad = nonfinite_count(reference)
        if bad:
            raise TaskProblem(f"task {self.job.task.id}: the reference output has {bad} NaN/Inf values for "
                              f"seed {seed}; the task is invalid (its reference must be finite)")
        check = compare_outputs(reference, outputs, self.tolerance, index=index, seed=seed)
        if not check.passed:
            self.check_reference_repeats(seed, scale, reference)
        writes = bool(changed) and self.reference_writes_inputs
        record = CheckRecord(index, seed, purpose, args, ref_args, outputs, reference, check, bool(changed), writes,
                             changed)
        for guard in self.guards:
            guard.on_check(self, record)
        self.poison_results(reference)
        return check

    def check_reference_repeats(self, seed: int, scale: float, reference: Any) -> None:
        """After a failed check: the reference once more on the same input set, which must give the same outputs.

        A reference whose outputs are not a function of its inputs (``torch.rand`` in its forward, dropout in
        training mode, state that changes call to call) fails every candidate, the reference itself included:
        that is the task's problem (reward 0), not the agent's -1. Where the second run does not fit in device
        memory, the check stands as it was.

        Raises:
            TaskProblem: The two runs differ beyond the tolerance.
        """
        try:
            inputs = self.inputs_at(seed, scale)
            # the random number generators somewhere else than where drawing the set left them: a forward that
            # draws from them (the candidate's process cannot draw the numbers this process did) shows it
            torch.manual_seed(secrets.randbits(62))
            again = self.run_reference(inputs)
        except TaskProblem:
            raise
        except Exception as exc:
            if is_out_of_memory(exc):
                self.note(f"seed {seed}: the reference's repeat (is it deterministic?) did not fit; not taken")
                return
            raise
        same = compare_outputs(reference, again, self.tolerance, index=-1, seed=seed)
        self.poison_results(again)
        if not same.passed:
            raise TaskProblem(f"task {self.job.task.id}: the reference gave other outputs on the same input set (seed "
                              f"{seed}, a second run: {same.message[:300]}); its outputs (or its get_inputs()) are "
                              "not a function of the seed, so no candidate can be checked against them")

    def candidate_copy(self, inputs: list[Any]) -> list[Any]:
        """The input set to hand the candidate: a copy of its own here; ``inputs`` itself in the split.

        In the split the call copies the set into the runner's input arena and only reads ``inputs``: the
        arena is the candidate's copy, and the trusted process holds no second one.
        """
        return inputs if self.remote is not None else clone_tree(inputs)

    def candidate_seen(self, handed: list[Any]) -> list[Any]:
        """The candidate's copy of the inputs after its last call, given what :meth:`candidate_copy` handed it.

        Here that copy itself; in the split the input arena's views (valid until the next candidate call).
        """
        if self.remote is None:
            return handed
        remote: Any = self.cand_model
        return list(remote.inputs_seen())

    def poison_results(self, tree: Any) -> None:
        """Overwrite the reference's (or a baseline's) result tensors with poison before they are freed.

        A function of its own, so no loop variable outlives it holding a result (on the GPU, gigabytes).
        """
        for tensor in tensors_in(tree):
            if self.may_poison(tensor):
                poison_tree_(tensor)  # freed results hold poison, never answers

    def current_stream(self) -> Any:
        """The current CUDA stream (None on the CPU)."""
        return PRISTINE.current_stream(self.device) if self.on_gpu else None

    def kernel_events(self) -> list[DeviceEvent]:
        """The device events of :meth:`kernel_profile`, one row per kernel name and stream."""
        return list(self.kernel_profile().events)

    def kernel_profile(self) -> KernelProfile:
        """The profile of :data:`PROFILE_REPEATS` candidate forwards on the first input set (cached).

        The profiled forwards are checked like timed ones: one call's outputs (the last one's; the first one's
        where the task's forward writes its inputs) are compared here with the reference's on the same inputs, so
        a candidate that computes otherwise while a profiler watches is wrong (a spot failure), not a clean profile.
        """
        if self._kernel_profile is None:
            seed = self.protocol.seed
            # the candidate is warm by now (after its correctness runs or timing): every profiled call counts;
            # where the task's forward writes its inputs, the first call's outputs are the ones checked
            keep = "first" if self.reference_writes_inputs else "last"
            args = self.make_inputs(seed)
            if self.remote is not None:
                remote_model: Any = self.cand_model
                profile, outputs = remote_model.profile(args, keep)  # the runner works on a copy in its arena
            else:
                profile, outputs = self.profile_candidate(args, keep)
                args.clear()  # the candidate had these (one set at a time on the device): the reference gets its own
                args = self.make_inputs(seed)
            self._check_profiled(seed, args, outputs)
            self._kernel_profile = profile
        return self._kernel_profile

    def profile_candidate(self, args: list[Any], keep: str, limit: int = 2000) -> tuple[KernelProfile, Any]:
        """:data:`PROFILE_REPEATS` candidate forwards on ``args`` under the profiler, in this process.

        Returns their profile (at most ``limit`` rows; empty on the CPU) and the ``keep`` (``"first"`` or ``"last"``)
        call's outputs.
        """
        model = self.cand_model
        assert model is not None
        # Keeping the first call's outputs (a forward that writes its inputs): each later call gets a copy of its own,
        # made before the profiler starts (no copy kernel among the profiled ones), so an output that is the input it
        # wrote is not written again by the calls after it.
        sets = iter([args, *(clone_tree(args) for _ in range(PROFILE_REPEATS - 1))] if keep == "first" else [])
        events, outputs = self.call_candidate(
            lambda: profile_forward(lambda: model(*next(sets, args)), self.device, PROFILE_REPEATS, keep), "forward")
        return KernelProfile.of(events if self.on_gpu else [], PROFILE_REPEATS, limit), outputs

    def _check_profiled(self, seed: int, args: list[Any], outputs: Any) -> None:
        """The profiled forwards' outputs against the reference's; a mismatch is a spot failure."""
        reference = self.run_reference(clone_tree(args) if self.reference_writes_inputs else args)
        check = compare_outputs(reference, outputs, self.tolerance, seed=seed)
        self.poison_results(reference)
        if not check.passed:
            self.profiled_failures.append(f"seed {seed}: {check.message}")

    def forget_kernel_events(self) -> None:
        """Drop the cached kernel profile; the next :meth:`kernel_profile` profiles again."""
        self._kernel_profile = None

    def elapsed_s(self) -> float:
        """Seconds since this evaluation started."""
        return time.monotonic() - self.started

    def release_models(self) -> None:
        """Drop the models and the candidate module so their memory can be freed."""
        self.ref_model = None
        self.cand_model = None
        self._model_ptrs = None
        self._kernel_profile = None

    def model_storage_ptrs(self) -> set[int]:
        """Storage addresses of every parameter and buffer of both models (never poisoned)."""
        if self._model_ptrs is None:
            ptrs: set[int] = set()
            for model in (self.ref_model, self.cand_model):
                if model is None:
                    continue
                for tensor in [*model.parameters(), *model.buffers()]:
                    ptrs.add(tensor.untyped_storage().data_ptr())
            self._model_ptrs = ptrs
        return self._model_ptrs

    def may_poison(self, tensor: torch.Tensor) -> bool:
        """False for tensors that share storage with a model's weights."""
        return tensor.untyped_storage().data_ptr() not in self.model_storage_ptrs()

    def first_output_dtype(self, outputs: Any) -> torch.dtype:
        """The dtype of the first tensor of an output tree (float32 when there is none)."""
        found = tensors_in(outputs)
        return found[0].dtype if found else torch.float32


def signed_float_tensors(inputs: list[Any]) -> list[torch.Tensor]:
    """The floating-point input tensors that hold negative values (drawn from a signed distribution)."""
    return [t for t in tensors_in(inputs) if t.is_floating_point() and t.numel() and any_negative(t)]


def _cuda_text(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if text.startswith("CUDA error") else f"CUDA error: {text}"
