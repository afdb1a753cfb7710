"""compute-sanitizer gates on SUBMIT: the candidate's checked calls once more, under NVIDIA's checkers.

A protocol whose ``sanitizer`` field names tools (``memcheck``: out-of-bounds and misaligned accesses;
``initcheck``: reads of global memory nothing wrote; ``racecheck``: shared-memory hazards; ``synccheck``:
invalid barriers) gates a SUBMIT on them. Once the candidate has passed everything else, the lane starts, per
tool and all at once, a fresh *sanitized runner*:

    bwrap ... compute-sanitizer --tool memcheck --error-exitcode 86 --log-file <its folder>/report.txt ...
        python -m cudagym.judge.sanitizer --job <its folder>/job.pickle ...

confined like the job's runner (its own folder the only writable one, the GPU, no network, no System V IPC
once the tool has attached; the sanitizer lives in the CUDA toolkit, which every view shows read-only). It
draws the correctness inputs from the protocol's seeds (plus the scaled sets), runs ``ModelNew`` on each and
exits: no timed round (the tools slow kernels 10-100x), no comparison (the trusted side made it already).
PyTorch's caching allocator is off there (``PYTORCH_NO_CUDA_MEMORY_CACHING=1``): each tensor is its own
``cudaMalloc``, so the tools know its exact size and first write, where the cache would show them 2 MiB
segments that earlier tensors filled.

What decides, and why the candidate cannot forge it from inside: the sanitizer's **exit status**, which the
lane reads from the process it started (the front end is the candidate's parent; killing it is a failure,
not a pass), then its report file for the message. A candidate can only add lines there, or erase them
(then the message says the report was lost); a clean verdict needs exit status 0 *and* the report's own
error summary. Whether the candidate's code had started is read from a marker the runner writes to its
output pipe before it loads the solution: a failure before it is the judge's (``infra_error``), after it
the candidate's; a second marker after the last checked call must be there too for a pass (a candidate that
exits early, status 0, has not passed). Not closed: a candidate that detects the sanitizer (its injection
library is in its process) can behave well only there, or print the second marker itself, as any audited
call can be told from an unaudited one by code that reads the judge.

Each gate's verdict: no errors (a note with its wall time), errors (violation ``sanitizer_<tool>`` with the
first findings, host paths cut), the candidate failing or timing out under the tool where it had passed
without it (the same violation: its behaviour under the tool is the candidate's), or the tool unable to
start (``infra_error``). The child side of this module is ``python -m cudagym.judge.sanitizer``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pickle
import re
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from cudagym.errors import ConfigError
from cudagym.judge.interface import EvalMode
from cudagym.judge.job import Job
from cudagym.judge.protocol import SANITIZER_TOOLS, Protocol
from cudagym.judge.records import EvalResult, EvalStatus, Violation

BINARY_ENV = "CUDAGYM_COMPUTE_SANITIZER"
ERROR_EXIT = 86  # --error-exitcode: the front end's status when its tool reported an error
PRINT_LIMIT = 20  # --print-limit: errors written out in full (the summary still counts them all)
SHOWN_FINDINGS = 3  # findings quoted in a violation's message
LOADING_MARKER = "\x1ecudagym-sanitizer: loading the candidate\x1e"
DONE_MARKER = "\x1ecudagym-sanitizer: checked calls done\x1e"
_TAIL_LINES = 15


def rule_name(tool: str) -> str:
    """The violation a tool's gate raises: ``sanitizer_memcheck``, ``sanitizer_initcheck``, ..."""
    return f"sanitizer_{tool}"


def gates(job: Job, result: EvalResult) -> tuple[str, ...]:
    """The tools whose gates this job's result still has to pass: SUBMIT only, and only a passing result."""
    if job.mode is not EvalMode.SUBMIT or result.status is not EvalStatus.OK:
        return ()
    return job.protocol.sanitizer


# ----------------------------------------------------------------------------------------------------
# Finding the tool and building its command
# ----------------------------------------------------------------------------------------------------

def find_compute_sanitizer(homes: Sequence[str] | None = None) -> str:
    """Path of compute-sanitizer: ``CUDAGYM_COMPUTE_SANITIZER``, else a CUDA toolkit's ``bin``, else ``PATH``.

    Args:
        homes: CUDA toolkit folders to look in (default: ``$CUDA_HOME``, ``$CUDA_PATH``, ``/usr/local/cuda``).

    Raises:
        ConfigError: None is found (or the variable names no executable).
    """
    return find_cuda_tool("compute-sanitizer", BINARY_ENV, "install the CUDA toolkit's compute-sanitizer", homes)


def find_cuda_tool(name: str, variable: str, install: str, homes: Sequence[str] | None = None) -> str:
    """Path of a CUDA tool ``name``: the environment ``variable``, else a CUDA toolkit's ``bin``, else ``PATH``.

    Raises:
        ConfigError: None is found (``install`` says how to get it), or the variable names no executable.
    """
    explicit = os.environ.get(variable, "")
    if explicit:
        if os.path.isfile(explicit) and os.access(explicit, os.X_OK):
            return explicit
        raise ConfigError(f"expected {variable} to name the {name} executable, got {explicit!r}; fix or unset it")
    if homes is None:
        homes = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""), "/usr/local/cuda"]
    for home in filter(None, homes):
        candidate = os.path.join(home, "bin", name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(name)
    if found:
        return found
    looked = ", ".join(os.path.join(h, "bin") for h in filter(None, homes))
    raise ConfigError(f"no {name} found (looked in {looked or 'no CUDA toolkit folder'} and on PATH); {install} or "
                      f"point {variable} at it")


def require_compute_sanitizer(protocol: Protocol) -> str:
    """The compute-sanitizer a protocol's gates need ("" when it has none): check it before judging.

    Raises:
        ConfigError: The protocol has gates and this host has no compute-sanitizer.
    """
    if not protocol.sanitizer:
        return ""
    try:
        return find_compute_sanitizer()
    except ConfigError as exc:
        raise ConfigError(f"protocol {protocol.id} gates SUBMIT on compute-sanitizer ({', '.join(protocol.sanitizer)}"
                          f"): {exc}; or judge with a protocol whose sanitizer field is empty") from None


def sanitizer_argv(binary: str, tool: str, log_file: str, argv: Sequence[str]) -> list[str]:
    """``argv`` run under ``tool``: errors set the exit status, the report goes to ``log_file``.

    API errors are not reported (torch probes entry points and devices, and those calls fail by design);
    host backtraces are off (their frames name host paths and fill the print limit); the application's own
    exit status passes through (a candidate that fails under the tool is told apart from a tool finding).
    """
    if tool not in SANITIZER_TOOLS:
        raise ConfigError(f"expected a compute-sanitizer tool of {', '.join(SANITIZER_TOOLS)}, got {tool!r}")
    return [binary, "--tool", tool, "--error-exitcode", str(ERROR_EXIT), "--print-limit", str(PRINT_LIMIT),
            "--log-file", log_file, "--report-api-errors", "no", "--show-backtrace", "no",
            "--check-exit-code", "no", "--target-processes", "all", "--launch-timeout", "0", *argv]


# ----------------------------------------------------------------------------------------------------
# Reading the report
# ----------------------------------------------------------------------------------------------------

_PREFIX = "========="
_SUMMARY = re.compile(r"^(?:ERROR|RACECHECK|SYNCCHECK|INITCHECK|MEMCHECK) SUMMARY:\s*([\d,]+)\s+(?:errors?|hazards?)",
                      re.I)
_ERRORS_IN = re.compile(r"\(([\d,]+)\s+errors?", re.I)  # racecheck: "1 hazard displayed (1 error, 0 warnings)"
_HOST_PATH = re.compile(r"(?<![\w.])/(?:[^\s/:]+/)+([^\s/:]+)")
_TOOL_ERROR = re.compile(r"^(?:Error|Internal error)\b(?!: Race reported)", re.I)  # racecheck's hazards read "Error:"
_ERROR_HEADLINE = re.compile(r"Invalid|Uninitiali[sz]ed|Misaligned|Race reported|Barrier error|Hardware exception|"
                             r"Out-of-range|Leaked|Unused memory|Program hit|Malloc|Free", re.I)
_FRAMES = ("Host Frame", "Device Frame", "Saved host backtrace", "Saved device backtrace")
_DETAILS = 5  # lines kept per finding after its headline: kernel, source line, thread, address, allocation
_LINE_CHARS = 300


@dataclass(frozen=True)
class Finding:
    """One error the tool reported: its first line and the lines that place it (kernel, thread, address)."""

    headline: str
    details: tuple[str, ...] = ()

    def describe(self) -> str:
        """The finding on one line, host paths cut to file names."""
        return "; ".join((self.headline, *self.details))


@dataclass(frozen=True)
class Report:
    """What compute-sanitizer wrote.

    Attributes:
        errors: The error count of its summary line; -1 when it wrote none.
        findings: The errors it wrote out (at most its print limit).
        tool_errors: Its own failures (``Error: ...``): it could not start or attach.
    """

    errors: int = -1
    findings: tuple[Finding, ...] = ()
    tool_errors: tuple[str, ...] = ()

    @property
    def summarized(self) -> bool:
        """True when the report ends with the tool's summary (it ran to the end)."""
        return self.errors >= 0


def parse_report(text: str) -> Report:
    """Read compute-sanitizer's report (``=========``-prefixed lines; other lines are ignored).

    An error opens with an unindented line (``Invalid __global__ read of size 4 bytes``); its indented lines
    follow; a bare prefix closes it. Host frames and backtrace headers are dropped, paths cut to file names;
    an unindented line with no details that does not read as an error is the tool's information.
    """
    errors, findings, tool_errors = -1, [], []
    current: list[str] = []
    in_frames = False  # inside a backtrace: its frames and their "in <library>" lines are dropped

    def close() -> None:  # a headline with no detail is a finding only if it reads as one (else the tool's info)
        if current and (len(current) > 1 or _ERROR_HEADLINE.search(current[0])):
            findings.append(Finding(current[0], tuple(current[1:_DETAILS + 1])))
            current.clear()

    for raw in text.splitlines():
        if not raw.startswith(_PREFIX):
            continue
        body = raw[len(_PREFIX):]
        line = _cut_paths(body.strip())[:_LINE_CHARS]
        if not line:
            close()
            in_frames = False
        elif body.startswith((" " * 2, "\t")):  # a detail of the current error
            in_frames = in_frames or line.startswith(_FRAMES)
            if current and not in_frames:
                current.append(line)
        elif summary := _SUMMARY.match(line):
            close()
            count = _ERRORS_IN.search(line) if line.upper().startswith("RACECHECK") else None
            errors = _count((count or summary).group(1))
        elif _TOOL_ERROR.match(line):
            close()
            tool_errors.append(line)
        elif line.upper() != "COMPUTE-SANITIZER":
            close()
            in_frames = False
            current.append(line)
    close()
    return Report(errors, tuple(findings), tuple(tool_errors))


def _cut_paths(line: str) -> str:
    return _HOST_PATH.sub(lambda m: m.group(1), line)


def _count(digits: str) -> int:
    return int(digits.replace(",", ""))


# ----------------------------------------------------------------------------------------------------
# The verdict of one gate, and of all of them
# ----------------------------------------------------------------------------------------------------

Verdict = Literal["clean", "errors", "candidate_failed", "infra"]


@dataclass(frozen=True)
class GateRun:
    """How one sanitized run ended, as the lane saw it (nothing here comes from the runner's messages).

    Attributes:
        tool: The compute-sanitizer tool.
        returncode: The front end's exit status (``-N``: killed by signal N); ignored when ``timed_out``.
        report: Its report file, read.
        output: The runner's stdout and stderr (the candidate's prints among them), capped.
        loaded: The runner had started loading the candidate (its marker is in ``output``).
        done: The runner finished the checked calls (its marker too: a candidate that exits early has none).
        timed_out: The lane killed it at the deadline.
        wall_s: Seconds from start to end.
        killed_for: Why the lane's watchdog killed it ("" if it did not).
        report_text: The report file's text (capped), for the messages of runs that went wrong.
    """

    tool: str
    returncode: int
    report: Report
    output: str = ""
    loaded: bool = False
    done: bool = False
    timed_out: bool = False
    wall_s: float = 0.0
    killed_for: str = ""
    report_text: str = ""


@dataclass(frozen=True)
class GateVerdict:
    """One gate's outcome: ``clean``, ``errors``, ``candidate_failed`` (both violations) or ``infra``."""

    tool: str
    verdict: Verdict
    message: str


def judge_run(run: GateRun, timeout_s: float) -> GateVerdict:
    """The verdict of one sanitized run (pure: the lane's observations in, a verdict out)."""
    tool, report = run.tool, run.report
    if report.findings or (run.returncode == ERROR_EXIT and report.errors != 0 and run.loaded):
        return GateVerdict(tool, "errors", _errors_message(run))
    if run.returncode == 0 and report.errors == 0 and run.done and not run.timed_out and not run.killed_for:
        return GateVerdict(tool, "clean", f"compute-sanitizer {tool}: no errors in the candidate's checked calls "
                           f"({run.wall_s:.1f} s)")
    if not run.loaded:
        why = "; ".join(report.tool_errors) or _status_words(run, timeout_s)
        return GateVerdict(tool, "infra", f"compute-sanitizer {tool} could not run the candidate's checked calls "
                           f"({why}); the protocol gates SUBMIT on it{_tail(run.report_text, 'its report')}"
                           f"{_tail(run.output)}")
    return GateVerdict(tool, "candidate_failed", f"the candidate's checked calls failed under compute-sanitizer {tool} "
                       f"({_status_words(run, timeout_s)}), where they had passed without it{_tail(run.output)}")


def _errors_message(run: GateRun) -> str:
    report = run.report
    count = report.errors if report.errors > 0 else len(report.findings)
    head = (f"compute-sanitizer {run.tool} found {count} error{'s' if count != 1 else ''} in the candidate's checked "
            f"calls" if count else f"compute-sanitizer {run.tool} reported errors (exit status {run.returncode})")
    shown = [f"  {f.describe()}" for f in report.findings[:SHOWN_FINDINGS]]
    if not shown:
        shown = [f"  {e}" for e in report.tool_errors[:SHOWN_FINDINGS]] or [
            "  (its report was lost: the file the runner could write holds none of it)"]
    return "\n".join([head + ":", *shown])


def _status_words(run: GateRun, timeout_s: float) -> str:
    if run.timed_out:
        return f"did not finish within {timeout_s:.0f} s; the tools slow kernels 10-100x"
    if run.killed_for:
        return run.killed_for
    if run.returncode < 0:
        return f"killed by signal {-run.returncode}"
    if run.returncode == 0:
        return ("exit status 0 but no error summary from the tool" if not run.report.summarized
                else "it exited before its checked calls were done")
    return f"exit status {run.returncode}"


def _tail(output: str, what: str = "last output") -> str:
    text = output.replace(LOADING_MARKER, "").replace(DONE_MARKER, "")
    lines = [_cut_paths(line) for line in text.splitlines() if line.strip()]
    return (f"\n{what}:\n" + "\n".join(lines[-_TAIL_LINES:])) if lines else ""


def apply_verdicts(result: EvalResult, verdicts: Sequence[GateVerdict], wall_s: float) -> EvalResult:
    """``result`` (a passing SUBMIT) with the gates' verdicts: violations, an ``infra_error``, or notes only."""
    notes = tuple(v.message.splitlines()[0] for v in verdicts)
    log = "\n".join([result.log, *(v.message for v in verdicts)]).strip()
    base = dataclasses.replace(result, notes=(*result.notes, *notes), log=log,
                               wall_time_s=result.wall_time_s + wall_s)
    failed = [v for v in verdicts if v.verdict in ("errors", "candidate_failed")]
    if failed:
        found = tuple(Violation(rule_name(v.tool), v.message) for v in failed)
        message = "; ".join(f"{rule_name(v.tool)}: {v.message}" for v in failed)
        return dataclasses.replace(base, status=EvalStatus.RULE_VIOLATION, message=message,
                                   violations=(*result.violations, *found))
    broken = [v for v in verdicts if v.verdict == "infra"]
    if broken:
        return dataclasses.replace(base, status=EvalStatus.INFRA_ERROR, message="; ".join(v.message for v in broken))
    return base


# ----------------------------------------------------------------------------------------------------
# Lane side: start the sanitized runners, wait, judge
# ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Launch:
    """What the lane gives the gates: where runs keep their folders, and how its runners are confined.

    Attributes:
        root: Folder under which each run makes its own.
        policy: The sandbox policy of the pool (its limits bind every run).
        pythonpath: Folders the runs read besides the system (the pool's ``PoolOptions.reads()``).
        env: The scrubbed environment of a runner whose folder is the argument (as the job's runner gets).
        closing: Set when the pool closes: running gates are killed.
        timeout_s: Wall-clock limit of the gates together (0: the protocol's ``eval_timeout_s``).
    """

    root: Path
    policy: Any  # SandboxPolicy
    pythonpath: tuple[str, ...]
    env: Callable[[Path], dict[str, str]]
    closing: threading.Event
    timeout_s: float = 0.0


def gate(job: Job, result: EvalResult, launch: Launch) -> EvalResult:
    """Run the protocol's gates on a passing SUBMIT ``result`` (all tools at once), and apply their verdicts."""
    tools = gates(job, result)
    if not tools:
        return result
    started = time.monotonic()
    try:
        binary = require_compute_sanitizer(job.protocol)
    except ConfigError as exc:
        return dataclasses.replace(result, status=EvalStatus.INFRA_ERROR, message=str(exc))
    runs: list[_SanitizedRun] = []
    try:
        for tool in tools:
            runs.append(_SanitizedRun(job, tool, binary, launch))
        timeout_s = launch.timeout_s or job.protocol.eval_timeout_s
        verdicts = [judge_run(run.wait(started + timeout_s, launch.closing), timeout_s) for run in runs]
    except OSError as exc:
        return dataclasses.replace(result, status=EvalStatus.INFRA_ERROR,
                                   message=f"compute-sanitizer gates could not start: {exc}")
    finally:
        for run in runs:
            run.close()
    return apply_verdicts(result, verdicts, time.monotonic() - started)


def hand_job(job: Job, root: Path) -> Path:
    """A fresh run's own copy of the job's artifact and working folder under ``root``, and the job naming them.

    Pickled; its path is returned: what a gate's runner loads, so nothing it writes reaches the job's own files.
    """
    from cudagym.judge.build.artifact import export_artifact
    from cudagym.judge.sandbox import prepare_workdir

    handed = root / "job"
    build = export_artifact(job.build, handed / "build")
    work = handed / "work"
    workdir = str(shutil.copytree(job.workdir, work, symlinks=True) if job.workdir
                  else prepare_workdir(work, job.solution))
    path = root / "job.pickle"
    path.write_bytes(pickle.dumps(dataclasses.replace(job, build=build, workdir=workdir)))
    return path


class GateProcess:
    """A gate's confined runner as the lane holds it, from its start to its folder's removal.

    Its output is drained (the runner's markers read, its size capped), its limits watched, its end awaited, its
    folder removed on :meth:`close`. The loading marker's line, the runner's own words before any candidate code
    loads, is kept (:attr:`loading_line`); the candidate cannot take back what reached the pipe.
    """

    def __init__(self, proc: subprocess.Popen[bytes], root: Path, policy: Any, name: str, loading: str,
                 done: str) -> None:
        from cudagym.judge.sandbox import CappedLog
        from cudagym.judge.watchdog import shared_watchdog

        self.proc, self.root, self.policy = proc, root, policy
        self.started = time.monotonic()
        self.output = CappedLog(policy.log_bytes)
        self.loaded = self.done = False
        self.loading_line: bytes | None = None  # the rest of the loading marker's line, once whole
        self.overflow = ""
        self._markers = (loading.encode(), done.encode())
        self.watch = shared_watchdog().watch(proc.pid, policy, dirs=(str(root),))
        self.reader = threading.Thread(target=self._read, name=name, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        from cudagym.judge.watchdog import kill_process_group

        assert self.proc.stdout is not None
        loading, done = self._markers
        seen = b""
        for chunk in iter(lambda: os.read(self.proc.stdout.fileno(), 65536), b""):  # type: ignore[union-attr]
            window = seen + chunk
            self.loaded = self.loaded or loading in window
            if self.loaded and self.loading_line is None and loading in window:
                rest = window.split(loading, 1)[1]
                if b"\n" in rest:
                    self.loading_line = rest.split(b"\n", 1)[0]
            self.done = self.done or (self.loaded and done in window)
            seen = window[-4096:]
            self.output.feed(chunk)
            if self.output.total_bytes > self.policy.output_bytes and not self.overflow:
                self.overflow = f"wrote more than {self.policy.output_bytes >> 20} MiB to stdout/stderr"
                kill_process_group(self.proc.pid)

    def wait_end(self, deadline: float, closing: threading.Event) -> tuple[int, bool, str]:
        """Wait for the runner to end; its exit status, whether it ran out of time, and why it was killed.

        It is killed at ``deadline``, on a watchdog limit, for its output, or when the pool closes. The status is
        -9 where it could not be reaped; the reason "" where it was not killed.
        """
        from cudagym.judge.watchdog import kill_and_reap

        timed_out, killed_for = False, ""
        while self.proc.poll() is None:
            if self.watch.violation or self.overflow or closing.is_set():
                killed_for = self.watch.violation or self.overflow or CLOSED
                break
            if time.monotonic() > deadline:
                timed_out = True
                break
            time.sleep(0.05)
        reaped = kill_and_reap(self.proc)
        self.reader.join(timeout=5)
        killed_for = killed_for or self.watch.violation or self.overflow  # the watchdog may have been first
        return (-9 if reaped is None else reaped), timed_out, killed_for

    def close(self) -> None:
        """Kill what is left of the runner and delete its folder."""
        from cudagym.judge.sandbox import remove_tree
        from cudagym.judge.watchdog import kill_and_reap, shared_watchdog

        kill_and_reap(self.proc)
        shared_watchdog().unwatch(self.watch)
        self.reader.join(timeout=5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        remove_tree(self.root)


CLOSED = "the judge closed while the gate ran"


class _SanitizedRun:
    """One tool's run: its own folder, copy of the job, confined process, output pipe and report file."""

    def __init__(self, job: Job, tool: str, binary: str, launch: Launch) -> None:
        from cudagym.judge import confine
        from cudagym.judge.sandbox import inner_policy, remove_tree

        self.tool = tool
        root = Path(tempfile.mkdtemp(prefix=f"sanitizer-{tool}-", dir=launch.root))
        try:
            for sub in ("home", "tmp", "report"):
                (root / sub).mkdir()
            self.report_file = root / "report" / "report.txt"
            job_file = hand_job(job, root)
            argv = [sys.executable, "-m", __name__, "--job", str(job_file), "--root", str(root),
                    "--policy", inner_policy(launch.policy).to_json()]
            command = sanitizer_argv(binary, tool, str(self.report_file), argv)
            view = confine.view_for(reads=launch.pythonpath, writes=(str(root),), gpu=True, chdir=root,
                                    tools=(binary,), shm=True)
            proc = confine.popen(confine.wrap(command, view), cwd=root, env=self._env(launch, root),
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        except BaseException:
            remove_tree(root)
            raise
        self.run = GateProcess(proc, root, launch.policy, f"cudagym-sanitizer-{tool}", LOADING_MARKER, DONE_MARKER)

    @staticmethod
    def _env(launch: Launch, root: Path) -> dict[str, str]:
        env = launch.env(root)
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)  # expandable segments give the tools false alarms
        env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"  # one cudaMalloc per tensor: exact bounds, first writes seen
        return env

    def wait(self, deadline: float, closing: threading.Event) -> GateRun:
        """Wait for the run to end (killing it at ``deadline``, on a watchdog limit or when the pool closes)."""
        from cudagym.judge import confine

        run = self.run
        code, timed_out, killed_for = run.wait_end(deadline, closing)
        text = read_report_file(self.report_file)  # only read, never followed
        return GateRun(self.tool, confine.exit_status(code), parse_report(text), run.output.text(), run.loaded,
                       run.done, timed_out, time.monotonic() - run.started, killed_for, text[-8000:])

    def close(self) -> None:
        """Kill what is left of the run and delete its folder."""
        self.run.close()


def read_report_file(path: Path, cap_bytes: int = 1 << 20) -> str:
    """The report at ``path`` in a folder the candidate could write: "" unless both are what they should be.

    The folder and the file are opened without following links (a link planted there would make the judge
    read one of its own files into the candidate's observation), the file only if it is a regular file (a
    FIFO would block the lane), and at most ``cap_bytes`` of it. NULs are dropped: a file truncated under
    the tool's feet reads as a hole, then the rest of what the tool wrote.
    """
    try:
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return ""
    try:
        fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
    except OSError:
        return ""
    finally:
        os.close(folder)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(cap_bytes)
    except OSError:
        return ""
    finally:
        os.close(fd)
    return data.replace(b"\0", b"").decode(errors="replace")


# ----------------------------------------------------------------------------------------------------
# Child side: ``python -m cudagym.judge.sanitizer`` (under compute-sanitizer, confined)
# ----------------------------------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    """Enter the sandbox, set up CUDA, announce the candidate, run its checked calls, exit."""
    args, device = start_gate_runner(__name__, argv)
    forbid_sysv_ipc("sanitizer")
    job: Job = pickle.loads(Path(args.job).read_bytes())
    calls = checked_calls(job, device)
    sys.stdout.flush()
    os.write(1, f"\n{DONE_MARKER} {calls} input sets\n".encode())
    return 0


def start_gate_runner(module: str, argv: Sequence[str] | None) -> tuple[argparse.Namespace, Any]:
    """A gate's runner's start (``python -m MODULE --job ... --root ... --policy ...``); its arguments and device.

    Its arguments read, the sandbox's policy applied, and CUDA set up (a tool attaches at that first call, before
    anything of the candidate's); the device is the CPU on the test path.
    """
    from cudagym.judge.sandbox import SandboxPolicy, enter_sandbox

    parser = argparse.ArgumentParser(prog=f"python -m {module}")
    parser.add_argument("--job", required=True)
    parser.add_argument("--root", required=True)
    parser.add_argument("--policy", required=True)
    args = parser.parse_args(argv)
    enter_sandbox(SandboxPolicy.from_json(args.policy))
    import torch

    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":  # the tool attaches here: before anything of the candidate's
        torch.cuda.set_device(device)
        torch.ones(1, device=device).add_(1)
        torch.cuda.synchronize(device)
    else:
        torch.set_num_threads(1)  # the CPU test path
    return args, device


def forbid_sysv_ipc(gate: str) -> None:
    """No System V IPC for the candidate, as in the job's runner: a segment no process maps is memory no limit counts.

    Installed here, in the Python child, once the tool has attached (the CUDA warm-up above) and before anything
    of the candidate's loads (the job is read after it); the filter holds for the candidate and every process it
    starts. Not around compute-sanitizer's front end: no candidate code runs there, and the tool's own start
    (the front end, and its injection library's attach in this process) runs unfiltered, as on any host.
    compute-sanitizer 13 on an H200 made no System V object and found its errors with the filter on the front
    end, or here before or after the warm-up; older versions were not tried, and this placement does not depend on
    what they do before the candidate loads.
    """
    from cudagym.judge.sandbox import forbid_sysv_ipc as forbid

    confined, note = forbid()
    if not confined:
        print(f"cudagym {gate}: System V IPC left open: {note}", file=sys.stderr, flush=True)


def checked_calls(job: Job, device: Any) -> int:
    """Load the candidate as the runner does and call it on the protocol's correctness inputs; how many sets.

    Its outputs are not compared (the trusted side did that): the tool watches the memory the calls touch.
    """
    import torch

    from cudagym.judge.harness.context import signed_float_tensors
    from cudagym.judge.harness.inputs import generate_inputs
    from cudagym.judge.harness.integrity import protocol_flags
    from cudagym.judge.harness.loading import build_models, candidate_module, load_reference

    protocol = job.protocol
    os.chdir(job.workdir)
    protocol_flags(protocol.matmul_tf32, protocol.cudnn_tf32).apply()
    torch.set_grad_enabled(False)
    reference = load_reference(job.task)
    sets: list[tuple[int, float]] = [(seed, 1.0) for seed in protocol.input_seeds()]
    sets += [(secrets.randbelow(2**31 - 1), factor) for factor in protocol.scaled_inputs]  # unpublished, as there
    os.write(1, f"\n{LOADING_MARKER}\n".encode())  # from here on, a failure is the candidate's
    with candidate_module(job.build, Path(job.workdir)) as module:
        train = protocol.extra.get("module_mode", "eval") == "train"
        ref_model, model = build_models(reference, module, device, protocol.seed, train)
        del ref_model
        for seed, factor in sets:
            inputs = generate_inputs(reference.get_inputs, seed, device, on_device=True)
            if factor != 1.0:
                for tensor in signed_float_tensors(inputs):
                    tensor.mul_(factor)
            model(*inputs)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            del inputs
    return len(sets)


if __name__ == "__main__":
    sys.exit(main())
