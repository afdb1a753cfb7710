"""The baseline cache (keys, merging, locking across processes, bad files) and `cudagym baselines`."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import io
import json
import multiprocessing
from pathlib import Path

import pytest
from faults import FAULTS_DIR

from cudagym.cli import main as cli_main
from cudagym.commands.baselines import Progress, baselines_job_id, precompute, resolve_tasks
from cudagym.errors import ConfigError, UnknownTaskError
from cudagym.judge.baselines import BaselineCache, BaselineKey, default_cache_root, reference_solution
from cudagym.judge.job import KnownBaselines
from cudagym.judge.local import GpuProbe, LocalJudge
from cudagym.judge.protocol import DEFAULT_PROTOCOL, KERNELBENCH
from cudagym.judge.records import BuildResult, BuildStatus, Hardware, TimingStats, Yardstick, to_dict
from cudagym.judge.worker import PoolOptions
from cudagym.task import content_hash

H200 = Hardware(gpu="NVIDIA H200", torch="2.11.0+cu130")


def key(task_hash: str = "a" * 64, protocol_key: str = "cudagym-v0-0123456789") -> BaselineKey:
    return BaselineKey(task_hash, H200.gpu, H200.torch, protocol_key)


def stats(median_us: float) -> TimingStats:
    return TimingStats(median_us=median_us, mean_us=median_us, runs=30)


def test_key_paths_are_safe_and_distinct():
    assert key().relpath() == Path("cudagym-v0-0123456789/NVIDIA_H200/torch-2.11.0+cu130") / f"{'a' * 64}.json"
    weird = BaselineKey("b" * 64, "../../etc GPU", "2/11", "p")
    assert ".." not in weird.relpath().parts and len(weird.relpath().parts) == 4
    assert key("c" * 64).relpath() != key().relpath() != key(protocol_key=KERNELBENCH.timing_key).relpath()


def test_unknown_then_stored_then_merged(tmp_path):
    cache = BaselineCache(tmp_path)
    assert not cache.get(key()).known and not cache.get(key()).eager.measured
    cache.put(key(), stats(100.0), TimingStats(), task_id="L1/19_ReLU")
    partial = cache.get(key())
    assert partial.eager == stats(100.0) and not partial.known
    cache.put(key(), TimingStats(), stats(80.0))
    assert cache.get(key()).known and cache.get(key()).compiled == stats(80.0)
    cache.put(key(), stats(999.0), stats(999.0))  # the first measurement is kept...
    assert cache.get(key()).eager == stats(100.0)
    cache.put(key(), stats(90.0), TimingStats(), replace=True)  # ...unless replaced on purpose
    assert cache.get(key()).eager == stats(90.0) and cache.get(key()).compiled == stats(80.0)
    data = json.loads(cache.path(key()).read_text())
    assert data["task_id"] == "L1/19_ReLU" and data["key"]["gpu"] == "NVIDIA H200"
    assert [(k, tid) for k, tid, _ in cache.entries()] == [(key(), "L1/19_ReLU")]


def test_the_yardstick_is_kept_beside_the_baselines_and_read_back_checked(tmp_path):
    cache = BaselineCache(tmp_path)
    own = Yardstick(stats(120.0), late_calls=3, calls=20, disputed="")
    cache.put(key(), stats(100.0), stats(80.0), yardstick=own)
    assert cache.get(key()).yardstick == own and cache.get(key()).known
    cache.put(key(), stats(100.0), stats(80.0), yardstick=Yardstick(stats(999.0), 0, 20))  # the first is kept ...
    assert cache.get(key()).yardstick == own
    cache.put(key(), TimingStats(), TimingStats(), yardstick=Yardstick())  # ... an unmeasured one changes nothing
    assert cache.get(key()).yardstick == own
    cache.put(key(), TimingStats(), TimingStats(), replace=True, yardstick=Yardstick(stats(130.0), 0, 20, "x"))
    assert cache.get(key()).yardstick == Yardstick(stats(130.0), 0, 20, "x")
    data = json.loads(cache.path(key()).read_text())
    assert data["runner_reference"]["time"]["median_us"] == 130.0 and data["runner_reference"]["disputed"] == "x"
    # eager timed around it (yardstick_beside_eager) goes with it; a file without one reads as untimed
    assert "eager_beside" in data["runner_reference"] and not cache.get(key()).yardstick.eager_beside.measured
    beside = Yardstick(stats(130.0), 0, 20, "x", eager_beside=stats(125.0))
    cache.put(key(), TimingStats(), TimingStats(), replace=True, yardstick=beside)
    assert cache.get(key()).yardstick == beside
    data = json.loads(cache.path(key()).read_text())
    # a file of a cudagym that kept no yardstick: the baselines stand, the yardstick is unknown (the job times it)
    del data["runner_reference"]
    cache.path(key()).write_text(json.dumps(data))
    assert cache.get(key()).known and not cache.get(key()).yardstick.measured
    # one whose yardstick fields are damaged counts as unknown altogether, as a damaged time does
    for bad in ({"time": {"median_us": -1.0, "runs": 20}}, {"time": stats(1.0).__dict__, "late_calls": 5, "calls": 2},
                {"time": stats(1.0).__dict__, "late_calls": "3"}, {"time": stats(1.0).__dict__, "disputed": 7},
                {"time": stats(1.0).__dict__, "eager_beside": {"median_us": -2.0, "runs": 3}}, [1]):
        cache.path(key()).write_text(json.dumps({**data, "runner_reference": bad}))
        assert cache.get(key()) == KnownBaselines(), bad


def test_an_unreadable_file_counts_as_unknown_and_is_replaced(tmp_path):
    cache = BaselineCache(tmp_path)
    path = cache.path(key())
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert not cache.get(key()).eager.measured
    cache.put(key(), stats(1.0), stats(2.0))
    assert cache.get(key()).known


def _hammer(root: str, worker: int) -> None:
    cache = BaselineCache(root)
    for i in range(30):
        cache.put(key(f"{i % 5:064d}"), stats(float(worker)), TimingStats())
        cache.put(key(f"{i % 5:064d}"), TimingStats(), stats(float(worker)))
        cache.get(key(f"{i % 5:064d}"))


def test_concurrent_writers_never_tear_a_file(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_hammer, args=(str(tmp_path), w)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    cache = BaselineCache(tmp_path)
    for i in range(5):
        value = cache.get(key(f"{i:064d}"))
        assert value.known and value.eager.median_us in {0.0, 1.0, 2.0, 3.0}
        json.loads(cache.path(key(f"{i:064d}")).read_text())
    assert not list(tmp_path.rglob(".tmp-*"))


def test_cache_folder_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDAGYM_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_root() == tmp_path / "xdg" / "cudagym" / "baselines"
    monkeypatch.setenv("CUDAGYM_CACHE_DIR", str(tmp_path / "mine"))
    assert default_cache_root() == tmp_path / "mine" / "baselines"


def test_the_reference_solution_is_the_reference_named_modelnew():
    from cudagym.suites import load_tasks

    task = load_tasks("bundled")[0]
    solution = reference_solution(task)
    assert solution.format == "raw" and set(solution.files) == {"model_new.py", "kernels/cudagym_noop.cu"}
    assert solution.build_hash() == reference_solution(load_tasks("bundled")[-1]).build_hash()  # one build for all
    source = solution.files["model_new.py"]
    assert source.startswith(task.source.rstrip()) and source.rstrip().endswith("ModelNew = Model")
    content_hash(source)  # it parses


def _args(**kw) -> argparse.Namespace:
    base = dict(env=None, suite=None, level=None, tasks=None)
    base.update(kw)
    return argparse.Namespace(**base)


def test_tasks_come_from_an_env_id_a_suite_or_ids():
    bundled = resolve_tasks(_args(env="CudaKernel-Bundled-v0"))
    assert bundled and all(t.suite == "bundled" for t in bundled)
    assert resolve_tasks(_args(suite="bundled")) == bundled
    assert resolve_tasks(_args(tasks=[bundled[0].id])) == (bundled[0],)
    assert resolve_tasks(_args(env="CudaKernel-Bundled-v0", level=1)) == tuple(t for t in bundled if t.level == 1)
    with pytest.raises(UnknownTaskError, match="CudaKernel-Nope-v0"):
        resolve_tasks(_args(env="CudaKernel-Nope-v0"))
    with pytest.raises(ConfigError, match="--env"):
        resolve_tasks(_args())


def test_progress_prints_one_line_per_step_off_a_terminal():
    out = io.StringIO()
    bar = Progress(3, stream=out, width=6)
    for label in ("a", "b", "c"):
        bar.step(label)
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and lines[0].startswith("[##....] 1/3") and lines[-1].startswith("[######] 3/3")
    assert lines[-1].endswith("c")


def _fake_judge(protocol, **kw):
    options = PoolOptions(job_fn="jobs:fake_timing", pythonpath=(str(FAULTS_DIR),))
    return LocalJudge(protocol, gpus=GpuProbe(("0",), Hardware(gpu="Fake GPU 80GB", torch="9.9.9+fake")),
                      pool_options=options, build_fn=lambda t, s, p: BuildResult(BuildStatus.OK, s.format), **kw)


def test_precompute_fills_the_cache_then_skips_what_it_holds(tmp_path, capsys):
    tasks = resolve_tasks(_args(suite="bundled"))
    run = functools.partial(precompute, tasks, "cudagym", cache_dir=tmp_path, make_judge=_fake_judge)
    assert run() == 0
    err = capsys.readouterr().err
    said = f"0 already cached on Fake GPU 80GB (torch 9.9.9+fake, protocol {DEFAULT_PROTOCOL.id}); timing {len(tasks)}"
    assert said in err
    assert f"{len(tasks)}/{len(tasks)}" in err and f"done: {len(tasks)} timed, 0 failed" in err
    cache = BaselineCache(tmp_path / "baselines")
    fake = Hardware(gpu="Fake GPU 80GB", torch="9.9.9+fake")
    files = {t.id: cache.path(BaselineKey.of(t, fake, DEFAULT_PROTOCOL)) for t in tasks}
    assert all(cache.get(BaselineKey.of(t, fake, DEFAULT_PROTOCOL)).known for t in tasks)
    stamps = {tid: p.stat().st_mtime_ns for tid, p in files.items()}
    assert run() == 0
    assert f"{len(tasks)} already cached" in capsys.readouterr().err
    assert {tid: p.stat().st_mtime_ns for tid, p in files.items()} == stamps  # nothing re-timed
    assert run(force=True) == 0
    assert f"timing {len(tasks)}" in capsys.readouterr().err


def test_precompute_times_again_an_entry_without_the_yardstick_and_a_forced_run_replaces_it(tmp_path, capsys):
    tasks = resolve_tasks(_args(suite="bundled"))[:2]
    run = functools.partial(precompute, tasks, "cudagym", cache_dir=tmp_path, make_judge=_fake_judge)
    assert run() == 0
    cache = BaselineCache(tmp_path / "baselines")
    fake = Hardware(gpu="Fake GPU 80GB", torch="9.9.9+fake")
    keys = [BaselineKey.of(t, fake, DEFAULT_PROTOCOL) for t in tasks]
    assert all(cache.get(k).yardstick.measured for k in keys)  # the clean job's runner time, beside its baselines
    # an entry a cudagym before the yardstick wrote: its baselines stand, and a PROFILE of it times the yardstick
    data = json.loads(cache.path(keys[0]).read_text())
    before = data.pop("runner_reference")
    cache.path(keys[0]).write_text(json.dumps(data))
    capsys.readouterr()
    assert run() == 0
    assert f"{len(tasks) - 1} already cached" in capsys.readouterr().err
    assert to_dict(cache.get(keys[0]).yardstick) == before and cache.get(keys[0]).eager.median_us == \
        data["eager"]["median_us"]
    # a forced run replaces the yardstick too, as it does the baselines
    cache.put(keys[1], TimingStats(), TimingStats(), replace=True, yardstick=Yardstick(stats(999.0), 0, 20))
    assert run(force=True) == 0
    assert cache.get(keys[1]).yardstick.time.median_us != 999.0


def test_a_journaled_precompute_answers_only_the_same_timing_settings(tmp_path, capsys):
    # a protocol changed with with_changes keeps its id: its baselines are other times, never the journal's replay
    from cudagym.judge.journal import Journal

    tasks = resolve_tasks(_args(suite="bundled"))[:2]
    journal = tmp_path / "precompute.jsonl"
    run = functools.partial(precompute, tasks, cache_dir=tmp_path, make_judge=_fake_judge, journal=journal)
    assert run(DEFAULT_PROTOCOL) == 0
    slower = DEFAULT_PROTOCOL.with_changes(min_runs=DEFAULT_PROTOCOL.min_runs + 1)  # the same id, another timing key
    assert slower.id == DEFAULT_PROTOCOL.id and slower.timing_key != DEFAULT_PROTOCOL.timing_key
    capsys.readouterr()
    assert run(slower) == 0
    assert f"timing {len(tasks)}" in capsys.readouterr().err
    ran = [e for e in Journal(journal).entries() if e.result is not None]
    assert len(ran) == 2 * len(tasks), [e.job_id for e in ran]  # each settings' jobs ran; none was a replay
    fake = Hardware(gpu="Fake GPU 80GB", torch="9.9.9+fake")
    assert {e.job_id for e in ran} == {baselines_job_id(p, fake, t) for p in (DEFAULT_PROTOCOL, slower) for t in tasks}


def test_precompute_without_a_gpu_says_so(tmp_path, capsys):
    code = cli_main(["baselines", "precompute", "--env", "CudaKernel-Bundled-v0", "--devices", "none",
                     "--cache-dir", str(tmp_path)])
    assert code == 1 and "no GPU" in capsys.readouterr().err


def test_show_lists_cached_baselines(tmp_path, capsys):
    from cudagym.suites import load_tasks

    task = load_tasks("bundled")[0]
    other = load_tasks("bundled")[1]
    cache = BaselineCache(tmp_path / "baselines")
    cache.put(BaselineKey.of(task, H200, DEFAULT_PROTOCOL), stats(123.4), stats(99.9), task_id=task.id)
    cache.put(BaselineKey.of(other, H200, DEFAULT_PROTOCOL), stats(200.0), stats(150.0), task_id=other.id,
              yardstick=Yardstick(stats(180.5), late_calls=30, calls=30))
    assert cli_main(["baselines", "show", "--cache-dir", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert task.id in captured.out and "123.4" in captured.out and "99.9" in captured.out
    line = next(row for row in captured.out.splitlines() if row.startswith(other.id))
    assert "in a runner      180.5 us (30/30 late)" in line, line  # the yardstick beside the baselines
    assert "2 cached baselines" in captured.err


# ------------------------------------------------------------------------------------- baselines check


def _check_run(tmp_path, tasks, **plan):
    from cudagym.commands.baselines import check
    from cudagym.judge.task_check import CheckPlan

    table = tmp_path / "out" / "check.md"
    code = check(tasks, "kernelbench", CheckPlan(str(table), **plan), cache_dir=tmp_path / "cache",
                 journal=tmp_path / "journal.jsonl", make_judge=_fake_judge)
    return code, table


def test_check_writes_a_row_per_task_and_a_resumed_run_answers_from_the_journal(tmp_path, capsys):
    tasks = resolve_tasks(_args(suite="bundled"))[:4]
    code, table = _check_run(tmp_path, tasks, stop_after_s=1e-9)  # the budget is over before the first task
    assert code == 1
    rows = list(csv_rows(table))
    assert len(rows) == 4 and {r["task_id"] for r in rows} == {t.id for t in tasks}
    assert {r["status"] for r in rows} == {"not_run"}
    code, table = _check_run(tmp_path, tasks)
    assert code == 0 and "done: 4 of 4 tasks loaded, checked and timed" in capsys.readouterr().err
    rows = list(csv_rows(table))
    assert {r["status"] for r in rows} == {"ok"} and all(float(r["eager_over_compile"]) > 1 for r in rows)
    markdown = table.read_text()
    assert "4 tasks: 4 ok; 4 loaded, checked and timed." in markdown and "protocol kernelbench-v0.9" in markdown
    assert "This run: 4 evaluations in " in markdown and "per GPU-hour; 0 answered from the journal." in markdown
    journal = (tmp_path / "journal.jsonl").read_text()
    assert _check_run(tmp_path, tasks)[0] == 0  # resumed: every job id already has its result
    assert (tmp_path / "journal.jsonl").read_text() == journal
    assert list(csv_rows(table)) == rows


def test_from_journal_rewrites_the_table_from_a_runs_results_with_no_gpu(tmp_path, capsys):
    """Through the CLI on a host without a GPU: the rows a run wrote come back from its journal alone; a task the
    journal lacks is not_run; a missing journal is a clear error."""
    tasks = resolve_tasks(_args(suite="bundled"))[:3]
    code, table = _check_run(tmp_path, tasks[:2])
    assert code == 0
    ran = list(csv_rows(table))
    again = tmp_path / "again" / "check.md"
    code = cli_main(["baselines", "check", "--tasks", *(t.id for t in tasks), "--protocol", "kernelbench",
                     "--journal", str(tmp_path / "journal.jsonl"), "--table", str(again), "--from-journal"])
    assert code == 1 and "2 of 3 tasks loaded, checked and timed" in capsys.readouterr().err
    rows = list(csv_rows(again))
    assert rows[:2] == ran and rows[2]["status"] == "not_run" and rows[2]["message"] == "no result in the journal"
    assert "3 tasks: 1 not_run, 2 ok; 2 loaded, checked and timed." in again.read_text()
    code = cli_main(["baselines", "check", "--tasks", tasks[0].id, "--protocol", "kernelbench-v0.4",
                     "--journal", str(tmp_path / "journal.jsonl"), "--table", str(again), "--from-journal"])
    err = capsys.readouterr().err  # another protocol's journal: it names the protocols the journal does hold
    assert code == 1 and "0 of 1 tasks" in err and "check results under kernelbench-v0.9-" in err
    code = cli_main(["baselines", "check", "--tasks", tasks[0].id, "--journal", str(tmp_path / "none.jsonl"),
                     "--table", str(again), "--from-journal"])
    assert code != 0 and "no such file" in capsys.readouterr().err


def csv_rows(table):
    import csv

    with table.with_suffix(".csv").open() as fh:
        yield from csv.DictReader(fh)


def test_a_row_says_what_a_failed_task_lacks():
    from cudagym.judge.records import EvalCost, EvalResult, EvalStatus
    from cudagym.judge.task_check import passed, row_of, to_markdown
    from cudagym.suites import load_tasks

    task = load_tasks("bundled")[0]
    too_large = EvalResult(EvalStatus.TASK_TOO_LARGE, "the task does not fit | in this GPU's memory",
                           cost=EvalCost(peak_device_memory_bytes=3 << 30, device_memory_total_bytes=140 << 30))
    row = row_of(task, too_large)
    assert not passed(row) and row.peak_memory_gib == 3.0 and row.device_memory_gib == 140.0
    assert row.eager_over_compile == 0.0  # nothing timed: no ratio, never a division by zero
    untimed_compile = EvalResult(EvalStatus.OK, "correct", eager=stats(10.0))
    assert not passed(row_of(task, untimed_compile))
    cost = EvalCost(peak_device_memory_bytes=9 << 30, reference_peak_bytes=5 << 30, input_set_bytes=2 << 30,
                    output_set_bytes=1 << 30)
    timed = row_of(task, EvalResult(EvalStatus.OK, "correct", eager=stats(10.0), compiled=stats(4.0), cost=cost))
    assert passed(timed) and timed.eager_over_compile == 2.5
    assert (timed.reference_peak_gib, timed.input_output_gib, timed.over_bound_gib) == (5.0, 3.0, 1.0)
    assert timed.bound_gib == 8.0  # one process: R + S + O
    split = dataclasses.replace(cost, arena_bytes=3 << 30)  # the split's trusted process: R + S + 2 O, arenas in
    in_split = row_of(task, EvalResult(EvalStatus.OK, "correct", eager=stats(10.0), compiled=stats(4.0), cost=split))
    assert (in_split.bound_gib, in_split.over_bound_gib) == (9.0, 0.0)
    # with a shared heap (GPU path): its reserve is the output arena, its room the runner's: R + S + O + the heap
    heaped = dataclasses.replace(cost, arena_bytes=5 << 30, heap_bytes=3 << 30)
    in_heap = row_of(task, EvalResult(EvalStatus.OK, "correct", eager=stats(10.0), compiled=stats(4.0), cost=heaped))
    assert in_heap.bound_gib == 11.0
    # torch.compile's generated code can need more than eager (L1/87: an output-sized intermediate): R is the larger
    compiled_more = dataclasses.replace(split, compiled_peak_bytes=7 << 30)
    row_c = row_of(task, EvalResult(EvalStatus.OK, "correct", eager=stats(10.0), compiled=stats(4.0),
                                    cost=compiled_more))
    assert (row_c.reference_peak_gib, row_c.compiled_peak_gib, row_c.bound_gib) == (5.0, 7.0, 11.0)
    assert "| 5.00 | 7.00 | 3.00 | 11.00 |" in to_markdown([row_c], "t")
    from cudagym.judge.harness.runner import OUTLASTED_NOTE

    log = f"timing: ...\n{OUTLASTED_NOTE}: compiled's host takes 3100 us to queue a call, longer than the 2000 us cover"
    hosted = row_of(task, EvalResult(EvalStatus.OK, "correct", eager=stats(10.0), compiled=stats(4.0),
                                     candidate=stats(9.0), cost=cost, log=log))
    assert hosted.host_in_baselines == "compiled" and timed.host_in_baselines == ""
    summary = to_markdown([timed, hosted], "t")
    assert "Reference as candidate / eager (the same code, two clocks): median 0.900, range 0.900-0.900; 1 task(s) " \
           "with a baseline whose host outlasted its cover." in summary
    assert row.over_bound_gib == 0.0  # no reference peak was measured: no excess is claimed
    assert timed.allocated_peak_gib == 0.0 and "(" not in to_markdown([timed], "t").splitlines()[-1].split("|")[16]
    # L1/42 on the H200: a freed 4 GiB block held a 2 GiB output, so the allocator reserved one more 4 GiB segment
    # for the next round's 4 GiB temporary; the live tensors stayed inside the bound
    fragmented = dataclasses.replace(split, peak_device_memory_bytes=11 << 30, peak_allocated_bytes=17 << 29)
    row_f = row_of(task, EvalResult(EvalStatus.OK, "correct", eager=stats(10.0), compiled=stats(4.0),
                                    cost=fragmented))
    assert (row_f.over_bound_gib, row_f.allocated_peak_gib, row_f.allocated_over_bound_gib) == (2.0, 8.5, -0.5)
    text = to_markdown([timed, row_f], "t")
    assert "| 9.00 | 2.00 (-0.50) |" in text
    assert ("largest excess over the bound 2.00 GiB (reserved by the allocator); counting live allocations only, "
            "-0.50 GiB (bundled/") in text and "0 of 1 task(s) over." in text
    text = to_markdown([row, timed], "t")
    assert "2 tasks: 1 ok, 1 task_too_large; 1 loaded, checked and timed." in text
    assert "the task does not fit / in this GPU's memory" in text  # a pipe would break the table


def test_the_summary_names_tasks_where_the_verdicts_own_ratio_gave_the_same_code_a_tier():
    """Under a mean statistic the medians can agree while the verdict's ratio (by the mean) passes the threshold:
    L3/19_MobileNetV1 under kernelbench-v0.4, eager mean 1,025 us against a median of 823, judged 1.25x."""
    from cudagym.judge.records import EvalResult, EvalStatus, TimingStats
    from cudagym.judge.task_check import row_of, to_csv, to_markdown
    from cudagym.suites import load_tasks

    tasks = load_tasks("bundled")[:3]
    eager = TimingStats(median_us=822.7, mean_us=1025.0, runs=100)
    same = TimingStats(median_us=821.6, mean_us=822.1, runs=100)
    rows = [row_of(tasks[0], EvalResult(EvalStatus.OK, "correct", eager=eager, compiled=stats(420.3), candidate=same,
                                        speedup_vs_eager=1025.0 / 822.1, speedup_vs_compile=420.5 / 822.1)),
            row_of(tasks[1], EvalResult(EvalStatus.OK, "correct", eager=stats(100.0), compiled=stats(90.0),
                                        candidate=stats(103.0), speedup_vs_eager=100.0 / 103.0)),
            row_of(tasks[2], EvalResult(EvalStatus.OK, "correct", eager=stats(100.0), compiled=stats(90.0),
                                        candidate=stats(96.0), speedup_vs_eager=100.0 / 96.0))]  # 1.042: within 5%
    assert rows[0].speedup_vs_eager == pytest.approx(1.2468, abs=1e-4) and rows[0].candidate_us == 821.6
    text = to_markdown(rows, "t", threshold=0.05)
    assert "Reference as candidate / eager (the same code, two clocks): median 0.999" in text  # medians agree
    assert ("The verdict's own ratio vs eager (the protocol's statistic): median 1.042, range 0.971-1.247; 1 task(s) "
            f"where the same code was judged more than 5% faster than eager, a tier it did not earn: {tasks[0].id}."
            ) in text
    assert f"| {tasks[0].id} | ok | 822.7 | 420.3 | 821.6 | - | 1.247 |" in text  # no runner: no yardstick
    assert "speedup_vs_eager,speedup_vs_compile" in to_csv(rows).splitlines()[0]
    assert "0 task(s) where the same code" in to_markdown(rows, "t", threshold=0.3)


def test_check_without_a_gpu_says_so(tmp_path, capsys):
    code = cli_main(["baselines", "check", "--env", "CudaKernel-Bundled-v0", "--devices", "none", "--first", "2",
                     "--retry-failed", "--window", "1", "--stop-after-s", "60", "--cache-dir", str(tmp_path),
                     "--table", str(tmp_path / "t.md")])
    assert code == 1 and "no GPU" in capsys.readouterr().err


def test_retry_failed_runs_a_journaled_failure_once_more_under_its_own_resumable_id(tmp_path):
    from cudagym.judge.baselines import reference_solution
    from cudagym.judge.journal import Journal
    from cudagym.judge.protocol import get_protocol
    from cudagym.judge.records import EvalResult, EvalStatus

    tasks = resolve_tasks(_args(suite="bundled"))[:2]
    checking = get_protocol("kernelbench").with_changes(guards=())
    failed_id = f"check:{checking.timing_key}:{tasks[0].content_hash[:16]}"
    Journal(tmp_path / "journal.jsonl").record_result(
        failed_id, EvalResult(EvalStatus.TIMEOUT, "ran past 300 s"), task_id=tasks[0].id,
        solution_hash=reference_solution(tasks[0]).content_hash)  # the check's job: the reference as its candidate
    assert _check_run(tmp_path, tasks)[0] == 1  # the journal's failure stands
    assert [r["status"] for r in csv_rows(tmp_path / "out" / "check.md")] == ["timeout", "ok"]
    assert _check_run(tmp_path, tasks, retry_failed=True)[0] == 0
    assert [r["status"] for r in csv_rows(tmp_path / "out" / "check.md")] == ["ok", "ok"]
    assert Journal(tmp_path / "journal.jsonl").result(f"{failed_id}:retry").status is EvalStatus.OK
    lines = (tmp_path / "journal.jsonl").read_text()
    assert _check_run(tmp_path, tasks, retry_failed=True)[0] == 0  # resumed: the retry is answered from the journal
    assert (tmp_path / "journal.jsonl").read_text() == lines
    # a later run without --retry-failed (the next level of a sweep) reports the retry, not the failure it retried
    assert _check_run(tmp_path, tasks)[0] == 0
    assert [r["status"] for r in csv_rows(tmp_path / "out" / "check.md")] == ["ok", "ok"]
    assert (tmp_path / "journal.jsonl").read_text() == lines


def test_the_table_states_how_the_candidates_runner_ran_the_reference_against_eager():
    from cudagym.judge.task_check import TaskRow, to_csv, to_markdown

    rows = [TaskRow(f"L1/{n}_t", 1, "ok", eager_us=100.0, compile_us=90.0, candidate_us=cand, runner_reference_us=own,
                    runner_reference_runs=runs, runner_reference_ci_pct=ci, speedup_vs_eager=own / cand)
            for n, (cand, own, runs, ci) in enumerate([(60.0, 61.0, 30, 0.41), (99.0, 100.0, 200, 2.5)])]
    text = to_markdown(rows, "t")
    assert "The reference in the candidate's runner / eager here (the yardstick's scale): median 0.805, range " \
           "0.610-1.000; its timed calls there: median 115, range 30-200." in text
    assert "| 61.0 (30, +-0.4%) | 1.017 |" in text and "| 100.0 (200, +-2.5%) |" in text
    header = to_csv(rows).splitlines()[0]
    assert "runner_reference_us" in header and "runner_reference_runs" in header and "runner_reference_ci_pct" in header
    assert "yardstick" not in to_markdown([dataclasses.replace(r, runner_reference_us=0.0) for r in rows], "t")


def test_the_table_sets_the_profiled_kernels_beside_the_timed_median():
    from cudagym.judge.records import EvalResult, EvalStatus, KernelTime, TimingStats
    from cudagym.judge.task_check import TaskRow, row_of, to_csv, to_markdown
    from cudagym.task import make_task

    source = ("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
              "def get_inputs():\n    return []\ndef get_init_inputs():\n    return []\n")
    task = make_task(source, id="L1/1_t", suite="test", level=1, name="t", origin="test")
    result = EvalResult(status=EvalStatus.OK, candidate=TimingStats(median_us=100.0, runs=30),
                        kernels=(KernelTime("k", 80.0, 1, 0.8), KernelTime("(other kernels)", 10.0, 2, 0.2)))
    assert row_of(task, result).profiled_over_timed == pytest.approx(0.9)  # a result without busy time: summed
    # the busy GPU time where the harness measured it (overlapping kernels once)
    assert row_of(task, dataclasses.replace(result, kernel_busy_us=70.0)).profiled_over_timed == pytest.approx(0.7)
    assert row_of(task, dataclasses.replace(result, kernels=())).profiled_over_timed == 0.0  # not profiled
    rows = [TaskRow(f"L1/{n}_t", 1, "ok", eager_us=100.0, compile_us=90.0, candidate_us=100.0,
                    profiled_over_timed=fit) for n, fit in enumerate([0.9, 1.2, 0.0])]
    text = to_markdown(rows, "t")
    assert ("The profiled forward's busy GPU time / its timed median: median 1.050, range 0.900-1.200 (L1/1_t); "
            "1 task(s) above 1") in text
    assert "| 0.900 |" in text and "| - |" in text  # the unprofiled row shows a dash
    assert "profiled_over_timed" in to_csv(rows).splitlines()[0]


def test_a_job_is_started_only_if_one_as_long_as_the_longest_so_far_would_end_by_the_deadline() -> None:
    from cudagym.judge.task_check import ends_in_time

    assert ends_in_time(0.0, 1e6, 1e6, 9)  # no deadline
    assert ends_in_time(400.0, 100.0, 150.0, 1) and not ends_in_time(400.0, 101.0, 150.0, 1)
    assert ends_in_time(400.0, 390.0, 0.0, 3)  # nothing timed yet: nothing to go by


class _TimedJudge:
    """A stand-in for ``LocalJudge`` whose jobs end at once, each saying it took ``wall_s`` in its worker."""

    journal = None

    def __init__(self, wall_s: float) -> None:
        self.wall_s, self.submitted = wall_s, []

    def submit(self, task, solution, mode, *, job_id):
        from concurrent.futures import Future

        from cudagym.judge.records import no_gpu_verdict

        self.submitted.append(task.id)
        future: Future = Future()
        future.set_result(no_gpu_verdict(BuildResult(BuildStatus.OK, "raw"), protocol_id="p", wall_time_s=self.wall_s))
        return future


def test_a_run_with_a_deadline_starts_no_job_it_could_not_finish(tmp_path) -> None:
    from cudagym.judge.protocol import get_protocol
    from cudagym.judge.task_check import CheckPlan, check_tasks

    tasks = resolve_tasks(_args(suite="bundled"))[:5]
    judge = _TimedJudge(200.0)
    plan = CheckPlan(str(tmp_path / "check.md"), window=2, deadline_s=150.0)
    rows = check_tasks(tasks, get_protocol("kernelbench"), judge, plan, lambda t: None, log=io.StringIO())
    # two go before any job has a time; once a job took 200 s, none would end by 150 s, even alone on the GPU
    assert judge.submitted == [t.id for t in tasks[:2]]
    assert [r.status for r in rows] == ["no_gpu"] * 2 + ["not_run"] * 3
    assert rows[2].message == "not started: a job as long as this run's longest (200 s) would end after --deadline-s"
    assert "3 not_run" in (tmp_path / "check.md").read_text()
    # 100 s jobs fit one at a time (these take no time on the clock): all five run, none queued behind another
    judge = _TimedJudge(100.0)
    rows = check_tasks(tasks, get_protocol("kernelbench"), judge, plan, lambda t: None, log=io.StringIO())
    assert len(judge.submitted) == 5 and {r.status for r in rows} == {"no_gpu"}


def test_the_deadline_reaches_the_check_through_the_cli(tmp_path, capsys, monkeypatch) -> None:
    import cudagym.commands.baselines as commands

    plans = []
    monkeypatch.setattr(commands, "check", lambda tasks, protocol, plan, **kw: plans.append(plan) or 0)
    assert cli_main(["baselines", "check", "--suite", "bundled", "--first", "1", "--deadline-s", "520",
                     "--stop-after-s", "400", "--table", str(tmp_path / "c.md")]) == 0
    assert plans[0].deadline_s == 520.0 and plans[0].stop_after_s == 400.0
    assert cli_main(["baselines", "check", "--suite", "bundled", "--deadline-s", "soon"]) == 2  # a clear error
    assert "argument --deadline-s: invalid float value: 'soon'" in capsys.readouterr().err


def test_a_row_names_the_calls_the_runner_had_not_queued_before_the_go():
    from cudagym.judge.records import EvalCost, EvalResult, EvalStatus
    from cudagym.judge.task_check import row_of, to_csv, to_markdown
    from cudagym.suites import load_tasks

    task = load_tasks("bundled")[0]
    # session 23's sync-inside forward on the H200: every call of both kinds late
    late = EvalCost(late_calls=40, timed_calls=40, late_reference_calls=205, reference_calls=205)
    row = row_of(task, EvalResult(EvalStatus.OK, "correct", eager=stats(10.0), compiled=stats(4.0), cost=late))
    on_time = row_of(task, EvalResult(EvalStatus.OK, "correct", eager=stats(10.0), compiled=stats(4.0),
                                      cost=EvalCost(timed_calls=40, reference_calls=130)))
    assert row.late_calls == "reference 205/205, timed 40/40" and on_time.late_calls == ""
    only_timed = EvalCost(late_calls=3, timed_calls=40, reference_calls=130)
    assert row_of(task, EvalResult(EvalStatus.OK, cost=only_timed)).late_calls == "timed 3/40"
    text = to_markdown([row, on_time], "t")
    assert (f"Calls not queued before the judge's go (each timed by its GPU clock, the GPU's wait for the runner's "
            f"host in it): 1 task(s): {task.id} (reference 205/205, timed 40/40).") in text
    assert "Calls not queued" not in to_markdown([on_time], "t")
    assert "late_calls" in to_csv([row]).splitlines()[0] and "reference 205/205, timed 40/40" in to_csv([row])


def test_late_call_counts_survive_the_journal(tmp_path):
    from cudagym.judge.journal import Journal
    from cudagym.judge.records import EvalCost, EvalResult, EvalStatus

    journal = Journal(tmp_path / "j.jsonl")
    cost = EvalCost(late_calls=40, timed_calls=40, late_reference_calls=205, reference_calls=205)
    journal.record_result("job", EvalResult(EvalStatus.OK, "correct", cost=cost), task_id="t", solution_hash="h")
    assert Journal(tmp_path / "j.jsonl").result("job").cost == cost


def test_tasks_a_cut_run_never_submitted_still_show_what_the_journal_holds(tmp_path):
    tasks = resolve_tasks(_args(suite="bundled"))[:4]
    assert _check_run(tmp_path, tasks[2:])[0] == 0  # an earlier call finished the last two
    code, table = _check_run(tmp_path, tasks, stop_after_s=1e-9)  # this one's budget is over at once
    rows = {r["task_id"]: r["status"] for r in csv_rows(table)}
    assert code == 1 and rows == {tasks[0].id: "not_run", tasks[1].id: "not_run", tasks[2].id: "ok", tasks[3].id: "ok"}
