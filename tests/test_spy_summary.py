"""benchmarks/spy_summary.py on a recording in py-spy's raw format (as py-spy 0.4.3 writes it)."""

from __future__ import annotations

from script_module import load_script

spy = load_script("benchmarks/spy_summary.py", "spy_summary")

MAIN = 'process 10:"python -m pytest benchmarks/bench_vec.py"'
WORKER = ('process 20:"/opt/venv/bin/python3 -m cudagym.judge.worker --job-fn cudagym.judge.split.trusted:run_job '
          '--policy {"cpu_time_s": 1800.0; "odd": "a;b"}"')
RUNNER = 'process 30:"/opt/venv/bin/python3 -m cudagym.judge.split.runner --sock 37 --policy {"x": 1}"'
RECORDING = "\n".join([
    f"{MAIN};thread (10): MainThread;<module> (bench_vec.py:12);wait (threading.py:355) 50",
    f"{MAIN};{WORKER};thread (20): MainThread;main (worker.py:934);_serve (worker.py:981);"
    "bracketed (remote.py:520);gather (heap.py:396) 30",
    f"{MAIN};{WORKER};thread (20): MainThread;main (worker.py:934);_serve (worker.py:981);"
    "bracketed (remote.py:548);_reply (remote.py:440) 10",
    f"{MAIN};{WORKER};{RUNNER};thread (30): MainThread;serve (runner.py:159);_timed (runner.py:300) 60",
    f"{MAIN};{WORKER};{RUNNER};thread (31): heap-stats;run (runner.py:80) 0",
    "a stray line without a count",
    "",
])


def test_samples_go_to_the_kind_of_the_process_that_took_them() -> None:
    stacks = spy.read(RECORDING)
    assert {kind: sum(c for _, c in v) for kind, v in stacks.items()} == {"other": 50, "trusted worker": 40,
                                                                            "runner": 60}
    frames, count = stacks["trusted worker"][0]
    assert frames == ["main (worker.py)", "_serve (worker.py)", "bracketed (remote.py)", "gather (heap.py)"]
    assert count == 30  # the ';' inside the worker's command line split nothing


def test_the_table_gives_each_kinds_inclusive_and_self_shares() -> None:
    table = "\n".join(spy.summarize(RECORDING, top=3))
    assert "## runner: 60 samples (40% of all)" in table
    assert "## trusted worker: 40 samples (27% of all)" in table
    assert table.index("## runner") < table.index("## other") < table.index("## trusted worker")  # most first
    worker = table[table.index("## trusted worker"):]
    assert " 100.0%  bracketed (remote.py)" in worker  # its two lines, one function
    assert "  75.0%  gather (heap.py)" in worker and "  25.0%  _reply (remote.py)" in worker


def test_a_missing_recording_is_said_plainly(tmp_path, capsys) -> None:
    assert spy.main([str(tmp_path / "none.txt")]) == 2
    assert "no recording at" in capsys.readouterr().out
    assert spy.summarize("") == ["(no samples)"]
