"""Observation text: truncation, compiler diagnostics, per-input checks, violations, timing and kernels."""

from __future__ import annotations

import dataclasses

from fakes import failed_build, incorrect_result, ok_build, timed_result

from cudagym.judge.records import (
    BuildResult,
    BuildStatus,
    Diagnostic,
    EvalResult,
    EvalStatus,
    KernelResources,
    Severity,
    TimingStats,
    Violation,
)
from cudagym.observation import (
    TRUNCATION_MARKER,
    render_build,
    render_eval,
    render_file,
    render_listing,
    render_score,
    truncate,
)
from cudagym.reward import Score
from cudagym.workspace import FileEntry


def test_truncate_keeps_head_and_tail_with_a_visible_marker() -> None:
    assert truncate("short", 100) == "short"
    text = "".join(f"{i:05d}\n" for i in range(10_000))
    cut = truncate(text, 1000)
    assert len(cut) <= 1000
    assert cut.startswith("00000\n") and cut.endswith("09999\n")
    marker = next(line for line in cut.splitlines() if "truncated" in line)
    dropped = int(marker.split()[1])
    assert marker == TRUNCATION_MARKER.format(n=dropped)
    assert len(cut) - len(marker) - 2 + dropped == len(text)
    assert truncate(text, 10) == text[:10]


def test_build_report_has_located_diagnostics_and_ptxas_resources() -> None:
    build = BuildResult(
        BuildStatus.COMPILE_ERROR, "extension", message="nvcc exited with status 2", wall_time_s=3.25,
        diagnostics=(
            Diagnostic(Severity.ERROR, "expected a \";\"", "kernels/gemm.cu", 41, 17, "nvcc"),
            Diagnostic(Severity.WARNING, "unused variable", "kernels/gemm_binding.cpp", 8, 0, "c++"),
            Diagnostic(Severity.ERROR, "ptxas fatal", "", 0, 0, "ptxas"),
        ),
        kernels=(KernelResources("gemm_tiled", 128, 49152, 384, 16, 8, 12),),
    )
    text = render_build(build)
    assert text.splitlines()[0] == "Build FAILED: compile errors (extension format, 3.2 s)"
    assert "nvcc exited with status 2" in text
    errors = "Errors (2):\n  kernels/gemm.cu:41:17: error: expected a \";\" [nvcc]\n  ?: error: ptxas fatal [ptxas]"
    assert errors in text
    assert "Warnings (1):\n  kernels/gemm_binding.cpp:8: warning: unused variable [c++]" in text
    row = next(line for line in text.splitlines() if "gemm_tiled" in line)
    assert row.split() == ["gemm_tiled", "128", "49152", "384", "16", "8/12"]


def test_build_report_shows_the_log_when_nothing_was_parsed() -> None:
    build = BuildResult(BuildStatus.TIMEOUT, "raw", log="x" * 10_000)
    text = render_build(build)
    assert "FAILED: the build ran past its time limit" in text
    assert "Compiler output:" in text and "characters truncated" in text
    many = BuildResult(BuildStatus.COMPILE_ERROR, "extension", diagnostics=tuple(
        Diagnostic(Severity.ERROR, f"e{i}", "kernels/a.cu", i) for i in range(40)))
    assert "... 10 more" in render_build(many)
    assert "(extension format, 0.0 s, cached)" in render_build(BuildResult(BuildStatus.OK, "extension", cached=True))


def test_failed_check_table() -> None:
    text = render_eval(incorrect_result(), "verify")
    lines = text.splitlines()
    assert lines[0] == "Verify: FAIL: an output does not match the reference"
    assert "Correctness: 1/2 inputs pass" in text
    fail = next(line for line in lines if " FAIL " in line)
    assert fail.split()[:6] == ["1", "43", "FAIL", "5.000e-01", "1.000e+00", "12/4096"]
    assert fail.rstrip().endswith("(0, 17)")
    assert "12 of 4096 elements differ" in text
    assert "Build OK (1.5 s, 1 kernel(s); 1 warning(s), see compile())" in text


def test_rule_violations_name_their_guard() -> None:
    result = EvalResult(
        status=EvalStatus.RULE_VIOLATION, build=ok_build(),
        violations=(Violation("torch_fallback", "ModelNew.forward called torch.relu"),
                    Violation("timer_patch", "torch.cuda.synchronize was replaced")),
    )
    text = render_eval(result, "submit")
    assert text.startswith("Submit: FAIL: a rule was broken")
    assert "Rule violations:\n  [torch_fallback] ModelNew.forward called torch.relu\n  [timer_patch]" in text


def test_profile_table_and_kernel_breakdown() -> None:
    text = render_eval(timed_result(50.0, 100.0, 80.0), "profile")
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.startswith("  ")}
    assert rows["candidate"][1:3] == ["50.00", "50.00"]
    assert rows["eager"][1] == "100.00" and rows["eager"][-1] == "2.00x"
    assert rows["torch.compile"][1] == "80.00" and rows["torch.compile"][-1] == "1.60x"
    assert "Kernel breakdown (candidate, per forward pass):" in text
    assert rows["relu_kernel"][1:] == ["50.00", "1", "100.0%"]
    assert text.splitlines()[-1] == "(protocol cudagym-v6, GPU NVIDIA H200)"


def test_the_table_shows_the_reference_timed_in_the_candidates_process_when_it_scaled_the_speedups() -> None:
    result = dataclasses.replace(timed_result(50.0, 100.0, 80.0), speedup_vs_eager=1.2, speedup_vs_compile=0.96,
                                 runner_reference=TimingStats(60.0, 61.0, 59.0, 70.0, 1.0, 0.4, 30))
    text = render_eval(result, "profile")
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.startswith("  ")}
    assert rows["reference*"][1:5] == ["60.00", "61.00", "59.00", "30"]
    assert rows["eager"][-1] == "1.20x" and rows["torch.compile"][-1] == "0.96x"
    assert "the baselines scaled by reference* / eager: *the reference timed in your forward's own process" in text
    assert "reference*" not in render_eval(timed_result(50.0, 100.0, 80.0), "profile")


def test_no_gpu_and_build_failure_verdicts() -> None:
    text = render_eval(EvalResult(status=EvalStatus.NO_GPU, build=ok_build()), "profile")
    assert text.startswith("Profile: NOT RUN: no GPU is available on this judge")
    assert "compile() works without one" in text and "Build OK (extension format" in text
    text = render_eval(EvalResult(status=EvalStatus.BUILD_FAILED, build=failed_build()), "verify")
    assert "kernels/relu.cu:12:5: error" in text


def test_the_no_gpu_verdict_says_whether_the_build_failed() -> None:
    from cudagym.judge.records import no_gpu_verdict

    assert no_gpu_verdict(ok_build(), protocol_id="p").message.startswith("built, but not checked or timed")
    failed = no_gpu_verdict(failed_build(), protocol_id="p").message
    assert failed.startswith("the build failed (compile_error), but not checked or timed: this judge has no GPU")


def test_crash_log_is_shown_and_capped() -> None:
    result = EvalResult(status=EvalStatus.CRASHED, build=ok_build(), message="worker died: SIGSEGV",
                        log="trace\n" * 5000)
    text = render_eval(result, "verify")
    assert "worker died: SIGSEGV" in text and "Output of the solution:" in text
    assert "characters truncated" in text and len(text) < 5000


def test_score_lines() -> None:
    assert render_score(Score(3.0, 3, True, 2.0, 1.5), scoring="final") == (
        "Episode over. Reward 3 (tier 3, final state, 2.00x vs eager, 1.50x vs torch.compile).")
    assert render_score(Score(-1.0, -1, True), scoring="best") == "Episode over. Reward -1 (tier -1, best state)."
    assert "not evaluated (no_gpu)" in render_score(Score(0.0, 0, False, status="no_gpu"), scoring="final")


def test_file_and_listing_rendering() -> None:
    assert render_file("a.py", "", 1, 10) == "a.py: (empty file)"
    text = "\n".join(f"l{i}" for i in range(1, 13))
    assert render_file("a.py", text, 9, 3).splitlines() == [
        "a.py (lines 9-11 of 12)", " 9\tl9", "10\tl10", "11\tl11", "[1 more lines: read_file with offset=12]"]
    entries = [FileEntry("kernels", 0, True, False), FileEntry("kernels/a.cu", 3, False, True),
               FileEntry("model.py", 9, False, False)]
    assert render_listing(entries) == "kernels/\nkernels/a.cu  3 B\nmodel.py  9 B  (read-only)"
    assert render_listing([], "kernels") == "kernels: (empty)"


def test_untimed_torch_compile_says_so_with_its_reason() -> None:
    failed = dataclasses.replace(
        timed_result(50.0, 100.0, 80.0), compiled=TimingStats(), speedup_vs_compile=0.0,
        message="correct; candidate 50.0 us (median of 20), 2.000x vs eager; torch.compile baseline failed: "
                "BackendCompilerFailed: backend='inductor' raised: FileNotFoundError: [Errno 2] No such file")
    text = render_eval(failed, "profile")
    assert "0.00x" not in text
    assert ("correct; candidate 50.0 us (median of 20), 2.000x vs eager; torch.compile: not timed (the baseline "
            "failed: BackendCompilerFailed: backend='inductor' raised: FileNotFoundError: [Errno 2] No such file)"
            ) in text.splitlines()
    row = next(line for line in text.splitlines() if line.startswith("  torch.compile"))
    assert row.split()[1:3] == ["not", "timed"] and "(the baseline failed: BackendCompilerFailed:" in row
    quiet = dataclasses.replace(failed, message="correct; candidate 50.0 us (median of 20), 2.000x vs eager")
    row = next(line for line in render_eval(quiet, "profile").splitlines() if line.startswith("  torch.compile"))
    assert row.endswith("not timed (no time was recorded; see the log)")
    assert render_score(Score(2.0, 2, True, 2.0, 0.0), scoring="final") == (
        "Episode over. Reward 2 (tier 2, final state, 2.00x vs eager, torch.compile: not timed).")
