"""Kernel attribution from outside the candidate's process: Nsight Compute's front end names the forward's kernels.

The ``decoy_kernels`` guard classes a forward's kernels from a profile taken in the runner, the candidate's own
process, and handed to the judge as a reply the candidate can rewrite (white-box tests 16 and 21). A protocol
with ``attribution=ncu`` among its settings (``cudagym[attribution=ncu]``) adds a gate on a passing SUBMIT: the
lane starts a fresh *attributed runner* (its own folder and copy of the job, confined as the job's runner is)

    bwrap ... ncu --mode=launch python -m cudagym.judge.attribution --job <its folder>/job.pickle ...

and, outside the sandbox, Nsight Compute's front end in the sandbox's network namespace alone (the sandbox keeps
its private network: the front end reaches the launched process's injection library over that loopback)

    nsenter --target <the sandbox's first process> --net -- ncu --mode=attach --hostname 127.0.0.1 --csv ...

which writes the report (every kernel's name and ``gpu__time_duration``) to its own standard output, a pipe
only the lane reads. The child draws the correctness inputs, loads the candidate as the runner does and runs
:data:`FORWARDS` forwards, each between two launches of the judge's marker kernel (the launch cover's spin,
one thread for one cycle); the first forward is a warm-up (one-time library set-up), the rest are judged:

- every kernel of a judged forward is classed as ``decoy_kernels`` classes the runner's profile
  (:func:`~cudagym.judge.guards.kernels.judge_kernel_mix`: the candidate's own kernels, vendor libraries its
  sources call, torch's kernels, copies), and torch's doing most of the work is a violation;
- the forward's summed kernel time may not pass the timed median by more than ``decoy_kernels``' fit
  (:data:`~cudagym.judge.guards.kernels.PROFILE_OVER_TIMED_MAX` times it plus
  :data:`~cudagym.judge.guards.kernels.PROFILE_OVER_TIMED_SLACK_US`): a candidate that runs its own kernels only
  while profiled and a faster fallback when timed gains at most that;
- the marker kernel launched more often than the judge launched it (the candidate launched it, to move a
  forward's bounds) is a violation, as is a run that ends before its forwards or is killed for a limit or out of
  time (the candidate's doing once it loaded: the runner's CUDA set-up waits for the front end), and so are
  kernels of any process but the runner (its children inherit the injection, and their kernels would otherwise
  mix into the forward's: the runner says its process id before the candidate loads);
  a tool that cannot start, attach or name a kernel is ``infra_error``.

The violation is ``kernel_attribution``. Not closed: the candidate can tell it is profiled (the injection library
is in its process, and the tool serializes launches), which the fit above bounds; and it shares its address space
with that library, so one that reverse-engineers the library's protocol with its front end could forge what it
sends. Measured (session 35, H100, ``benchmarks/attribution_probe.py``): this launch-and-attach arrangement named
a CuPy kernel's and torch's fallback kernels from a sandboxed process at 0.84-1.28x the unprofiled run's wall.
The gate's GPU test (white-box 21b) passed on an H100 in session 36, at 6.5 s a SUBMIT; its CPU tests drive a
stand-in for ``ncu`` through the real sandbox.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudagym.errors import ConfigError
from cudagym.judge.interface import EvalMode
from cudagym.judge.job import Job
from cudagym.judge.records import EvalResult, EvalStatus, Violation

RULE = "kernel_attribution"
SETTING = "attribution"  # Protocol.extra's key; its one value is "ncu"
BINARY_ENV = "CUDAGYM_NCU"
INSTALL_ROOTS = ("/opt/nvidia",)  # where CUDA's ``ncu`` launcher looks for Nsight Compute besides the toolkit
DURATION = "gpu__time_duration.sum"
FORWARDS = 3  # forwards profiled; the first is a warm-up, not judged
MARK_KERNEL = "cudagym_cover_spin"  # the judge's marker: the launch cover's kernel (cudagym.judge.harness.cover)
INFO_WAIT_S = 30.0  # how long bubblewrap may take to name its sandbox's first process
ATTACH_TRIES_S = 60.0  # how long the front end keeps trying to reach the launched runner (its Python start)
LOADING_MARKER = "\x1ecudagym-attribution: loading the candidate\x1e"
DONE_MARKER = "\x1ecudagym-attribution: forwards done\x1e"
UNITS_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6,
            "s": 1e6}
_SHOWN = 3


def wanted(job: Job, result: EvalResult) -> bool:
    """Whether this job's result still has to pass the gate: a passing SUBMIT under ``attribution=ncu``."""
    return (job.mode is EvalMode.SUBMIT and result.status is EvalStatus.OK
            and job.protocol.extra.get(SETTING) == "ncu")


# ----------------------------------------------------------------------------------------------------
# Finding the tool
# ----------------------------------------------------------------------------------------------------

def find_ncu(homes: Sequence[str] | None = None) -> str:
    """Path of Nsight Compute's ``ncu``: ``CUDAGYM_NCU``, else a CUDA toolkit's ``bin``, else ``PATH``.

    Raises:
        ConfigError: None is found (or the variable names no executable).
    """
    from cudagym.judge.sanitizer import find_cuda_tool

    return find_cuda_tool("ncu", BINARY_ENV, "install Nsight Compute (or judge with a protocol without "
                          "attribution=ncu)", homes)


def ncu_folders(ncu: str, roots: Sequence[str] | None = None) -> tuple[str, ...]:
    """The folders ``ncu`` and its injection libraries live in.

    Its own, and the Nsight Compute installs its launcher searches (``<toolkit>/nsight-compute*``,
    ``<root>/nsight-compute*``).
    CUDA's ``bin/ncu`` is a script that runs the front end of an install elsewhere, which preloads its injection
    libraries from that install's ``target/`` folder into the profiled process: with only ``bin/`` in a sandbox's
    view the loader refuses them and nothing is profiled (session 34's probe).
    """
    own = Path(os.path.realpath(ncu)).parent
    found = [own]
    for base in (own.parent, *map(Path, INSTALL_ROOTS if roots is None else roots)):
        found += sorted(p for p in base.glob("nsight-compute*") if p.is_dir())
    return tuple(dict.fromkeys(str(p) for p in found))


# ----------------------------------------------------------------------------------------------------
# Reading the report and judging it (pure)
# ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Launch:
    """One kernel launch in the report: its place in the launch order, name, GPU time (µs) and process id."""

    index: int
    name: str
    duration_us: float
    process: int = 0


def read_report(text: str) -> list[Launch]:
    """The kernel launches of an ``ncu --csv`` report, in launch order (lines before its header are skipped)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if '"Kernel Name"' in line and '"Metric Value"' in line), None)
    if start is None:
        return []
    found: dict[tuple[int, int], Launch] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        if row.get("Metric Name") != DURATION:
            continue
        try:
            index = int(str(row.get("ID", "")).strip())
            value = float(str(row.get("Metric Value", "")).replace(",", ""))
            process = int(str(row.get("Process ID", "0")).strip() or 0)
        except ValueError:
            continue
        scale = UNITS_US.get(str(row.get("Metric Unit", "")).strip(), 1.0)
        found[(index, process)] = Launch(index, str(row.get("Kernel Name", "")), value * scale, process)
    return [found[k] for k in sorted(found)]


def is_marker(name: str) -> bool:
    """Whether a report's kernel name is the judge's marker kernel (plain, or with its parameter list)."""
    return name == MARK_KERNEL or name.startswith(MARK_KERNEL + "(")


def forwards_of(launches: list[Launch], forwards: int) -> tuple[list[list[Launch]], str]:
    """Each forward's launches (between its two markers) and a problem (``""`` when the markers are the judge's).

    The judge launches two markers per forward; more is the candidate launching the marker (to move a forward's
    bounds, hiding kernels between "forwards"), fewer a run that ended early.
    """
    marks = [i for i, launch in enumerate(launches) if is_marker(launch.name)]
    if len(marks) > 2 * forwards:
        return [], (f"the judge's marker kernel ran {len(marks)} times where the judge launched it {2 * forwards} "
                    "times: the candidate launched it too")
    if len(marks) < 2 * forwards:
        return [], f"the profile holds {len(marks)} of the {2 * forwards} marker launches: the forwards did not all run"
    return [launches[a + 1:b] for a, b in zip(marks[::2], marks[1::2], strict=True)], ""


def judge_forwards(per_forward: list[list[Launch]], built_kernels: Sequence[str], libraries_called: bool,
                   timed_median_us: float) -> tuple[str, str]:
    """A note on the judged forwards' kernels and, if they cannot stand, why (``""`` when they can)."""
    from cudagym.judge.guards.kernels import (
        PROFILE_OVER_TIMED_MAX,
        PROFILE_OVER_TIMED_SLACK_US,
        judge_kernel_mix,
        kernel_identifiers,
    )
    from cudagym.judge.harness.profiling import DeviceEvent

    judged = per_forward[1:] or per_forward
    own = kernel_identifiers(built_kernels)
    sums = [sum(k.duration_us for k in launches) for launches in judged]
    most = max(sums) if sums else 0.0
    names: dict[str, float] = {}
    for launches in judged:
        for k in launches:
            names[k.name] = names.get(k.name, 0.0) + k.duration_us / len(judged)
    top = ", ".join(f"{name[:80]} {us:.1f} us" for name, us in sorted(names.items(), key=lambda x: -x[1])[:_SHOWN])
    note = (f"{RULE}: Nsight Compute, from outside the runner, saw {len(judged)} judged forward(s) of "
            f"{sum(len(x) for x in judged) / max(len(judged), 1):.0f} kernel(s), their time summed {most:.1f} us at "
            f"most against the timed median {timed_median_us:.1f} us ({top or 'no kernels'})")
    for n, launches in enumerate(judged, start=2 if len(per_forward) > 1 else 1):
        events = [DeviceEvent(k.name, k.duration_us, 0, False) for k in launches]
        problem = judge_kernel_mix(events, built_kernels=len(built_kernels), libraries_called=libraries_called,
                                   own_names=own)
        if problem:
            return note, f"in forward {n} profiled from outside the runner, {problem}"
    allowed = PROFILE_OVER_TIMED_MAX * timed_median_us + PROFILE_OVER_TIMED_SLACK_US
    if timed_median_us > 0 and most > allowed:
        return note, (f"the profiled forward's kernels took {most:.1f} us but its timed median is "
                      f"{timed_median_us:.1f} us (at most {PROFILE_OVER_TIMED_MAX:g}x + "
                      f"{PROFILE_OVER_TIMED_SLACK_US:g} us): the timed calls ran other work than the profiled ones")
    return note, ""


@dataclass(frozen=True)
class AttributedRun:
    """How the attributed run ended, as the lane saw it (the report is the front end's, not the runner's).

    Attributes:
        report: The front end's standard output (its CSV report among it).
        front_status: The front end's exit status (-1: it did not run or was killed).
        loaded: The runner had started loading the candidate (its marker is in its output).
        done: The runner finished its forwards.
        timed_out: The lane killed it at the deadline.
        output: The runner's stdout and stderr (the candidate's prints among them), capped.
        wall_s: Seconds from start to end.
        why: What kept the tool from running ("" when it ran).
        pid: The runner's process id as it said before the candidate loaded (0: unknown): only its kernels are
            the forward's.
        killed_for: Why the lane killed it before its end (a watchdog limit, its output's size; "" if it did not).
    """

    report: str
    front_status: int
    loaded: bool
    done: bool
    timed_out: bool
    output: str
    wall_s: float
    why: str = ""
    pid: int = 0
    killed_for: str = ""


def judge_run(run: AttributedRun, job: Job, result: EvalResult) -> tuple[str, str, bool]:
    """(note, problem, infra): the gate's verdict on one attributed run (pure: observations in).

    The tool's own failures are the judge's (``infra``): it could not start or attach, the runner stopped before
    the candidate loaded, or the report names no kernel at all (the runner's CUDA set-up, before the candidate
    loads, launches kernels the report must hold). Once the candidate has loaded (so the tool had attached: the
    runner's CUDA set-up waits for it), a run killed for a limit or out of time, one that does not finish its
    forwards, and markers out of place are the candidate's.
    """
    from cudagym.judge.guards.kernels import calls_libraries

    if run.why:
        return "", f"{RULE}: Nsight Compute could not profile the candidate's forwards ({run.why})", True
    launches = read_report(run.report)
    if not run.loaded:
        return "", (f"{RULE}: the attributed runner stopped before the candidate loaded (front end status "
                    f"{run.front_status}){_tail(run.output)}{_tail(run.report, 'the front end said')}"), True
    if run.killed_for or (run.timed_out and not run.done):  # the tool had attached: the candidate's code was running
        why = run.killed_for or "it ran out of time"
        return "", f"the candidate's forwards under Nsight Compute did not finish ({why}){_tail(run.output)}", False
    if not launches:
        return "", (f"{RULE}: Nsight Compute's front end named no kernel of the attributed runner (status "
                    f"{run.front_status}){_tail(run.report, 'the front end said')}"), True
    if run.pid:
        own = [k for k in launches if k.process == run.pid]
        if not own:  # the tool numbers processes otherwise than the sandbox does: the judge's to fix
            seen = sorted({k.process for k in launches})
            return "", (f"{RULE}: Nsight Compute's report names processes {seen}, not the runner's {run.pid}"), True
        others = [k for k in launches if k.process != run.pid]
        if others:  # the runner's children inherit the injection: their kernels could shape the report
            names = ", ".join(sorted({k.name[:80] for k in others})[:_SHOWN])
            return "", (f"{len(others)} kernel(s) of another process than the runner ran under the profiler "
                        f"(process {others[0].process}: {names}): the forward's kernels must be the runner's own"
                        ), False
        launches = own
    per_forward, problem = forwards_of(launches, FORWARDS)
    if not run.done:
        why = "it ran out of time" if run.timed_out else "it ended"
        return "", (f"the candidate's forwards under Nsight Compute did not finish ({why}"
                    f"{'; ' + problem if problem else ''}){_tail(run.output)}"), False
    if problem:
        return "", problem, False
    candidate = result.candidate
    median_us = candidate.median_us if candidate is not None else 0.0
    note, problem = judge_forwards(per_forward, [k.kernel for k in job.build.kernels],
                                   calls_libraries(job.solution.files.values()), median_us)
    return f"{note} ({run.wall_s:.1f} s)", problem, False


def _tail(text: str, what: str = "last output", lines: int = 12) -> str:
    kept = [line for line in text.replace(LOADING_MARKER, "").replace(DONE_MARKER, "").splitlines() if line.strip()]
    return (f"\n{what}:\n" + "\n".join(kept[-lines:])) if kept else ""


def apply(result: EvalResult, note: str, problem: str, infra: bool, wall_s: float) -> EvalResult:
    """``result`` (a passing SUBMIT) with the gate's verdict: a violation, an ``infra_error`` or a note."""
    log = "\n".join(x for x in (result.log, note, problem) if x)
    base = dataclasses.replace(result, notes=(*result.notes, *([note] if note else [])), log=log,
                               wall_time_s=result.wall_time_s + wall_s)
    if problem and infra:
        return dataclasses.replace(base, status=EvalStatus.INFRA_ERROR, message=problem)
    if problem:
        return dataclasses.replace(base, status=EvalStatus.RULE_VIOLATION, message=f"{RULE}: {problem}",
                                   violations=(*result.violations, Violation(RULE, problem)))
    return base


# ----------------------------------------------------------------------------------------------------
# Lane side: the launched runner in the sandbox, the front end outside it
# ----------------------------------------------------------------------------------------------------

def gate(job: Job, result: EvalResult, launch: Any) -> EvalResult:
    """Run the attribution gate on a passing SUBMIT ``result`` and apply its verdict.

    ``launch`` is the lane's :class:`~cudagym.judge.sanitizer.Launch` (folders, confinement, the deadline).
    """
    if not wanted(job, result):
        return result
    started = time.monotonic()
    try:
        ncu = find_ncu()
    except ConfigError as exc:
        return dataclasses.replace(result, status=EvalStatus.INFRA_ERROR, message=str(exc))
    timeout_s = launch.timeout_s or job.protocol.eval_timeout_s
    run = _Run(job, ncu, launch).wait(started + timeout_s, launch.closing)
    note, problem, infra = judge_run(run, job, result)
    return apply(result, note, problem, infra, time.monotonic() - started)


class _Run:
    """The attributed runner (confined, under ``ncu --mode=launch``) and its front end (outside, attaching)."""

    def __init__(self, job: Job, ncu: str, launch: Any) -> None:
        from cudagym.judge import confine
        from cudagym.judge.sandbox import inner_policy, remove_tree
        from cudagym.judge.sanitizer import GateProcess, hand_job

        self.ncu, self.process, self.pid, self.why = ncu, None, 0, ""
        root = Path(tempfile.mkdtemp(prefix="attribution-", dir=launch.root))
        try:
            for sub in ("home", "tmp"):
                (root / sub).mkdir()
            job_file = hand_job(job, root)
            argv = [ncu, "--mode=launch", sys.executable, "-m", __name__, "--job", str(job_file), "--root",
                    str(root), "--policy", inner_policy(launch.policy).to_json()]
            view = confine.view_for(reads=(*launch.pythonpath, *ncu_folders(ncu)), writes=(str(root),),
                                    gpu=True, chdir=root, tools=(ncu,), shm=True)
            wrapped = confine.wrap(argv, view)
            self.nsenter = shutil.which("nsenter") or ""
            if Path(wrapped[0]).name != "bwrap" or not self.nsenter:
                self.why = ("needs the bubblewrap sandbox (CUDAGYM_SANDBOX=bwrap) and nsenter: the front end reaches "
                            "the runner through the sandbox's own network")
                remove_tree(root)
                return
            read_fd, write_fd = os.pipe()
            try:
                proc = confine.popen([wrapped[0], "--info-fd", str(write_fd), *wrapped[1:]], cwd=root,
                                     env=launch.env(root), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, start_new_session=True, pass_fds=(write_fd,))
            finally:
                os.close(write_fd)
        except BaseException:
            remove_tree(root)
            raise
        self.process = GateProcess(proc, root, launch.policy, "cudagym-attribution", LOADING_MARKER, DONE_MARKER)
        self.pid = read_sandbox_pid(read_fd)

    def _attach(self, deadline: float) -> tuple[int, str]:
        """The front end's exit status and report.

        It attaches through the sandbox's network, retrying until the launched runner listens (its Python start
        and CUDA set-up come first).
        """
        assert self.process is not None
        # the GPU's own clocks (ncu would lock them to base) and no cache flush before each kernel (the timed call
        # flushes the L2 once, before the forward): each kernel's time is the nearest ncu comes to the timed call's
        metrics = ["--csv", "--metrics", DURATION, "--clock-control", "none", "--cache-control", "none"]
        argv = [self.nsenter, "--target", str(self.pid), "--net", "--", self.ncu, "--mode=attach", "--hostname",
                "127.0.0.1", *metrics]
        tries_until = min(deadline, time.monotonic() + ATTACH_TRIES_S)
        status, report = -1, ""
        while True:
            try:
                done = subprocess.run(argv, cwd=self.process.root, capture_output=True, text=True, errors="replace",
                                      timeout=max(1.0, deadline - time.monotonic()))
                status, report = done.returncode, done.stdout + done.stderr
            except subprocess.TimeoutExpired:
                return -1, report + "\n(the front end did not finish in time)"
            if status == 0 or self.process.proc.poll() is not None or time.monotonic() > tries_until:
                return status, report
            time.sleep(0.5)

    def wait(self, deadline: float, closing: threading.Event) -> AttributedRun:
        """Attach, wait for the runner to end (killing it at ``deadline`` or a watchdog limit), and clean up."""
        from cudagym.judge.sanitizer import CLOSED

        run = self.process
        if run is None:  # nothing started: the host lacks what the gate needs
            return AttributedRun("", -1, False, False, False, "", 0.0, self.why)
        try:
            if not self.pid:
                return AttributedRun("", -1, False, False, False, "", time.monotonic() - run.started,
                                     "bubblewrap did not name its sandbox's process")
            status, report = self._attach(deadline)
            _, timed_out, killed_for = run.wait_end(deadline, closing)
            words = (run.loading_line or b"").split()  # "pid N": the runner's own words, before the candidate loaded
            pid = int(words[1]) if len(words) == 2 and words[0] == b"pid" and words[1].isdigit() else 0
            return AttributedRun(report, status, run.loaded, run.done, timed_out, run.output.text(),
                                 time.monotonic() - run.started, why=CLOSED if killed_for == CLOSED else "",
                                 pid=pid, killed_for="" if killed_for == CLOSED else killed_for)
        finally:
            run.close()


def read_sandbox_pid(read_fd: int) -> int:
    """The sandbox's first process id, as the host numbers it, from bubblewrap's ``--info-fd`` pipe.

    ``read_fd`` is the pipe's read end, closed here; 0 where bubblewrap said none within :data:`INFO_WAIT_S`.
    """
    data, deadline = b"", time.monotonic() + INFO_WAIT_S
    with os.fdopen(read_fd, "rb") as info:
        while time.monotonic() < deadline:
            if not select.select([info], [], [], max(0.0, deadline - time.monotonic()))[0]:
                break
            chunk = os.read(info.fileno(), 4096)
            data += chunk
            try:
                return int(json.loads(data)["child-pid"])
            except (ValueError, KeyError, TypeError):
                if not chunk:
                    break
    return 0


# ----------------------------------------------------------------------------------------------------
# The attributed runner (python -m cudagym.judge.attribution)
# ----------------------------------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    """Enter the sandbox, set up CUDA (the front end attaches here), load the candidate, run the marked forwards."""
    import pickle

    from cudagym.judge.sanitizer import forbid_sysv_ipc, start_gate_runner

    args, device = start_gate_runner(__name__, argv)
    mark = None
    if device.type == "cuda":  # the judge's marker, loaded before anything of the candidate's
        from cudagym.judge.harness.cover import spin_kernel

        mark = spin_kernel()
    forbid_sysv_ipc("attribution")  # as in the job's runner, before anything of the candidate's loads
    job: Job = pickle.loads(Path(args.job).read_bytes())
    forwards = marked_forwards(job, device, mark)
    sys.stdout.flush()
    os.write(1, f"\n{DONE_MARKER} {forwards} forwards\n".encode())
    return 0


def marked_forwards(job: Job, device: Any, mark: Any) -> int:
    """Load the candidate as the runner does and run :data:`FORWARDS` forwards, each between two markers."""
    import torch

    from cudagym.judge.harness.inputs import generate_inputs
    from cudagym.judge.harness.integrity import protocol_flags
    from cudagym.judge.harness.loading import build_models, candidate_module, load_reference

    protocol = job.protocol
    os.chdir(job.workdir)
    protocol_flags(protocol.matmul_tf32, protocol.cudnn_tf32).apply()
    torch.set_grad_enabled(False)
    reference = load_reference(job.task)
    seeds = [protocol.input_seeds()[n % protocol.num_inputs] for n in range(FORWARDS)]
    os.write(1, f"\n{LOADING_MARKER} pid {os.getpid()}\n".encode())  # from here on, a failure is the candidate's
    with candidate_module(job.build, Path(job.workdir)) as module:
        train = protocol.extra.get("module_mode", "eval") == "train"
        ref_model, model = build_models(reference, module, device, protocol.seed, train)
        del ref_model
        for seed in seeds:
            inputs = generate_inputs(reference.get_inputs, seed, device, on_device=True)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
                mark(grid=1, block=1, args=(1,))
            model(*inputs)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
                mark(grid=1, block=1, args=(1,))
                torch.cuda.synchronize(device)
            del inputs
    return len(seeds)


if __name__ == "__main__":
    sys.exit(main())
