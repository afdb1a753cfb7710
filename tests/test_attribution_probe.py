"""benchmarks/attribution_probe.py on the CPU: reading an ``ncu --csv`` report, and a clear stop without ncu."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
from script_module import load_script

probe = load_script("benchmarks/attribution_probe.py", "attribution_probe")

# ncu's own messages and the target's output come first; then the details page, one row per kernel and metric
HEADER = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
          "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit", "Metric Value")
SWISH = ("cudagym_probe_swish", "1", "7", "(256, 1, 1)", "(16384, 1, 1)", "0", "9.0", "Command line profiler metrics")
TORCH = ("void at::native::vectorized_elementwise_kernel<4>", "1", "7", "(128, 1, 1)", "(8192, 1, 1)", "0", "9.0",
         "Command line profiler metrics")
PROCESS = ("4242", "python3", "127.0.0.1")
ROWS = [("0", *PROCESS, *SWISH, "gpu__time_duration.sum", "usecond", "21.44"),
        ("1", *PROCESS, *SWISH, "gpu__time_duration.sum", "nsecond", "20,960"),
        ("2", *PROCESS, *TORCH, "gpu__time_duration.sum", "msecond", "0.05"),
        ("3", *PROCESS, *SWISH, "sm__cycles_elapsed.avg", "cycle", "1000")]
REPORT = "\n".join(["==PROF== Connected to process 4242 (/usr/bin/python3)",
                     '==PROF== Profiling "cudagym_probe_swish": 0%....50%....100% - 1 pass', "done 1.25",
                     "==PROF== Disconnected from process 4242",
                     *(",".join(f'"{cell}"' for cell in row) for row in (HEADER, *ROWS))]) + "\n"


def test_kernel_times_sums_each_kernels_duration_in_microseconds() -> None:
    times = probe.kernel_times(REPORT)
    assert times == {"cudagym_probe_swish": 21.44 + 20.96, "void at::native::vectorized_elementwise_kernel<4>": 50.0}


def test_a_report_without_the_details_page_names_nothing() -> None:
    assert probe.kernel_times("==PROF== Target process 1 terminated before first instrumented API call.\n") == {}


def test_without_ncu_it_says_so(capsys) -> None:
    assert probe.main(["--ncu", "/nonexistent/ncu"]) == 2
    assert "no ncu at /nonexistent/ncu" in capsys.readouterr().out


def test_the_first_complaint_is_ncus_or_the_loaders_first_warning_or_error() -> None:
    report = ("done 1.6\n==WARNING== No kernels were profiled.\n"
              "ERROR: ld.so: object 'libcuda-injection.so' from LD_PRELOAD cannot be preloaded\n")
    assert probe.first_complaint(report) == "==WARNING== No kernels were profiled."
    assert probe.first_complaint(REPORT) == ""


def test_the_confined_runs_differ_in_what_the_child_sees(tmp_path, monkeypatch) -> None:
    from cudagym.judge import confine

    monkeypatch.setenv("CUDAGYM_SANDBOX", "bwrap")
    tool = tmp_path / "opt" / "nsight-compute" / "2025.3.1"
    tool.mkdir(parents=True)
    work = tmp_path / "work"
    work.mkdir()
    ncu = tool / "ncu"
    ncu.write_text("#!/bin/sh\n")
    profile = [str(ncu), "--csv"]
    child = ["python3", "child.py", "own", "3"]
    ways = probe.confined_ways(confine, profile, child, work, str(ncu))
    assert list(ways) == ["ncu+sandbox", "ncu+sandbox+folder", "ncu+sandbox+folder+net", "sandbox(ncu)"]

    def binds(argv: list[str]) -> set[str]:
        return {argv[i + 1] for i, a in enumerate(argv) if a == "--ro-bind"}

    for name, argv in ways.items():
        outside = argv[:2] == profile  # the front end outside the sandbox, or inside it with the child
        assert outside is (name != "sandbox(ncu)"), argv
        assert argv[-len(child):] == child
        assert (str(tool) in binds(argv)) is (name != "ncu+sandbox"), name  # the injection libraries in view
        assert ("--unshare-net" in argv) is (name != "ncu+sandbox+folder+net"), name


# A stand-in for ncu's two halves, to run the probe's plumbing on the CPU: launched, it listens on the loopback
# as ncu's injection does, runs the child and hands its output to whoever attaches; attaching, it connects there
# and prints what it got, or fails as ncu does when nothing listens.
STAND_IN = '''#!{python}
import os, socket, subprocess, sys
sees = os.path.exists(os.environ["PROBE_MARKER"])  # a file outside the sandbox's view
if sys.argv[1] == "--mode=launch" and os.environ.get("PROBE_NO_LISTEN"):
    import time
    time.sleep(600)  # suspended, waiting for a front end that never reaches it
elif sys.argv[1] == "--mode=launch":
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 49152))
    server.listen(1)
    server.settimeout(60)
    done = subprocess.run(sys.argv[2:], capture_output=True, text=True)
    conn, _ = server.accept()
    conn.sendall(done.stdout.encode())
    conn.close()
    print("launched:", done.returncode, "sees the marker:", sees)
elif sys.argv[1] == "--mode=attach":
    try:
        conn = socket.create_connection(("127.0.0.1", 49152), timeout=2)
    except OSError as exc:
        print("==ERROR== could not connect:", exc)
        sys.exit(1)
    print("attached:", conn.recv(4096).decode().strip(), "|", " ".join(sys.argv[2:]), "| sees the marker:", sees)
'''


def test_the_attached_run_reaches_the_sandboxed_child_through_its_network_alone(tmp_path, monkeypatch) -> None:
    import shutil
    import sys

    import pytest

    from cudagym.judge import confine

    if shutil.which("nsenter") is None:
        pytest.skip("needs nsenter (util-linux)")
    monkeypatch.setenv("CUDAGYM_SANDBOX", "bwrap")
    monkeypatch.setattr(probe, "ATTACH_TRIES_S", 20.0)
    tool = tmp_path / "opt" / "ncu-stand-in"
    tool.mkdir(parents=True)
    ncu = tool / "ncu"
    ncu.write_text(STAND_IN.format(python=sys.executable))
    ncu.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    marker = tmp_path / "marker"
    marker.write_text("outside")
    monkeypatch.setenv("PROBE_MARKER", str(marker))
    child = [sys.executable, "-c", "print('cudagym_probe_swish ran')"]
    status, report, wall = probe.attached_run(confine, str(ncu), child, work, ["--csv"])
    # the front end got the child's words over the sandbox's own loopback, from outside the sandbox's files (it
    # sees the marker), while the launched half ran inside them (it does not)
    assert status == 0, report
    assert "attached: cudagym_probe_swish ran | --hostname 127.0.0.1 --csv | sees the marker: True" in report, report
    assert "launched: 0 sees the marker: False" in report and wall > 0, report
    # a child no front end reaches is not waited for: the tries end, and it is killed
    monkeypatch.setenv("PROBE_NO_LISTEN", "1")
    monkeypatch.setattr(probe, "ATTACH_TRIES_S", 2.0)
    status, report, wall = probe.attached_run(confine, str(ncu), child, work, ["--csv"])
    assert status == 1 and "==ERROR== could not connect" in report and wall < 60, (status, wall, report)


def test_the_attached_run_says_why_it_did_not_run_without_the_sandbox(tmp_path, monkeypatch) -> None:
    from cudagym.judge import confine

    monkeypatch.setenv("CUDAGYM_SANDBOX", "off")
    status, report, wall = probe.attached_run(confine, "/opt/ncu/ncu", ["python3", "child.py"], tmp_path, [])
    assert (status, wall) == (-1, 0.0) and report.startswith("not run: needs bubblewrap"), report


def test_each_lift_takes_one_isolation_off_and_bubblewrap_still_runs_it(monkeypatch) -> None:
    import subprocess

    from cudagym.judge import confine

    monkeypatch.setenv("CUDAGYM_SANDBOX", "bwrap")
    marker, shm = Path(f"/tmp/cudagym-lift-probe-{os.getpid()}"), Path(f"/dev/shm/cudagym-lift-probe-{os.getpid()}")
    shown = (f"echo pid=$$; id -u; ls {marker} 2>/dev/null || echo no-marker; ls {shm} 2>/dev/null || echo no-shm; "
             "readlink /proc/self/ns/ipc")
    host_ipc = os.readlink("/proc/self/ns/ipc")
    profile = ["/usr/bin/env"]  # a front end that only runs its command
    view = dataclasses.replace(confine.view_for(gpu=False), network=True)
    base = [*profile, *confine.wrap(["/bin/sh", "-c", shown], view)]
    marker.write_text("the host's /tmp")
    shm.write_text("the host's /dev/shm")
    try:
        runs = {}
        for lift in (None, *probe.LIFTS):
            argv = base if lift is None else probe.lifted(base, lift)
            assert argv[:len(profile)] == profile and argv[-3:] == base[-3:]  # the front end and child as they were
            done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, (lift, done.stderr)
            runs[lift] = done.stdout.split()
    finally:
        marker.unlink()
        shm.unlink()
    sandboxed = runs[None]
    assert sandboxed[0] in ("pid=1", "pid=2") and sandboxed[1] != "0" and sandboxed[2:4] == ["no-marker", "no-shm"]
    assert sandboxed[4] != host_ipc
    assert runs["pid"][0] not in ("pid=1", "pid=2") and runs["pid"][1:4] == sandboxed[1:4]  # the host's pid
    assert runs["user"][1] == str(os.getuid()) and runs["user"][2:4] == sandboxed[2:4]  # the host's user
    assert runs["ipc"][4] == host_ipc and runs["ipc"][1:4] == sandboxed[1:4]
    assert all(runs[lift][4] != host_ipc for lift in ("pid", "user", "tmp", "shm"))  # each lifts one alone
    assert runs["tmp"][2] == str(marker) and runs["tmp"][3] == "no-shm"
    assert runs["shm"][2] == "no-marker" and runs["shm"][3] == str(shm)
    assert runs["all"][0] not in ("pid=1", "pid=2") and runs["all"][1:] == [str(os.getuid()), str(marker), str(shm),
                                                                                host_ipc]
    assert "--unshare-ipc" in base and "--unshare-ipc" not in probe.lifted(base, "ipc")
    with pytest.raises(ValueError, match="unknown lift"):
        probe.lifted(base, "net")


def test_the_view_holds_the_install_cudas_ncu_launcher_runs(tmp_path, monkeypatch) -> None:
    """CUDA's ``bin/ncu`` is a launcher: the injection libraries lie in an Nsight Compute install beside the toolkit
    or under ``/opt/nvidia``, and the sandboxed child must see that install, not only ``bin/``."""
    from cudagym.judge import confine

    monkeypatch.setenv("CUDAGYM_SANDBOX", "bwrap")
    toolkit, opt = tmp_path / "cuda-13.0", tmp_path / "opt" / "nvidia"
    (toolkit / "bin").mkdir(parents=True)
    (toolkit / "nsight-compute-2025.3.1" / "target").mkdir(parents=True)
    (opt / "nsight-compute" / "2025.3.1" / "target").mkdir(parents=True)
    (toolkit / "nsight-compute-readme.txt").write_text("not a folder")
    launcher = toolkit / "bin" / "ncu"
    launcher.write_text("#!/bin/sh\n")
    folders = probe.ncu_folders(str(launcher), roots=(str(opt),))
    assert folders == (str(toolkit / "bin"), str(toolkit / "nsight-compute-2025.3.1"), str(opt / "nsight-compute"))
    work = tmp_path / "work"
    work.mkdir()
    from cudagym.judge import attribution

    monkeypatch.setattr(attribution, "INSTALL_ROOTS", (str(opt),))
    view = probe.ncu_view(confine, work, str(launcher))
    argv = confine.wrap(["true"], view)
    bound = {argv[i + 1] for i, a in enumerate(argv) if a == "--ro-bind"}
    assert set(folders) <= bound, argv


def test_a_run_past_its_limit_is_a_row_not_a_lost_step(tmp_path) -> None:
    import sys

    status, text, wall = probe.run([sys.executable, "-c", "import time; print('begun', flush=True); time.sleep(30)"],
                                   tmp_path, timeout_s=2.0)
    assert status == -1 and "killed: still running after 2 s" in text and wall < 20
    assert probe.first_complaint(text).startswith("==ERROR== killed")
