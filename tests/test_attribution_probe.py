"""benchmarks/attribution_probe.py on the CPU: reading an ``ncu --csv`` report, and a clear stop without ncu."""

from __future__ import annotations

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
