"""The attribution gate's pure parts: reading ``ncu --csv``, the markers, the verdicts, the protocol setting."""

from __future__ import annotations

import pytest

from cudagym.errors import ConfigError
from cudagym.judge import attribution
from cudagym.judge.attribution import AttributedRun, Launch, forwards_of, judge_forwards, read_report
from cudagym.judge.protocol import get_protocol

HEADER = '"ID","Process ID","Kernel Name","Metric Name","Metric Unit","Metric Value"'


def csv_report(rows: list[tuple[int, str, str, str, str]]) -> str:
    lines = ["==PROF== Connected to process 7 (/usr/bin/python3)", "cudagym prints", HEADER]
    lines += [",".join(f'"{c}"' for c in (str(i), "7", name, metric, unit, value)) for i, name, metric, unit, value
              in rows]
    return "\n".join(lines) + "\n"


def test_the_report_is_read_in_launch_order_in_microseconds_other_metrics_left_out() -> None:
    text = csv_report([(2, "b", "gpu__time_duration.sum", "usecond", "2.5"),
                       (0, "a", "gpu__time_duration.sum", "nsecond", "1,500"),
                       (1, "a", "sm__cycles_elapsed.avg", "cycle", "99"),
                       (1, "m", "gpu__time_duration.sum", "msecond", "0.01")])
    assert read_report(text) == [Launch(0, "a", 1.5, 7), Launch(1, "m", 10.0, 7), Launch(2, "b", 2.5, 7)]
    assert read_report("==PROF== Target process terminated before first instrumented API call.\n") == []


def launches(*names: str) -> list[Launch]:
    return [Launch(i, n, 1.0) for i, n in enumerate(names)]


M = attribution.MARK_KERNEL


def test_each_forward_is_what_lies_between_its_two_markers() -> None:
    per, problem = forwards_of(launches("setup", M, "k1", M, "inputs", M, "k2", "k3", M, M, M), 3)
    assert problem == "" and [[k.name for k in f] for f in per] == [["k1"], ["k2", "k3"], []]
    marked = f"{M}(long long)"  # the report's name with its parameter list
    per, problem = forwards_of(launches(marked, "k", marked), 1)
    assert problem == "" and [k.name for k in per[0]] == ["k"]


def test_markers_beyond_the_judges_or_short_of_them_are_named() -> None:
    assert "ran 4 times where the judge launched it 2 times" in forwards_of(launches(M, M, M, M), 1)[1]
    assert "holds 1 of the 2 marker launches" in forwards_of(launches(M, "k"), 1)[1]
    assert forwards_of(launches(f"{M}_mine", "k"), 0)[1] == ""  # another name is no marker


def test_the_warm_up_forward_is_not_judged_and_the_rest_are() -> None:
    torch_kernel = "void at::native::vectorized_elementwise_kernel<4, sigmoid>"
    fallback = [[Launch(0, torch_kernel, 5.0)]]
    own = [[Launch(0, "swish_kernel", 5.0)]]
    assert judge_forwards(fallback + own + own, ["swish_kernel"], False, 5.0)[1] == ""
    note, problem = judge_forwards(own + own + fallback, ["swish_kernel"], False, 5.0)
    assert problem.startswith("in forward 3 profiled from outside the runner, none of the 1 compiled kernel(s) ran")
    assert "saw 2 judged forward(s)" in note


def test_library_kernels_count_only_where_the_sources_call_the_library() -> None:
    gemm = [[Launch(0, "sm90_xmma_gemm_f32f32_f32f32_f32_tn_n", 50.0)]]
    assert judge_forwards(gemm * 2, [], True, 50.0)[1] == ""
    assert "count as torch's" in judge_forwards(gemm * 2, [], False, 50.0)[1]


def test_the_profiled_forward_is_held_to_the_timed_median() -> None:
    own = [[Launch(0, "k", 100.0), Launch(1, "k", 60.0)]]
    assert judge_forwards(own * 2, ["k"], False, 107.0)[1] == ""  # 160 <= 1.5 x 107 + 10
    assert "the timed calls ran other work" in judge_forwards(own * 2, ["k"], False, 99.0)[1]


def run(**changes: object) -> AttributedRun:
    fields: dict[str, object] = {"report": "", "front_status": 0, "loaded": True, "done": True, "timed_out": False,
                                 "output": "", "wall_s": 1.0}
    fields.update(changes)
    return AttributedRun(**fields)  # type: ignore[arg-type]


def test_who_a_failure_belongs_to() -> None:
    from cudagym.judge.records import EvalResult, EvalStatus

    job, result = None, EvalResult(status=EvalStatus.OK)
    good = csv_report([(0, "setup", "gpu__time_duration.sum", "usecond", "1")])
    # the tool could not run, the runner stopped before the candidate, or the report names nothing: the judge's
    assert attribution.judge_run(run(why="no nsenter"), job, result)[2] is True  # type: ignore[arg-type]
    assert attribution.judge_run(run(loaded=False, report=good), job, result)[2] is True  # type: ignore[arg-type]
    assert attribution.judge_run(run(report="==ERROR== no"), job, result)[2] is True  # type: ignore[arg-type]
    # once the candidate loaded and the tool profiled: the candidate's
    note, problem, infra = attribution.judge_run(run(report=good, done=False, timed_out=True), job,  # type: ignore[arg-type]
                                                 result)
    assert not infra and problem.startswith("the candidate's forwards under Nsight Compute did not finish (it ran out")
    note, problem, infra = attribution.judge_run(run(report=good), job, result)  # type: ignore[arg-type]
    assert not infra and "holds 0 of the 6 marker launches" in problem
    # killed for a limit once it loaded, whatever the report holds: the candidate's (its flood cut the report short)
    note, problem, infra = attribution.judge_run(run(killed_for="memory 32 GiB", done=False), job,  # type: ignore[arg-type]
                                                 result)
    assert not infra and problem.startswith("the candidate's forwards under Nsight Compute did not finish (memory")


def test_only_the_runners_process_counts_and_a_foreign_numbering_is_the_tools() -> None:
    from cudagym.judge.records import EvalResult, EvalStatus

    result = EvalResult(status=EvalStatus.OK)
    good = csv_report([(0, "setup", "gpu__time_duration.sum", "usecond", "1")])  # process 7
    # the runner said it is 7: the report's rows are its own (then judged: here no markers, the candidate's)
    assert not attribution.judge_run(run(report=good, pid=7), None, result)[2]  # type: ignore[arg-type]
    # the runner said 3 and the report names only 7: no row is known to be the runner's
    note, problem, infra = attribution.judge_run(run(report=good, pid=3), None, result)  # type: ignore[arg-type]
    assert infra and "names processes [7], not the runner's 3" in problem


def test_the_setting_is_a_protocol_of_its_own_and_only_ncu() -> None:
    protocol = get_protocol("cudagym[attribution=ncu]")
    assert protocol.extra["attribution"] == "ncu" and protocol.id.endswith("[attribution=ncu]")
    with pytest.raises(ConfigError, match="attribution"):
        get_protocol("cudagym[attribution=nvprof]")


def test_the_view_holds_the_nsight_compute_install_the_launcher_runs(tmp_path) -> None:
    toolkit, opt = tmp_path / "cuda-13.0", tmp_path / "opt" / "nvidia"
    (toolkit / "bin").mkdir(parents=True)
    (toolkit / "nsight-compute-2025.3.1").mkdir()
    (opt / "nsight-compute" / "2025.3.1").mkdir(parents=True)
    launcher = toolkit / "bin" / "ncu"
    launcher.write_text("#!/bin/sh\n")
    assert attribution.ncu_folders(str(launcher), roots=(str(opt),)) == (
        str(toolkit / "bin"), str(toolkit / "nsight-compute-2025.3.1"), str(opt / "nsight-compute"))


def test_a_missing_ncu_is_a_clear_error(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(attribution.BINARY_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConfigError, match="no ncu found"):
        attribution.find_ncu(homes=[str(tmp_path)])
    tool = tmp_path / "bin" / "ncu"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    assert attribution.find_ncu(homes=[str(tmp_path)]) == str(tool)
