"""Can Nsight Compute name the kernels a candidate's forward ran, from outside the candidate's Python?

Issue 13's open hole: the kernels a timed call ran are attributed by a profile taken in the runner, the
candidate's own process, and sent to the judge as a reply the candidate can rewrite (white-box test 21). ``ncu``
runs its target under an injection library and hands kernel names and durations to its own front-end process,
which writes the report: forging that needs the injection library's internals, not a Python dict. This probe
shows, on a GPU host, whether that path works at all and what it costs, for two forwards of the same Swish:

- ``own``: a CUDA kernel of its own (CuPy ``RawKernel``), the way a raw-format solution runs;
- ``fallback``: torch's ``sigmoid`` and ``mul`` (what a fallback hides behind a renamed profile);

each plain (no ``ncu``), under ``ncu`` directly, and under ``ncu`` with the child confined as the runner is
(``cudagym.judge.confine.wrap``: bubblewrap, no network, private ``/tmp`` and ``/dev/shm``). Confined, the child
needs ``ncu``'s injection libraries in its view (:func:`ncu_folders`; sessions 25 and 34: without them it ran
unprofiled, the loader refusing the preloaded libraries of the install CUDA's ``bin/ncu`` runs), and its injection
reports to the front end over a connection (the report's host is ``127.0.0.1``), which a private network cuts;
so four confined runs: ``ncu``'s folder in the view, then that with the host's network kept (is the connection
the channel?), the front end itself inside the sandbox with the child (the two share its loopback; the front end
is then in reach of the child), and the child launched under ``ncu --mode=launch`` in the sandbox with the front
end outside, attaching through the sandbox's network alone (``nsenter --net``); with ``--lifts``, the networked run
again with one isolation lifted at a time (:func:`lifted`: the PID, user or IPC namespace, the private ``/tmp`` or
``/dev/shm``, then all of them), which shows what keeps the injection from its front end. It prints per run the kernels
``ncu`` named with their summed ``gpu__time_duration``, the wall time against the plain run's, and ``ncu``'s
first warning or error.

    python benchmarks/attribution_probe.py [--calls 3] [--ncu ncu] [--out DIR] [--lifts]     (a GPU host)
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cudagym.judge.attribution import ncu_folders, read_sandbox_pid

CHILD = r'''
import sys
import torch

variant, calls = sys.argv[1], int(sys.argv[2])
x = torch.randn(1 << 22, device="cuda")
if variant == "own":
    import cupy
    kernel = cupy.RawKernel(r"""
    extern "C" __global__ void cudagym_probe_swish(const float* x, float* y, long long n) {
        long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
        if (i < n) { float v = x[i]; y[i] = v / (1.0f + __expf(-v)); }
    }""", "cudagym_probe_swish")

    def forward(t):
        y = torch.empty_like(t)
        n = t.numel()
        kernel(((n + 255) // 256,), (256,), (t.data_ptr(), y.data_ptr(), cupy.int64(n)),
               stream=cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream))
        return y
else:
    def forward(t):
        return torch.sigmoid(t) * t
for _ in range(calls):
    y = forward(x)
torch.cuda.synchronize()
print("done", float(y[:4].sum()))
'''

DURATION = "gpu__time_duration.sum"
UNITS_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6}


def kernel_times(report: str) -> dict[str, float]:
    """Per kernel name, the summed ``gpu__time_duration`` (µs) in an ``ncu --csv`` report (its details page).

    Lines before the CSV header (``ncu``'s own ``==PROF==`` messages, the target's output) are skipped.
    """
    lines = report.splitlines()
    start = next((i for i, line in enumerate(lines) if '"Kernel Name"' in line and '"Metric Value"' in line), None)
    if start is None:
        return {}
    totals: dict[str, float] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        if row.get("Metric Name") != DURATION:
            continue
        try:
            value = float(str(row.get("Metric Value", "")).replace(",", ""))
        except ValueError:
            continue
        scale = UNITS_US.get(str(row.get("Metric Unit", "")).strip(), 1.0)
        name = str(row.get("Kernel Name", ""))
        totals[name] = totals.get(name, 0.0) + value * scale
    return totals


def first_complaint(report: str) -> str:
    """``ncu``'s (or the loader's) first warning or error line in ``report``; ``""`` where none."""
    return next((line.strip() for line in report.splitlines()
                 if line.startswith(("==WARNING==", "==ERROR==", "ERROR:"))), "")


def ncu_view(confine: Any, work: Path, ncu: str) -> Any:
    """The runner's view with ``ncu``'s folders in it (:func:`ncu_folders`)."""
    return confine.view_for(reads=(str(work), *ncu_folders(ncu)), gpu=True, chdir=str(work), shm=True)


def child_env() -> dict[str, str]:
    """The environment of every run: inside the sandbox only ``/tmp`` is writable, so CuPy's cache goes there."""
    return {**os.environ, "CUPY_CACHE_DIR": "/tmp/cudagym-attrib-cupy"}


def confined_ways(confine: Any, profile: list[str], child: list[str], work: Path, ncu: str) -> dict[str, list[str]]:
    """The confined runs, by name: the child in the sandbox under the front end outside it (``ncu``'s folder in
    its view; then with the host's network kept), and both in the sandbox together."""
    bare = confine.view_for(reads=(str(work),), gpu=True, chdir=str(work))
    seen = ncu_view(confine, work, ncu)
    networked = dataclasses.replace(seen, network=True)
    return {"ncu+sandbox": [*profile, *confine.wrap(child, bare)],
            "ncu+sandbox+folder": [*profile, *confine.wrap(child, seen)],
            "ncu+sandbox+folder+net": [*profile, *confine.wrap(child, networked)],
            "sandbox(ncu)": confine.wrap([*profile, *child], seen)}


LIFTS = ("pid", "user", "ipc", "tmp", "shm", "all")


def lifted(argv: list[str], lift: str) -> list[str]:
    """``argv`` (bubblewrap's, perhaps behind a front end) with one of the sandbox's isolations lifted.

    ``pid``, ``user``, ``ipc``: the host's namespace kept; ``tmp``, ``shm``: the host's ``/tmp`` or ``/dev/shm``
    bound in place of the sandbox's own; ``all``: every one of them (the mounts' view and the network stay as
    they were). Session 34: ``ncu`` named no kernel of a child in the sandbox even with its folder in view and
    the network kept; each lift shows whether that isolation is what keeps its injection from its front end.
    """
    if lift not in LIFTS:
        raise ValueError(f"unknown lift {lift!r}: one of {', '.join(LIFTS)}")
    start = next(i for i, a in enumerate(argv) if Path(a).name == "bwrap")
    end = argv.index("--", start)
    head, options, tail = argv[:start + 1], argv[start + 1:end], argv[end:]
    lifts = LIFTS[:-1] if lift == "all" else (lift,)
    out: list[str] = []
    i = 0
    while i < len(options):
        a = options[i]
        if ("pid" in lifts and a == "--unshare-pid") or ("ipc" in lifts and a == "--unshare-ipc") or (
                "user" in lifts and a in ("--unshare-user", "--disable-userns")):
            i += 1
        elif "user" in lifts and a in ("--uid", "--gid"):
            i += 2
        elif "tmp" in lifts and a == "--size" and options[i + 2:i + 4] == ["--tmpfs", "/tmp"]:
            out += ["--bind", "/tmp", "/tmp"]
            i += 4
        elif "shm" in lifts and options[i:i + 2] == ["--remount-ro", "/dev"]:
            out += ["--bind", "/dev/shm", "/dev/shm", *options[i:i + 2]]  # over the private one, before /dev is sealed
            i += 2
        else:
            out.append(a)
            i += 1
    return [*head, *out, *tail]


ATTACH_TRIES_S = 30.0  # how long the front end keeps trying to reach the launched child
LAUNCHED_WAIT_S = 120.0  # how long the launched child may take to finish once its front end is done


def sandbox_pid(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], int]:
    """Start bubblewrap's ``argv`` with ``--info-fd`` and return it with its sandbox's first process id (0: none)."""
    read_fd, write_fd = os.pipe()
    wrapped = [argv[0], "--info-fd", str(write_fd), *argv[1:]]
    started = subprocess.Popen(wrapped, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                               pass_fds=(write_fd,))
    os.close(write_fd)
    return started, read_sandbox_pid(read_fd)


def attached_run(confine: Any, ncu: str, child: list[str], work: Path, metrics: list[str]) -> tuple[int, str, float]:
    """The child launched under ``ncu --mode=launch`` in the sandbox (waiting for a front end), and the front end
    outside it, in the sandbox's network alone (``nsenter --net``), attaching and writing the report.

    The front end then lies outside the child's processes and files, and reaches its injection over the
    sandbox's own loopback.
    """
    argv = confine.wrap([ncu, "--mode=launch", *child], ncu_view(confine, work, ncu))
    nsenter = shutil.which("nsenter")
    if not argv[0].endswith("bwrap") or nsenter is None:  # unconfined, wrap hands the command back as it is
        return -1, "not run: needs bubblewrap (CUDAGYM_SANDBOX=bwrap) and nsenter", 0.0
    env = child_env()
    began = time.perf_counter()
    launched, pid = sandbox_pid(argv, work, env)
    report, out, status = "", "", -1
    try:
        if not pid:
            report = "bubblewrap did not say its sandbox's process id\n"
        else:
            attach = [nsenter, "--target", str(pid), "--net", "--", ncu, "--mode=attach", "--hostname", "127.0.0.1",
                      *metrics]
            tries_until = time.monotonic() + ATTACH_TRIES_S
            while True:
                try:
                    done = subprocess.run(attach, cwd=work, capture_output=True, text=True, timeout=LAUNCHED_WAIT_S,
                                          env=env)
                    report, status = done.stdout + done.stderr, done.returncode
                except subprocess.TimeoutExpired:
                    report, status = f"the front end did not finish in {LAUNCHED_WAIT_S:.0f} s\n", -1
                    break
                if status == 0 or launched.poll() is not None or time.monotonic() > tries_until:
                    break
                time.sleep(0.5)  # the child has not reached its first CUDA call yet
        if status != 0 and launched.poll() is None:
            launched.kill()  # no front end reached it: it would wait for one forever
        try:
            out = launched.communicate(timeout=LAUNCHED_WAIT_S)[0] or ""
        except subprocess.TimeoutExpired:
            launched.kill()
            out = (launched.communicate()[0] or "") + f"\n(killed: still running {LAUNCHED_WAIT_S:.0f} s on)"
    finally:
        if launched.poll() is None:
            launched.kill()
            launched.wait()
    return status, report + out, time.perf_counter() - began


RUN_TIMEOUT_S = 90.0  # one run's limit: session 35's first lifted run hung past the step's 240 s


def run(argv: list[str], cwd: Path, timeout_s: float = RUN_TIMEOUT_S) -> tuple[int, str, float]:
    """``argv``'s exit status, its stdout and stderr together, and its wall time (s); a run past ``timeout_s`` is
    killed and its row says so (status -1)."""
    began = time.perf_counter()
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout_s, env=child_env())
    except subprocess.TimeoutExpired as late:
        text = (late.stdout or b"") + (late.stderr or b"")
        text = text.decode(errors="replace") if isinstance(text, bytes) else text
        return -1, f"==ERROR== killed: still running after {timeout_s:.0f} s\n{text}", time.perf_counter() - began
    return done.returncode, done.stdout + done.stderr, time.perf_counter() - began


def main(args: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=3, help="forwards per run (default 3)")
    parser.add_argument("--ncu", default=shutil.which("ncu") or "/usr/local/cuda/bin/ncu", help="the ncu to run")
    parser.add_argument("--out", default=None, help="keep each run's output here")
    parser.add_argument("--lifts", action="store_true",
                        help="also the networked run with each isolation lifted in turn (what keeps ncu out)")
    parser.add_argument("--variants", default="own,fallback", help="forwards, comma-separated (default own,fallback)")
    parser.add_argument("--ways", default="",
                        help="runs, comma-separated, in this order (default all; e.g. plain,ncu+sandbox+folder+net)")
    parser.add_argument("--run-timeout", type=float, default=RUN_TIMEOUT_S,
                        help=f"one run's limit in seconds (default {RUN_TIMEOUT_S:.0f})")
    opts = parser.parse_args(args)
    if not Path(opts.ncu).exists():
        print(f"no ncu at {opts.ncu} (--ncu names one)")
        return 2
    variants = [v for v in opts.variants.split(",") if v]
    if not variants or set(variants) - {"own", "fallback"}:
        print(f"--variants: own and/or fallback, not {opts.variants!r}")
        return 2
    from cudagym.judge import confine

    work = Path(tempfile.mkdtemp(prefix="cudagym-attrib-"))
    (work / "child.py").write_text(CHILD)
    out = Path(opts.out) if opts.out else None
    if out:
        out.mkdir(parents=True, exist_ok=True)
    profile = [opts.ncu, "--csv", "--metrics", DURATION, "--clock-control", "none", "--target-processes", "all"]
    # the rows as they come: a step cut short keeps the ones done
    print("| forward | run | exit | wall (vs plain) | kernels ncu named, summed duration | ncu's first warning |")
    print("|---|---|---|---|---|---|")
    for variant in variants:
        child = [sys.executable, str(work / "child.py"), variant, str(opts.calls)]
        ways: dict[str, list[str]] = {"plain": child, "ncu": [*profile, *child]}
        ways.update(confined_ways(confine, profile, child, work, opts.ncu))
        if opts.lifts and Path(ways["ncu+sandbox+folder+net"][len(profile)]).name == "bwrap":
            ways.update({f"ncu+sandbox+folder+net-{lift}": lifted(ways["ncu+sandbox+folder+net"], lift)
                         for lift in LIFTS})
        ways["sandbox(launch)+attach"] = []
        chosen = [w for w in opts.ways.split(",") if w] or list(ways)
        unknown = [w for w in chosen if w not in ways]
        if unknown:
            print(f"--ways: unknown {', '.join(unknown)}; the runs are {', '.join(ways)}")
            return 2
        plain_s = 0.0
        for way in chosen:
            argv = ways[way]
            status, text, wall = (attached_run(confine, opts.ncu, child, work, profile[1:-2]) if not argv
                                  else run(argv, work, opts.run_timeout))
            if out:
                (out / f"{variant}-{way.replace('+', '-').replace('(', '-').replace(')', '')}.log").write_text(text)
            plain_s = wall if way == "plain" else plain_s
            times = kernel_times(text)
            named = ", ".join(f"{k[:60]} {v:.1f} us" for k, v in sorted(times.items())) or "(no kernels named)"
            versus = f"{wall / plain_s:.2f}x" if plain_s else "no plain run"
            print(f"| {variant} | {way} | {status} | {wall:.2f} s ({versus}) | {named} "
                  f"| {first_complaint(text)[:160]} |", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
