"""The compute-sanitizer gates' pure parts: the protocol field, the command, the report, the verdicts.

The reports are written in compute-sanitizer's own formats (CUDA 11.x-13.x): ``=========``-prefixed lines,
one unindented headline per error, indented details, a bare prefix between errors, a summary at the end.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cudagym.errors import ConfigError
from cudagym.judge.protocol import PROTOCOLS, SANITIZER_TOOLS, Protocol, get_protocol
from cudagym.judge.records import EvalResult, EvalStatus, Violation
from cudagym.judge.sanitizer import (
    BINARY_ENV,
    ERROR_EXIT,
    LOADING_MARKER,
    GateRun,
    GateVerdict,
    Report,
    apply_verdicts,
    find_compute_sanitizer,
    judge_run,
    parse_report,
    require_compute_sanitizer,
    rule_name,
    sanitizer_argv,
)

# memcheck, CUDA 12+/13: "at <kernel>+<offset>" then "in <file>:<line>", "Access to" (older: "Address"), commas
MEMCHECK = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 4 bytes
=========     at swish_kernel(const float *, float *, long long)+0x1f0
=========         in /home/judge/jobs/job-1/work/kernels/swish.cu:27
=========     by thread (255,0,0) in block (1055,0,0)
=========     Access to 0x7f3a5c000fa0 is out of bounds
=========     and is 81 bytes after the nearest allocation at 0x7f3a5c000000 of size 4,000 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2ea231] in /usr/lib/x86_64-linux-gnu/libcuda.so.1
=========         Host Frame:launch_swish [0x13cb4] in /tmp/build/cuda_extension.so
=========
========= Invalid __global__ read of size 4 bytes
=========     at swish_kernel(const float *, float *, long long)+0x1f0
=========         in /home/judge/jobs/job-1/work/kernels/swish.cu:27
=========     by thread (254,0,0) in block (1055,0,0)
=========     Access to 0x7f3a5c000f9c is out of bounds
=========     and is 77 bytes after the nearest allocation at 0x7f3a5c000000 of size 4,000 bytes
=========
========= ERROR SUMMARY: 1,024 errors
"""

# memcheck, CUDA 11.x: "at <offset> in <file>:<line>:<kernel>" on one line, "Address"
MEMCHECK_OLD = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at 0x00000170 in /src/kernels/scale.cu:12:scale_kernel(float*, int)
=========     by thread (9,0,0) in block (0,0,0)
=========     Address 0x7fcd07a0312c is out of bounds
=========
========= ERROR SUMMARY: 1 error
"""

INITCHECK = """\
========= COMPUTE-SANITIZER
========= Uninitialized __global__ memory read of size 4 bytes
=========     at swish_kernel(const float *, float *, const int *, long long)+0x2b0 in swish.cu:31
=========     by thread (0,0,0) in block (0,0,0)
=========     Address 0x7f2e1c200000
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2ea231]
=========                in /usr/lib/x86_64-linux-gnu/libcuda.so.1
=========
========= ERROR SUMMARY: 8 errors
"""

RACECHECK = """\
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at reduce_kernel(const float *, float *)+0x90 in reduce.cu:14
=========     and Read access at reduce_kernel(const float *, float *)+0xc0 in reduce.cu:17 [1024 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""

CLEAN = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"

NOT_STARTED = """\
========= COMPUTE-SANITIZER
========= Error: Target application terminated before first instrumented API call
========= Tracking kernels launched by child processes requires the --target-processes all option.
"""


# ------------------------------------------------------------------------------------------ the protocol field


def test_no_preset_runs_a_sanitizer() -> None:
    assert all(p.sanitizer == () for p in PROTOCOLS.values())


def test_the_field_changes_no_timing_key_so_cached_baselines_still_apply() -> None:
    for protocol in PROTOCOLS.values():
        gated = protocol.with_changes(sanitizer=("memcheck", "initcheck"))
        assert gated.timing_key == protocol.timing_key
        assert gated.id == protocol.id and gated != protocol


def test_every_tool_is_accepted_and_a_list_becomes_a_tuple() -> None:
    protocol = get_protocol("cudagym").with_changes(id="gated", sanitizer=list(SANITIZER_TOOLS))
    assert protocol.sanitizer == SANITIZER_TOOLS
    hash(protocol)


@pytest.mark.parametrize("bad", [("memchek",), ("memcheck", "memcheck"), "memcheck"])
def test_an_unknown_repeated_or_bare_string_tool_is_a_clear_error(bad: object) -> None:
    with pytest.raises(ConfigError, match="sanitizer"):
        get_protocol("cudagym").with_changes(id="gated", sanitizer=bad)


# ------------------------------------------------------------------------------------------ the command


def test_the_command_puts_the_tool_its_exit_status_and_its_report_file_before_the_program() -> None:
    argv = sanitizer_argv("/cuda/bin/compute-sanitizer", "initcheck", "/run/report.txt", ["python", "-m", "x"])
    assert argv[0] == "/cuda/bin/compute-sanitizer" and argv[-3:] == ["python", "-m", "x"]
    options = dict(zip(argv[1:-3:2], argv[2:-3:2], strict=True))
    assert options["--tool"] == "initcheck"
    assert options["--error-exitcode"] == str(ERROR_EXIT)
    assert options["--log-file"] == "/run/report.txt"
    assert options["--report-api-errors"] == "no"  # torch's probing calls fail by design
    assert options["--check-exit-code"] == "no"  # the candidate's own failure stays its exit status
    assert options["--target-processes"] == "all"


def test_the_command_refuses_an_unknown_tool() -> None:
    with pytest.raises(ConfigError, match="leakcheck"):
        sanitizer_argv("cs", "leakcheck", "log", ["python"])


# ------------------------------------------------------------------------------------------ finding the tool


def test_a_variable_naming_no_executable_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(BINARY_ENV, str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match=BINARY_ENV):
        find_compute_sanitizer()


def test_the_variable_wins_and_a_toolkit_bin_is_found(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    tool = tmp_path / "cuda" / "bin" / "compute-sanitizer"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.delenv(BINARY_ENV, raising=False)
    assert find_compute_sanitizer(homes=[str(tmp_path / "cuda")]) == str(tool)
    monkeypatch.setenv(BINARY_ENV, str(tool))
    assert find_compute_sanitizer(homes=[]) == str(tool)


def test_a_protocol_with_gates_on_a_host_without_the_tool_says_what_it_needs(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(BINARY_ENV, str(tmp_path / "nowhere" / "compute-sanitizer"))
    protocol = get_protocol("cudagym").with_changes(id="gated", sanitizer=("memcheck",))
    with pytest.raises(ConfigError) as caught:
        require_compute_sanitizer(protocol)
    text = str(caught.value)
    assert "gated gates SUBMIT on compute-sanitizer (memcheck)" in text and "sanitizer field is empty" in text
    assert "Traceback" not in text and "infra" not in text
    assert require_compute_sanitizer(get_protocol("cudagym")) == ""  # no gates, no tool needed


def test_no_tool_on_path_or_in_any_toolkit_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(BINARY_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConfigError, match="no compute-sanitizer found .* on PATH"):
        find_compute_sanitizer(homes=[str(tmp_path / "cuda")])


# ------------------------------------------------------------------------------------------ reading reports


def test_a_memcheck_report_gives_its_count_and_findings_without_host_paths_or_frames() -> None:
    report = parse_report(MEMCHECK)
    assert report.errors == 1024 and len(report.findings) == 2 and report.summarized
    first = report.findings[0]
    assert first.headline == "Invalid __global__ read of size 4 bytes"
    assert first.details == ("at swish_kernel(const float *, float *, long long)+0x1f0", "in swish.cu:27",
                             "by thread (255,0,0) in block (1055,0,0)",
                             "Access to 0x7f3a5c000fa0 is out of bounds",
                             "and is 81 bytes after the nearest allocation at 0x7f3a5c000000 of size 4,000 bytes")
    assert "/home/judge" not in first.describe() and "Host Frame" not in first.describe()


def test_the_older_one_line_location_format_is_read_too() -> None:
    report = parse_report(MEMCHECK_OLD)
    assert report.errors == 1
    assert report.findings[0].details[0] == "at 0x00000170 in scale.cu:12:scale_kernel(float*, int)"


def test_an_initcheck_report_drops_the_backtrace_and_its_library_lines() -> None:
    report = parse_report(INITCHECK)
    assert report.errors == 8
    assert report.findings[0].headline == "Uninitialized __global__ memory read of size 4 bytes"
    assert report.findings[0].details == ("at swish_kernel(const float *, float *, const int *, long long)+0x2b0 in "
                                          "swish.cu:31", "by thread (0,0,0) in block (0,0,0)",
                                          "Address 0x7f2e1c200000")


def test_a_racecheck_summary_counts_its_errors_not_its_warnings() -> None:
    report = parse_report(RACECHECK)
    assert report.errors == 1
    assert parse_report(RACECHECK.replace("(1 error, 0 warnings)", "(0 errors, 3 warnings)")).errors == 0
    assert report.findings[0].headline.startswith("Error: Race reported between Write access")  # a hazard, not
    assert report.findings[0].details[0].endswith("[1024 hazards]") and not report.tool_errors  # a tool failure


def test_a_clean_report_and_a_report_that_never_started() -> None:
    clean = parse_report(CLEAN)
    assert clean.errors == 0 and not clean.findings and clean.summarized
    broken = parse_report(NOT_STARTED)
    assert not broken.summarized and "terminated before first instrumented API call" in broken.tool_errors[0]


def test_lines_without_the_prefix_are_the_programs_and_are_ignored() -> None:
    text = "Invalid __global__ read of size 4 bytes\nERROR SUMMARY: 0 errors\n" + MEMCHECK_OLD
    assert parse_report(text).errors == 1 and len(parse_report(text).findings) == 1


# ------------------------------------------------------------------------------------------ verdicts


def _run(returncode: int, report: str = "", *, loaded: bool = True, done: bool | None = None,
         **kw: object) -> GateRun:
    output = f"{LOADING_MARKER}\n" if loaded else ""
    done = loaded and returncode == 0 if done is None else done
    return GateRun("memcheck", returncode, parse_report(report), output + str(kw.pop("output", "")), loaded, done,
                   wall_s=3.0, **kw)  # type: ignore[arg-type]


def test_errors_reported_by_the_tool_are_a_violation_quoting_the_first_findings() -> None:
    verdict = judge_run(_run(ERROR_EXIT, MEMCHECK), 300)
    assert verdict.verdict == "errors"
    assert verdict.message.startswith("compute-sanitizer memcheck found 1024 errors in the candidate's checked calls")
    assert "Access to 0x7f3a5c000fa0 is out of bounds" in verdict.message and "/home" not in verdict.message


def test_the_exit_status_decides_even_when_the_report_was_erased() -> None:
    verdict = judge_run(_run(ERROR_EXIT, ""), 300)
    assert verdict.verdict == "errors" and "report was lost" in verdict.message


def test_a_clean_verdict_needs_status_zero_and_the_tools_own_summary() -> None:
    assert judge_run(_run(0, CLEAN), 300).verdict == "clean"
    erased = judge_run(_run(0, ""), 300)  # status 0 but no summary: not a pass
    assert erased.verdict == "candidate_failed" and "no error summary" in erased.message
    early = judge_run(_run(0, CLEAN, done=False), 300)  # os._exit(0) before the checked calls were done
    assert early.verdict == "candidate_failed" and "exited before its checked calls were done" in early.message


def test_a_candidate_that_fails_exits_or_kills_the_tool_under_it_is_rejected() -> None:
    raised = judge_run(_run(1, CLEAN, output="Traceback ...\n  File \"/judge/x.py\"\nRuntimeError: no"), 300)
    assert raised.verdict == "candidate_failed" and "exit status 1" in raised.message
    assert "RuntimeError: no" in raised.message and "/judge" not in raised.message
    killed = judge_run(_run(-9, ""), 300)
    assert killed.verdict == "candidate_failed" and "killed by signal 9" in killed.message
    slow = judge_run(_run(-9, "", timed_out=True), 120)
    assert slow.verdict == "candidate_failed" and "did not finish within 120 s" in slow.message


def test_a_failure_before_the_candidate_loaded_is_the_judges() -> None:
    verdict = judge_run(_run(1, NOT_STARTED, loaded=False), 300)
    assert verdict.verdict == "infra" and "terminated before first instrumented API call" in verdict.message


def test_findings_count_even_before_the_marker() -> None:
    assert judge_run(_run(ERROR_EXIT, MEMCHECK, loaded=False), 300).verdict == "errors"


def _passed() -> EvalResult:
    return EvalResult(EvalStatus.OK, "correct; 2.1x eager", speedup_vs_eager=2.1, wall_time_s=1.0,
                      violations=(), notes=("timing: ...",))


def test_a_failed_gate_makes_a_rule_violation_named_for_its_tool() -> None:
    verdicts = [GateVerdict("memcheck", "errors", "compute-sanitizer memcheck found 2 errors ...:\n  Invalid ..."),
                GateVerdict("initcheck", "clean", "compute-sanitizer initcheck: no errors (4.0 s)")]
    result = apply_verdicts(_passed(), verdicts, 5.0)
    assert result.status is EvalStatus.RULE_VIOLATION
    assert result.violations == (Violation(rule_name("memcheck"), verdicts[0].message),)
    assert result.message.startswith("sanitizer_memcheck: compute-sanitizer memcheck found 2 errors")
    assert "compute-sanitizer initcheck: no errors (4.0 s)" in result.notes and result.wall_time_s == 6.0


def test_clean_gates_leave_the_verdict_and_add_notes() -> None:
    result = apply_verdicts(_passed(), [GateVerdict("memcheck", "clean", "compute-sanitizer memcheck: no errors")], 2)
    assert result.status is EvalStatus.OK and result.message == "correct; 2.1x eager"
    assert result.notes[-1] == "compute-sanitizer memcheck: no errors"


def test_a_gate_that_could_not_run_is_an_infra_error_unless_another_found_errors() -> None:
    broken = GateVerdict("initcheck", "infra", "compute-sanitizer initcheck could not run ...")
    assert apply_verdicts(_passed(), [broken], 1).status is EvalStatus.INFRA_ERROR
    failed = GateVerdict("memcheck", "candidate_failed", "the candidate's checked calls failed ...")
    assert apply_verdicts(_passed(), [broken, failed], 1).status is EvalStatus.RULE_VIOLATION


def test_a_run_whose_report_file_could_not_be_read_is_unsummarized() -> None:
    assert not Report().summarized
    assert judge_run(GateRun("initcheck", 0, Report(), LOADING_MARKER, True, True), 300).verdict == "candidate_failed"


# ------------------------------------------------------------------------------------------ the confinement


def test_a_sanitized_view_has_a_writable_dev_shm_of_its_own_and_others_keep_theirs_read_only(tmp_path: Path) -> None:
    import subprocess

    from cudagym.judge import confine

    if confine.mode() == "off":
        pytest.skip("CUDAGYM_SANDBOX=off: no view to check")
    script = "echo x > /dev/shm/probe && cat /dev/shm/probe || echo refused"
    runs = {shm: subprocess.run(confine.wrap(["sh", "-c", script], confine.view_for(writes=[str(tmp_path)], shm=shm)),
                                capture_output=True, text=True, timeout=60) for shm in (False, True)}
    assert runs[True].stdout.strip() == "x", runs[True].stderr
    assert runs[False].stdout.strip().endswith("refused")
    assert not list(Path("/dev/shm").glob("probe"))  # the sandbox's own: nothing reached the host's


def test_a_tool_that_could_not_start_shows_its_report_in_the_message() -> None:
    run = GateRun("memcheck", 1, parse_report(NOT_STARTED), "", False, False, report_text=NOT_STARTED)
    verdict = judge_run(run, 300)
    assert verdict.verdict == "infra" and "its report:" in verdict.message
    assert "requires the --target-processes all option" in verdict.message


def test_the_report_is_read_only_from_a_regular_file_never_through_a_link_or_a_fifo(tmp_path: Path) -> None:
    from cudagym.judge.sanitizer import read_report_file

    secret = tmp_path / "judge-secret.txt"
    secret.write_text("the judge's own file")
    run = tmp_path / "run"
    (run / "report").mkdir(parents=True)
    report = run / "report" / "report.txt"
    report.write_bytes(b"\0" * 64 + CLEAN.encode())  # truncated under the tool: a hole, then its summary
    assert parse_report(read_report_file(report)).errors == 0
    report.unlink()
    report.symlink_to(secret)
    assert read_report_file(report) == ""
    report.unlink()
    os.mkfifo(report)
    assert read_report_file(report) == ""  # and did not block
    report.unlink()
    (run / "report").rmdir()
    (run / "report").symlink_to(tmp_path)  # the folder swapped for a link to one holding report.txt
    (tmp_path / "report.txt").write_text(CLEAN)
    assert read_report_file(report) == ""
    assert read_report_file(run / "missing" / "report.txt") == ""


# ------------------------------------------------------------------------------------------ the prompt


def test_the_prompt_states_the_gates_only_where_the_protocol_has_them() -> None:
    from cudagym.judge.records import Hardware
    from cudagym.prompt import EpisodeLimits, build_prompt
    from cudagym.reward import RewardConfig
    from cudagym.solution import get_format
    from cudagym.sources.bundled import BundledSource

    task = BundledSource().get("bundled/L1/01_Swish")
    limits = EpisodeLimits(max_turns=20, token_budget=8192, token_counter="tiktoken:o200k_base")

    def prompt(protocol: Protocol) -> str:
        return build_prompt(task, fmt=get_format("extension"), protocol=protocol, hardware=Hardware(gpu="NVIDIA H200"),
                            reward=RewardConfig(), limits=limits)

    plain = prompt(get_protocol("cudagym"))
    gated = prompt(get_protocol("cudagym").with_changes(id="gated", sanitizer=("memcheck", "initcheck")))
    assert "compute-sanitizer" not in plain
    assert "submit also runs the correctness inputs under compute-sanitizer (memcheck, initcheck)" in gated
