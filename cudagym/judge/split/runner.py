"""The untrusted runner: ``python -m cudagym.judge.split.runner``, one process per job, in its own sandbox.

It is the only process that loads candidate code. Started ahead of its job (torch imported, CUDA up:
nothing of any candidate yet), it receives one job from the trusted process, times empty calls for the
trusted side's calibration (``calibrate``) and, where the protocol asks, the task's reference (``reference``: the
speedups' yardstick, timed in the process that will time the candidate) while it still holds no candidate code,
loads the solution, and
then only answers requests: run ``ModelNew`` on the inputs the trusted side put in the input arena and
copy what it returned into the output arena (``forward``), the same with the timer around it (``timed``; on the
GPU its outputs stay where they were made, in the heap the trusted side shares, :mod:`cudagym.judge.split.heap`),
calls back to back on input sets of their own (``series``; an empty one as calibration, ``calibrate_series``,
before the candidate loads), a kernel profile (``profile``), and the guard hooks that inspect this process
(``hook``). It never sees a
reference output or a baseline, and what it says can only count against the candidate: the trusted process
compares the bytes itself and checks the claimed times against its own clock.

When the job ends the process exits; nothing of it judges another job.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import math
import os
import sys
import time
import traceback
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from cudagym.judge.guards import escape
from cudagym.judge.sandbox import SandboxPolicy, enter_sandbox, forbid_sysv_ipc, set_cpu_budget
from cudagym.judge.split.channel import Channel, RunnerLost
from cudagym.judge.split.signals import CALL_DONE, CALL_GO, CALL_SPIN_S
from cudagym.judge.split.trace import runner_reports

# what the runner's start spends its time on, in order (reported to the trusted side, which notes it)
LOAD_STAGES = ("setup", "source checks", "reference", "candidate module", "models", "guards")
START_STAGE = "start to ready"  # the runner's own start: from its process's birth to ready (imports, CUDA up)
REFERENCE_WARM_MAX = 100  # the most warm-up calls of the reference one request may ask for
PROFILE_ROWS = 2000  # rows of a profile reply (one per kernel name and stream); the smallest beyond are summed
SERIES_MAX_CALLS = 64  # the most calls one series request may ask for
MAX_GATE = 2 ** 31  # an audited forward's gate round is from 1 to this (the words compare cyclically)


def main(argv: list[str] | None = None) -> int:
    """Enter the sandbox, get ready, serve one job, exit."""
    parser = argparse.ArgumentParser(prog="python -m cudagym.judge.split.runner")
    parser.add_argument("--sock", type=int, required=True)
    parser.add_argument("--root", required=True)
    parser.add_argument("--policy", required=True)
    args = parser.parse_args(argv)
    policy = SandboxPolicy.from_json(args.policy)
    enter_sandbox(policy)
    confined, note = forbid_sysv_ipc()  # segments no process maps would be memory no limit counts
    if not confined:
        print(f"cudagym runner: System V IPC left open: {note}", file=sys.stderr)
    os.environ[escape.WORKER_ROOT_ENV] = args.root
    escape.install()
    channel = Channel.from_fd(args.sock)
    server = _Server(channel, Path(args.root), policy)
    try:
        server.warm()
        server.started_s = process_age_s()
        channel.send({"kind": "ready"})
        server.serve()
    except RunnerLost:
        return 0  # the trusted side went away: nothing to answer
    return 0


class _Server:
    def __init__(self, channel: Channel, root: Path, policy: SandboxPolicy) -> None:
        self.channel = channel
        self.root = root
        self.policy = policy
        self.ctx: Any = None
        self.stack = ExitStack()
        self.arenas: dict[str, Any] = {}
        self.cover: Any = None
        self.timer: Any = None
        self.flusher: Any = None
        self.side: Any = None  # the stream the armed signal and the audited forwards' gates go out on
        self.started_s = 0.0  # from the process's birth to ready
        self.reference: Any = None  # the task's reference, loaded before the candidate (for its timed calls)
        self.reference_model: Any = None  # its Model, dropped before the candidate loads
        self.heap: Any = None  # the heap the trusted side reads outputs from (cudagym.judge.split.heap; GPU path)
        self.heap_library_fd = -1  # the heap's allocator, loaded through /proc/self/fd
        self.delivered: list[Any] = []  # the latest request's outputs as delivered: kept until the next request

    def warm(self) -> None:
        """Import torch and the harness; on a GPU, create the context and calibrate the launch cover."""
        import torch

        import cudagym.judge.harness.runner  # noqa: F401  (the guards and the harness, before any job)

        importlib.import_module("torch._dynamo")  # seconds to import: a job's start should not wait for it
        try:  # the raw format's runtime (0.1-0.2 s to import): in the job's account it was the candidate module's
            importlib.import_module("cupy")
        except ImportError:
            pass  # a raw candidate's load then says how to install it

        if torch.cuda.is_available():
            torch.cuda.init()
            torch.cuda.set_device(0)
            torch.ones(1, device="cuda").add_(1)
        # What the imports made lives as long as the process: kept out of every later collection, the one that frees
        # the reference's code before the candidate's arrives (_start) walks only what the job brought (a full one
        # with torch loaded took 0.13 s here, on the job's clock; what came before the job is never the job's)
        gc.collect()
        gc.freeze()

    def serve(self) -> None:
        """Receive the job, calibrate while no candidate code is loaded, then answer requests until ``end``."""
        import torch

        job = self.channel.receive_pickle()
        self.device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else \
            torch.device("cpu")
        if self.device.type == "cpu":
            torch.set_num_threads(1)  # the CPU test path: see cudagym.judge.split.trusted.run_job_on_cpu
        while True:  # before the candidate loads: arenas and calibration only
            start, fds = self.channel.receive(max_fds=3)
            kind = start.get("kind")
            self._follow_device(start.get("device"))
            if kind == "start":
                break
            t0 = time.perf_counter()
            self.delivered = []
            try:
                if kind == "arenas":
                    reply = self._attach(start, fds)
                elif kind == "heap":
                    reply = self._attach_heap(start, fds)
                elif kind == "calibrate":
                    with self._routed():
                        reply = self._calibrate(job, start)
                elif kind == "calibrate_series":
                    with self._routed():
                        reply = self._calibrate_series(job.protocol, start)
                elif kind == "reference_warm":
                    with self._routed():
                        reply = self._reference_warm(job, start)
                elif kind == "reference":
                    with self._routed():
                        reply = self._timed_reference(job, start)
                elif kind == "reference_batch":
                    with self._routed():
                        reply = self._timed_reference_batch(job, start)
                else:
                    reply = {"kind": "error", "message": f"unknown request {str(kind)[:60]!r} before start"}
            except Exception as exc:
                reply = _failure_reply(exc)
            reply["violations"] = []
            reply["handled_us"] = (time.perf_counter() - t0) * 1e6
            reply["peak_bytes"] = device_peak_bytes(self.device, self.heap)
            if self.heap is not None and runner_reports():
                reply["heap"] = self.heap.allocator.stats()
            self.channel.send(reply)
        reply = self._start(job, start)
        self.channel.send(reply)
        if reply["kind"] != "loaded":
            return
        while True:
            request, fds = self.channel.receive(max_fds=3)
            kind = request.get("kind")
            if kind == "end":
                self.channel.send(self._end())
                return
            t0 = time.perf_counter()
            self.delivered = []
            try:
                with self._routed():  # what the candidate makes while it answers lies in the heap (GPU path)
                    reply = self._answer(kind, request, fds)
            except Exception as exc:  # a candidate failure, or our own: the trusted side decides
                reply = _failure_reply(exc)
            reply["handled_us"] = (time.perf_counter() - t0) * 1e6
            reply["violations"] = self._new_violations()
            reply["peak_bytes"] = device_peak_bytes(self.device, self.heap)
            if self.heap is not None and runner_reports():  # the runner's word on its heap, for the judge's trace only
                reply["heap"] = self.heap.allocator.stats()
            self.channel.send(reply)
            if reply["kind"] == "failure" and reply.get("cuda"):
                return  # a broken CUDA context answers nothing more

    # ------------------------------------------------------------------------------------------ loading

    def _start(self, job: Any, start: dict[str, Any]) -> dict[str, Any]:
        import torch

        from cudagym.judge.guards.base import select_guards, sided
        from cudagym.judge.harness.context import EvalContext
        from cudagym.judge.harness.loading import (
            build_candidate,
            candidate_module,
            load_reference,
            reference_parts,
            unload_reference,
        )
        from cudagym.judge.harness.runner import _take_snapshot

        device = self.device
        self.workdir = job.workdir
        os.chdir(job.workdir)
        set_cpu_budget(self.policy.cpu_time_s)
        artifact = os.path.dirname(job.build.artifact_path) if job.build.artifact_path else ""
        escape.start_job(job.workdir, extra=[artifact] if artifact else [])
        marks = [time.perf_counter()]
        try:
            ctx = EvalContext(job, device, sided(select_guards(job.protocol.guards), "runner"), Path(job.workdir))
            ctx.side = "runner"
            ctx.reference_aliases = dict(start.get("reference_aliases") or {})
            self.ctx = ctx
            self.reference_model = None  # the reference's timed calls are over: its weights go
            if ctx.on_gpu:
                torch.cuda.set_device(device)
                torch.cuda.empty_cache()  # the calibration's output-sized blocks: the candidate's sizes are its own
            importlib.import_module("torch._dynamo")  # imported in warm(): the guards' snapshots include its config
            ctx.flags.apply()
            ctx.sources = dict(job.solution.files)
            if ctx.on_gpu and job.protocol.launch_cover_us > 0 and job.protocol.timing == "cuda_events":
                ctx.setup_cover()
            marks.append(time.perf_counter())
            ctx.output_dtype = getattr(torch, str(start.get("output_dtype", "float32")), torch.float32)
            for guard in ctx.guards:
                guard.check_sources(ctx)
            marks.append(time.perf_counter())
            torch.set_grad_enabled(False)
            train = job.protocol.extra.get("module_mode", "eval") == "train"
            reference = self.reference if self.reference is not None else load_reference(job.task)
            parts = reference_parts(reference, device, job.protocol.seed, train)
            # The reference's code leaves this process before the candidate's arrives: a candidate that found it
            # (through frames or gc) could call it and pass for its own work. What ModelNew needs of it stays:
            # its init inputs and weights.
            self.reference = None
            unload_reference(reference)
            del reference
            gc.collect()
            marks.append(time.perf_counter())
            ctx.module = self.stack.enter_context(candidate_module(job.build, ctx.workdir, lambda: _take_snapshot(ctx)))
            marks.append(time.perf_counter())
            ctx.cand_model = build_candidate(parts, ctx.module, device, job.protocol.seed, train)
            del parts
            marks.append(time.perf_counter())
            for guard in ctx.guards:
                guard.after_load(ctx)
            marks.append(time.perf_counter())
        except Exception as exc:
            return {**_failure_reply(exc), "violations": self._new_violations()}
        stages = dict(zip(LOAD_STAGES, [round(b - a, 4) for a, b in zip(marks, marks[1:], strict=False)],
                          strict=False))
        return {"kind": "loaded", "violations": self._new_violations(),
                "stages_s": {**stages, START_STAGE: round(self.started_s, 2)}}

    def _follow_device(self, name: Any) -> None:
        """Judge on the CPU when the trusted side does (the CPU path on a host that has a GPU too)."""
        import torch

        if name == "cpu" and self.device.type != "cpu":
            self.device = torch.device("cpu")
            torch.set_num_threads(1)

    def _new_violations(self) -> list[list[str]]:
        if self.ctx is None:
            return []
        found = [[v.guard, v.message] for v in self.ctx.violations]
        self.ctx.violations.clear()
        return found

    # ------------------------------------------------------------------------------------------ requests

    def _answer(self, kind: Any, request: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        if kind == "arenas":
            return self._attach(request, fds)
        if kind == "forward":
            return self._forward(request)
        if kind == "timed":
            return self._timed(request)
        if kind == "calibrate_series":  # again with the candidate loaded: only the cheaper calibration stands
            return self._calibrate_series(self.ctx.protocol, request)
        if kind == "series":
            ctx = self.ctx
            self._timing_tools(ctx.protocol)
            return self._series(ctx.cand_model, request, ctx.flags, lambda fn: ctx.call_candidate(fn, "timing"))
        if kind == "profile":
            return self._profile(request)
        if kind == "hook":
            return self._hook(str(request.get("name", "")))
        return {"kind": "error", "message": f"unknown request {str(kind)[:60]!r}"}

    def _attach(self, request: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        from cudagym.judge.split.arena import ArenaView, attach_arena

        for arena in self.arenas.values():
            arena.close()
        self.arenas = {}
        sizes = request["sizes"]
        names = [str(n) for n in request.get("names") or ("inputs", "outputs", "signals")[:len(fds)]]
        if len(fds) != len(names) or "inputs" not in names or not set(names) <= {"inputs", "outputs", "signals"}:
            for fd in fds:
                os.close(fd)
            raise ValueError(f"expected the input arena and up to two more, got {names} with {len(fds)} descriptor(s)")
        for name, fd in zip(names, fds, strict=True):
            self.arenas[name] = attach_arena(fd, int(sizes[name]), self.device)
        if "outputs" not in self.arenas:  # the heap's reserve serves as the output arena
            if self.heap is None:
                raise ValueError("no output arena was shared, and no heap")
            self.arenas["outputs"] = ArenaView(self.heap.arena, int(sizes["outputs"]))
        return {"kind": "attached"}

    def _attach_heap(self, request: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        """Map the trusted side's heap and route this process's allocations there while it answers requests.

        ``fds``: the heap's arena, then the allocator library (:mod:`cudagym.judge.split.heap`).
        """
        from cudagym.judge.split.arena import attach_arena
        from cudagym.judge.split.heap import RunnerHeap

        if self.device.type != "cuda" or len(fds) != 2 or self.heap is not None:
            for fd in fds:
                os.close(fd)
            raise ValueError("a heap is for the GPU path, given once, as two descriptors")
        arena = attach_arena(fds[0], int(request["size"]), self.device)
        self.heap_library_fd = fds[1]
        self.heap = RunnerHeap(arena, f"/proc/self/fd/{fds[1]}", int(request["reserve"]))
        return {"kind": "heap_attached"}

    def _routed(self) -> Any:
        """Allocations of this thread into the heap while inside (nothing where there is none)."""
        from contextlib import nullcontext

        return self.heap.routed() if self.heap is not None else nullcontext()

    def _args(self, request: dict[str, Any]) -> list[Any]:
        from cudagym.judge.split.arena import Slot, views

        arena = self.arenas["inputs"].tensor
        args: list[Any] = []
        for item in request["args"]:
            if "slot" in item:
                args.append(views(arena, [Slot.from_json(item["slot"])])[0])
            else:
                args.append(item.get("value"))
        return args

    def _deliver(self, request: dict[str, Any], outputs: Any) -> str:
        """Copy the candidate's outputs into the output arena and wait; ``""`` or why their structure is wrong."""
        problem = self._queue_outputs(request, outputs)
        if not problem and self.device.type == "cuda":
            import torch

            torch.cuda.synchronize(self.device)
        return problem

    def _queue_outputs(self, request: dict[str, Any], outputs: Any, call: int | None = None) -> str:
        """Queue the outputs' delivery on the current stream; ``""`` or why it cannot be made.

        Into the output arena by copy; or, for call ``call`` of a request the trusted side brackets where it shares
        a heap, by saying where each output lies in the heap (:meth:`_heap_outputs`).
        """
        from cudagym.judge.split.arena import Slot, views
        from cudagym.judge.split.remote import delivered_tensors, structure_problem

        expected = [Slot.from_json(s) for s in request["outputs"]]
        container = request.get("container", "tensor")
        problem = structure_problem(outputs, expected, container)
        if problem:
            return problem
        # in the slots' order (a dict's in the reference's key order, whatever order the candidate's has)
        tensors, _ = delivered_tensors(outputs, container)
        if call is not None and self.heap is not None:
            return self._heap_outputs(expected, tensors, call)
        for view, tensor in zip(views(self.arenas["outputs"].tensor, expected), tensors, strict=True):
            view.copy_(tensor)
        return ""

    def _heap_plan(self, request: dict[str, Any]) -> tuple[list[Any], Any, list[int]] | None:
        """What :meth:`_in_heap` needs of a request, read before its call is timed (``None``: no heap)."""
        from cudagym.judge.split.arena import Slot
        from cudagym.judge.split.heap import reserve_layout

        if self.heap is None:
            return None
        expected = [Slot.from_json(s) for s in request["outputs"]]
        return expected, request.get("container", "tensor"), reserve_layout(expected)[0]

    def _in_heap(self, outputs: Any, plan: tuple[list[Any], Any, list[int]] | None) -> Any:
        """``outputs``, those the trusted side could not read where they lie copied into the heap's reserve.

        Called inside a bracketed call's own time, between its events: the copy is the candidate's cost and in its
        claim (after the claim it would be the bracket's alone, and an honest claim would look short of it).
        Outputs of the wrong structure are left as they are (the delivery names the problem).
        """
        import torch

        from cudagym.judge.split.remote import delivered_tensors, rebuilt

        if plan is None:
            return outputs
        expected, container, spare = plan
        tensors, problem = delivered_tensors(outputs, container)
        if problem or len(tensors) != len(expected):
            return outputs
        placed, moved = [], False
        for i, (slot, tensor) in enumerate(zip(expected, tensors, strict=True)):
            if isinstance(tensor, torch.Tensor) and self.heap.offset_of(tensor, slot) is None and \
                    tensor.layout == torch.strided and not tensor.is_meta and tuple(tensor.shape) == slot.shape and \
                    str(tensor.dtype).removeprefix("torch.") == slot.dtype:
                view = self.heap.reserve_view(spare[i], slot)
                view.copy_(tensor)
                tensor, moved = view, True
                self.heap.copied += 1
            placed.append(tensor)
        return rebuilt(placed, container) if moved else outputs

    def _heap_outputs(self, expected: list[Any], tensors: list[Any], call: int) -> str:
        """Write where each output lies in the heap, on the current stream (one word each, before the done).

        :meth:`_in_heap` has already moved into the reserve, inside the call's time, what the trusted side could not
        read in place; an output still outside (a candidate's own timer that skipped that step) is copied here,
        after its claim. The outputs are kept alive until the next request: their blocks are not reused before the
        trusted side has copied them out.
        """
        import torch

        from cudagym.judge.split.heap import HEAP_ALIGN, MAX_OUTPUTS, descriptor_word, reserve_layout
        from cudagym.judge.split.signals import write_value

        if len(expected) > MAX_OUTPUTS:
            return f"{len(expected)} outputs: more than the {MAX_OUTPUTS} one call can deliver"
        stream = torch.cuda.current_stream(self.device).cuda_stream
        words = self.arenas["signals"].tensor.data_ptr()
        spare, _ = reserve_layout(expected)
        for i, (slot, tensor) in enumerate(zip(expected, tensors, strict=True)):
            offset = self.heap.offset_of(tensor, slot)
            if offset is None:
                view = self.heap.reserve_view(spare[i], slot)
                view.copy_(tensor)
                offset, tensor = spare[i], view
                self.heap.copied += 1
            self.delivered.append(tensor)
            write_value(stream, words + 4 * descriptor_word(call, i), offset // HEAP_ALIGN)
        return ""

    def _forward(self, request: dict[str, Any]) -> dict[str, Any]:
        gate = self._gate(request)
        args = self._args(request)
        self.ctx.gate = gate
        try:
            outputs = self.ctx.run_candidate(args, str(request.get("purpose", "forward"))[:40])
        finally:
            self.ctx.gate = None
        return {"kind": "outputs", "problem": self._deliver(request, outputs)}

    def _gate(self, request: dict[str, Any]) -> _AuditGate | None:
        """The audited forward's gate the trusted side asks for (:mod:`cudagym.judge.split.signals`), where it can be.

        None where the request names none, or off the GPU path (no signals arena).

        Raises:
            ValueError: The request's gate is not a round from 1 to :data:`MAX_GATE`.
        """
        value = request.get("gate")
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_GATE:
            raise ValueError(f"a forward's gate is a round from 1 to {MAX_GATE}, got {str(value)[:40]!r}")
        if self.device.type != "cuda" or "signals" not in self.arenas:
            return None
        if self.side is None:
            import torch

            self.side = torch.cuda.Stream(self.device)
        cover = self.ctx.cover if self.ctx is not None else None
        return _AuditGate(self.arenas["signals"].tensor.data_ptr(), self.side, value, cover)

    def _timing_tools(self, protocol: Any) -> None:
        """The timer, its launch cover and the L2 flush: the same for the calibration and the candidate."""
        from cudagym.judge.harness.hardware import l2_cache_bytes
        from cudagym.judge.harness.timing import L2Flusher, make_timer

        if self.timer is not None:
            return
        on_gpu = self.device.type == "cuda"
        cover = None
        if on_gpu and protocol.launch_cover_us > 0 and protocol.timing == "cuda_events":
            from cudagym.judge.harness.cover import LaunchCover

            cover = LaunchCover(self.device, protocol.launch_cover_us)
        self.timer = make_timer(protocol.timing, self.device, cover)
        self.flusher = L2Flusher(self.device, l2_cache_bytes(self.device) if on_gpu else 0, protocol.l2_flush)

    def _calibrate(self, job: Any, request: dict[str, Any]) -> dict[str, Any]:
        """One timed call of an empty forward (zeros of the outputs' shapes), by the candidate's own code path."""
        from cudagym.judge.harness.integrity import protocol_flags

        self._timing_tools(job.protocol)
        flags = protocol_flags(job.protocol.matmul_tf32, job.protocol.cudnn_tf32)
        empty = self._empty_forward(request["outputs"], request.get("container", "tensor"))
        return {**self._timed_call(empty, request, flags, lambda fn: fn()), "kind": "calibrated"}

    def _calibrate_series(self, protocol: Any, request: dict[str, Any]) -> dict[str, Any]:
        """A series of empty forwards, by the candidate's series path (:meth:`_series`)."""
        from cudagym.judge.harness.integrity import protocol_flags

        self._timing_tools(protocol)
        flags = protocol_flags(protocol.matmul_tf32, protocol.cudnn_tf32)
        sets = request.get("sets")
        if not isinstance(sets, list) or not sets or not isinstance(sets[0], dict):
            raise ValueError("malformed series request")
        empty = self._empty_forward(sets[0]["outputs"], request.get("container", "tensor"))
        return {**self._series(empty, request, flags, lambda fn: fn()), "kind": "series_calibrated"}

    def _empty_forward(self, outputs: Any, container: Any) -> Any:
        """A forward that returns zeros in the reference's output structure (a nested tree too).

        Its outputs' copy-out is the candidate's.
        """
        import torch

        from cudagym.judge.split.arena import Slot

        expected = [Slot.from_json(s) for s in outputs]
        dtypes = [getattr(torch, s.dtype) for s in expected]

        def empty(*_: Any) -> Any:
            from cudagym.judge.split.remote import rebuilt

            return rebuilt([torch.zeros(s.shape, dtype=d, device=self.device)
                            for s, d in zip(expected, dtypes, strict=True)], container)

        return empty

    def _reference_for_timing(self, job: Any) -> tuple[Any, Any]:
        """The task's reference model (built once) and the protocol's precision flags, applied; the timer ready.

        What the reference's timed calls need; only before any candidate code is loaded.
        """
        from cudagym.judge.harness.integrity import protocol_flags
        from cudagym.judge.harness.loading import build_reference, load_reference

        self._timing_tools(job.protocol)
        flags = protocol_flags(job.protocol.matmul_tf32, job.protocol.cudnn_tf32)
        flags.apply()  # the protocol's precision, as the judge's process runs its baselines
        if self.reference_model is None:
            if self.reference is None:
                self.reference = load_reference(job.task)
            train = job.protocol.extra.get("module_mode", "eval") == "train"
            self.reference_model = build_reference(self.reference, self.device, job.protocol.seed, train)
        return self.reference_model, flags

    def _reference_warm(self, job: Any, request: dict[str, Any]) -> dict[str, Any]:
        """The reference's warm-up calls, untimed, back to back in this process's own loop, then a synchronize.

        A fresh process's first call loads kernels, sets up library handles and allocates, and may wait for the
        GPU while it does: as a bracketed call it could not be queued before its go and held the judge for the
        whole arm wait. No candidate code is loaded yet; the outputs are dropped.
        """
        import torch

        t0 = time.perf_counter()
        model = self._reference_for_timing(job)[0]
        built = time.perf_counter()
        args = self._args(request)
        count = max(1, min(int(request.get("count", 1)), REFERENCE_WARM_MAX))
        with torch.no_grad():
            for _ in range(count):
                model(*args)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return {"kind": "reference_warmed", "count": count, "built_us": _finite((built - t0) * 1e6),
                "calls_us": _finite((time.perf_counter() - built) * 1e6)}

    def _timed_reference(self, job: Any, request: dict[str, Any]) -> dict[str, Any]:
        """One timed call of the task's reference, by the candidate's timed path: no candidate code is loaded yet."""
        import torch

        model, flags = self._reference_for_timing(job)

        def call(fn: Any) -> Any:
            with torch.no_grad():
                return fn()

        return {**self._timed_call(model, request, flags, call), "kind": "reference_timed"}

    def _timed_reference_batch(self, job: Any, request: dict[str, Any]) -> dict[str, Any]:
        """The reference timed ``count`` times in this process's own loop, as the judge's process times eager.

        Each call: this process's L2 flush, then its timer around the call, behind a launch cover of the
        request's ``cover_us`` on the GPU (sized by the judge to the reference's host time, as eager's are).
        Answered only before any candidate code is loaded, while this process's clock is the judge's own code's.
        """
        import torch

        model = self._reference_for_timing(job)[0]
        args = self._args(request)
        count = max(1, min(int(request.get("count", 1)), 1000))
        cover = request.get("cover_us")
        cover_us = float(cover) if isinstance(cover, (int, float)) and 0 < cover <= 250_000 else None
        times, enqueues = [], []
        with torch.no_grad():
            for _ in range(count):
                self.flusher.flush()
                measured = self.timer.measure(lambda: model(*args), cover_us=cover_us)
                times.append(_finite(measured.time_us))
                enqueues.append(_finite(measured.enqueue_us))
        return {"kind": "reference_batch_timed", "times_us": times, "enqueue_us": enqueues}

    def _timed(self, request: dict[str, Any]) -> dict[str, Any]:
        ctx = self.ctx
        self._timing_tools(ctx.protocol)
        return self._timed_call(ctx.cand_model, request, ctx.flags, lambda fn: ctx.call_candidate(fn, "timing"))

    def _timed_call(self, model: Any, request: dict[str, Any], flags: Any, call: Any) -> dict[str, Any]:
        """Flush, time one forward with the timer, restore torch's switches, deliver the outputs: one reply."""
        from cudagym.judge.harness.integrity import TorchFlags

        marks = [time.perf_counter()]
        args = self._args(request)
        reset_persisting_l2(self.device.type == "cuda")
        bracket = self._bracket(request)
        if bracket is None:
            self.flusher.flush()  # bracketed, the trusted side flushes inside its bracket
        plan = self._heap_plan(request) if bracket is not None else None
        marks.append(time.perf_counter())
        if bracket is None:
            measured = call(lambda: self.timer.measure(lambda: model(*args)))
        else:
            # outputs the judge cannot read where they lie go into the heap inside the call's own time (its claim)
            measured = call(lambda: self.timer.measure(lambda: self._in_heap(model(*args), plan), bracket=bracket))
        marks.append(time.perf_counter())
        changes = []
        now = TorchFlags.capture()
        if now != flags:
            changes = flags.differences(now)
            flags.apply()
        problem = self._deliver(request, measured.outputs) if bracket is None else bracket.problem
        marks.append(time.perf_counter())
        prepare, measure, deliver = ((b - a) * 1e6 for a, b in zip(marks, marks[1:], strict=False))
        wait = min(max(measured.wait_us, 0.0), measure)
        return {"kind": "timed", "problem": problem, "time_us": _finite(measured.time_us),
                "wall_us": _finite(measured.wall_us), "enqueue_us": _finite(measured.enqueue_us),
                "flag_changes": changes,
                # a bracketed call's delivery, from its end event to its done: GPU clock and host time, then the
                # host time of its parts (the outputs queued, done, armed; notes only)
                "closing_us": [_finite(measured.closing_us), _finite(measured.closing_host_us),
                               *(_finite(x) for x in (bracket.parts_us if bracket is not None else []))],
                # and the runner's own account (cudagym.judge.split.RUNNER_PHASES):
                "phases_us": [_finite(x) for x in (prepare, measure - wait, wait, deliver)]}

    def _series(self, model: Any, request: dict[str, Any], flags: Any, call: Any) -> dict[str, Any]:
        """Calls back to back in one request, each on its own input set and into its own output slots.

        The calls are chained (:mod:`cudagym.judge.split.signals`): call ``k`` starts once the trusted side gave
        its go, after it copied call ``k - 1``'s results out and placed call ``k``'s inputs. On the GPU the
        whole series is queued at once, each call behind its go on the stream, and the trusted side reads each
        call's interval (done to done) on its clock, the chain's own cost in it as in an empty series (the
        calibration). On the host path each call's done and go travel over the channel. Each call's own time
        (events around it; the host clock on the CPU) is reported: the trusted side takes it on its word only for a
        series of empty forwards, before any candidate code loads. Torch's switches are restored after, as after a
        timed call.
        """
        from cudagym.judge.harness.integrity import PRISTINE, TorchFlags

        sets = request.get("sets")
        if not isinstance(sets, list) or not 1 <= len(sets) <= SERIES_MAX_CALLS:
            raise ValueError(f"a series takes 1 to {SERIES_MAX_CALLS} calls")
        container = request.get("container", "tensor")
        calls = [(self._args(item), {"outputs": item["outputs"], "container": container}) for item in sets]
        on_gpu = self.device.type == "cuda"
        reset_persisting_l2(on_gpu)
        bracket = self._bracket(request)
        chained = bracket is None and bool(request.get("chained"))
        if bracket is None:
            self.flusher.flush()  # bracketed, the trusted side flushes inside its bracket
        stream = PRISTINE.current_stream(self.device) if on_gpu else None
        PRISTINE.sync(self.device)
        marks: list[tuple[Any, Any]] = []
        problem = ""
        plan = self._heap_plan(calls[0][1]) if bracket is not None else None  # every call's outputs alike
        for k, (args, slots) in enumerate(calls):
            if bracket is not None:
                bracket.open(stream, k)
            elif chained and k:
                self._await_go(k)
            if on_gpu:
                began, ended = PRISTINE.event(enable_timing=True), PRISTINE.event(enable_timing=True)
                PRISTINE.event_record(began, stream)
            else:
                began = PRISTINE.perf_counter()
            if plan is not None:  # as in a timed call, between the call's events
                outputs = call(lambda: self._in_heap(model(*args), plan))  # noqa: B023  (called at once)
            else:
                outputs = call(lambda: model(*args))  # noqa: B023  (called at once, in this iteration)
            if on_gpu:
                PRISTINE.event_record(ended, stream)
                import torch

                with torch.cuda.stream(stream):  # the call's stream, whatever the candidate made current
                    delivered = self._queue_outputs(slots, outputs, call=k) if bracket is not None else \
                        self._queue_outputs(slots, outputs)
                    problem = delivered or problem
            else:
                ended = PRISTINE.perf_counter()
                problem = self._queue_outputs(slots, outputs) or problem
            marks.append((began, ended))
            del outputs
            if bracket is not None:
                bracket.done(stream, k)
            elif chained:
                PRISTINE.sync(self.device)  # this call's outputs in the arena before its word
                self.channel.send({"kind": CALL_DONE, "call": k})
        if bracket is not None:
            bracket.arm(len(calls) - 1)
        PRISTINE.sync(self.device)
        times = [PRISTINE.event_elapsed_time(a, b) * 1000.0 if on_gpu else (b - a) * 1e6 for a, b in marks]
        changes = []
        now = TorchFlags.capture()
        if now != flags:
            changes = flags.differences(now)
            flags.apply()
        return {"kind": "series_timed", "problem": problem[:2000], "times_us": [_finite(t) for t in times],
                "flag_changes": changes}

    def _await_go(self, k: int) -> None:
        """Wait for the trusted side's go for call ``k`` of a chained series (host path)."""
        self.channel.spin(CALL_SPIN_S)
        word, _ = self.channel.receive()
        if word.get("kind") != CALL_GO or word.get("call") != k:
            raise RuntimeError(f"the judge sent {str(word.get('kind'))[:40]!r} where call {k}'s go was due")

    def _bracket(self, request: dict[str, Any]) -> _RunnerBracket | None:
        """The runner's half of a call the trusted side brackets on the GPU (when it asks, with a round)."""
        if "round" not in request or self.device.type != "cuda" or "signals" not in self.arenas:
            return None
        import torch

        from cudagym.judge.harness.timing import CudaEventTimer

        if not isinstance(self.timer, CudaEventTimer):
            return None
        if self.side is None:
            self.side = torch.cuda.Stream(self.device)
        return _RunnerBracket(self, request, int(request["round"]))

    def _profile(self, request: dict[str, Any]) -> dict[str, Any]:
        """Profiled forwards on the trusted side's inputs, and what they did.

        The reply holds their device activity, one row per kernel name and stream (every event counted, however
        many), the GPU's busy time, and the kept call's outputs.
        """
        keep = "first" if request.get("keep") == "first" else "last"
        profile, outputs = self.ctx.profile_candidate(self._args(request), keep, limit=PROFILE_ROWS)
        return {"kind": "profile", "problem": self._deliver(request, outputs), "busy_us": _finite(profile.busy_us),
                "events": [{"name": e.name[:300], "duration_us": _finite(e.duration_us), "stream": int(e.stream),
                            "is_memory_op": bool(e.is_memory_op), "calls": int(e.calls)} for e in profile.events]}

    def _hook(self, name: str) -> dict[str, Any]:
        if name not in ("after_correctness", "after_timing"):
            return {"kind": "error", "message": f"unknown hook {name[:40]!r}"}
        for guard in self.ctx.guards:
            getattr(guard, name)(self.ctx)
        return {"kind": "hooked", "notes": self.ctx.notes[-20:]}

    def _end(self) -> dict[str, Any]:
        files, network = escape.finish_job()
        notes = list(self.ctx.notes) if self.ctx is not None else []
        if self.heap is not None:  # the runner's word: notes only
            stats = self.heap.allocator.stats()
            notes.append(f"the runner's heap: {self.heap.copied} output(s) copied into its reserve, not made in it; "
                         f"peak {stats['peak']} bytes in use, {stats['outside_segments']} segment(s) "
                         f"({stats['outside_bytes']} bytes) from outside it")
        return {"kind": "ended", "files": files[:100], "network": network[:100], "notes": notes[-50:],
                "violations": self._new_violations()}


class _RunnerBracket:
    """Queue the wait for go before the call, and after it the outputs' copy, done and armed (no host wait)."""

    def __init__(self, server: _Server, request: dict[str, Any], round_: int) -> None:
        self.server, self.request, self.round = server, request, round_
        self.base = server.arenas["signals"].tensor.data_ptr()
        self.problem = ""
        self.parts_us: list[float] = []  # host time of close's parts: the outputs queued, done, armed (notes only)

    def open(self, stream: Any, k: int = 0) -> None:
        """The call (call ``k`` of a series) waits on the GPU until the trusted side has placed its inputs."""
        from cudagym.judge.split.signals import GO, wait_value

        wait_value(stream.cuda_stream, self.base + GO, self.round + k)

    def done(self, stream: Any, k: int = 0) -> float:
        """Done for the call (call ``k`` of a series) on its stream, after all it queued (host µs taken)."""
        from cudagym.judge.split.signals import DONE, write_value

        t0 = time.perf_counter()
        write_value(stream.cuda_stream, self.base + DONE, self.round + k)
        return (time.perf_counter() - t0) * 1e6

    def arm(self, k: int = 0) -> float:
        """Armed at once on the side stream: the request (up to call ``k`` of a series) is queued (host µs taken)."""
        from cudagym.judge.split.signals import ARMED, write_value

        t0 = time.perf_counter()
        write_value(self.server.side.cuda_stream, self.base + ARMED, self.round + k)
        return (time.perf_counter() - t0) * 1e6

    def close(self, outputs: Any, stream: Any) -> None:
        """Outputs into the arena, then done on the call's stream; armed at once on the side stream."""
        import torch

        marks = [time.perf_counter()]
        with torch.cuda.stream(stream):  # the call's stream, whatever the candidate made current
            self.problem = self.server._queue_outputs(self.request, outputs, call=0)
        marks.append(time.perf_counter())
        self.parts_us = [(marks[1] - marks[0]) * 1e6, *self.finish(stream)]

    def finish(self, stream: Any) -> list[float]:
        """Done on the call's stream, after all it queued; armed at once on the side stream (host µs of each)."""
        return [self.done(stream), self.arm()]


class _AuditGate:
    """An audited forward's gate: its stream waits for ``GATE >= round``, opened on the side stream.

    With a launch cover the wait is the cover's: it spins its length and on until the gate is open, holding every
    SM, so work the forward queues on another stream meanwhile cannot run (and be done) before the gate opens. A wait
    in the stream's front end alone holds no SM: behind one, a side stream's kernel can run at once, and the
    cover-aware hack stayed `ok` through the worker (H100, session 47; why was not measured).
    """

    def __init__(self, base: int, side: Any, round_: int, cover: Any = None) -> None:
        from cudagym.judge.split.signals import GATE

        self.address, self.side, self.round, self.cover = base + GATE, side, round_, cover

    def close(self, stream: Any) -> None:
        """The call's stream waits from here until the gate is open (behind the launch cover, where there is one)."""
        from cudagym.judge.split.signals import wait_value

        if self.cover is not None:
            self.cover.launch_gated(stream, self.address, self.round)
        else:
            wait_value(stream.cuda_stream, self.address, self.round)

    @property
    def covers(self) -> bool:
        """Whether :meth:`close` queued the launch cover too (the forward then queues none of its own)."""
        return self.cover is not None

    def open(self) -> None:
        """Open the gate at once, on the side stream (which waits for nothing)."""
        from cudagym.judge.split.signals import write_value

        write_value(self.side.cuda_stream, self.address, self.round)


def process_age_s() -> float:
    """Seconds since this process was born (Linux ``/proc``; 0.0 where it cannot tell)."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"))  # field 22: starttime in ticks
    except (OSError, ValueError, IndexError):
        return 0.0


def device_peak_bytes(device: Any, heap: Any = None) -> int:
    """This process's peak device memory so far: its caching allocator's peak reservation (0 on the CPU).

    The arenas it maps are the trusted process's allocations, not counted here, and so is the shared heap
    (``heap``, a :class:`~cudagym.judge.split.heap.RunnerHeap`): its peak in use is taken off the reservation's
    (the two peaks need not coincide, so this can undercount by the difference). The runner lives for one job,
    so the peak since it started is the job's.
    """
    if device.type != "cuda":
        return 0
    import torch

    try:
        reserved = int(torch.cuda.max_memory_reserved(device))
        return max(reserved - (heap.allocator.stats()["peak"] if heap is not None else 0), 0)
    except Exception:  # a broken context cannot answer; the reply must still go
        return 0


def reset_persisting_l2(on_gpu: bool) -> None:
    """Turn any persisting-L2 window back into normal lines and its carve-out to zero (CUDA driver API)."""
    if not on_gpu:
        return
    try:
        from cudagym.cuda_driver import driver as _driver

        drv = _driver()
        drv.current_context()
        drv.lib.cuCtxResetPersistingL2Cache()
        drv.lib.cuCtxSetLimit(0x06, 0)  # CU_LIMIT_PERSISTING_L2_CACHE_SIZE
    except (OSError, RuntimeError):
        pass


def _finite(x: float) -> float:
    return float(x) if math.isfinite(x) else -1.0


def _failure_reply(exc: BaseException) -> dict[str, Any]:
    from cudagym.judge.harness.failures import CandidateFailure, TaskProblem, exception_line, is_cuda_error

    if isinstance(exc, CandidateFailure):
        return {"kind": "failure", "stage": exc.stage, "text": exc.text[-8000:], "cuda": exc.cuda}
    if isinstance(exc, TaskProblem):
        return {"kind": "task_problem", "text": str(exc)[-4000:]}
    cuda = is_cuda_error(exc)
    return {"kind": "failure", "stage": "runner", "cuda": cuda,
            "text": exception_line(exc) if cuda else traceback.format_exc()[-6000:]}


if __name__ == "__main__":
    sys.exit(main())
