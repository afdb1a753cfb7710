"""Long waits show an elapsed-time line on the terminal (stderr), never in what the agent sees."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest
from conftest_env import act, make_env, small_kernelbench
from fakes import FakeJudge, ok_build

from cudagym.progress import ShowProgress, waiting


class Terminal(io.StringIO):
    """A stream that says it is a terminal, as stderr is in an interactive shell."""

    def isatty(self) -> bool:
        return True


def test_a_long_wait_draws_the_label_and_the_elapsed_time_then_erases_it() -> None:
    term = Terminal()
    with waiting("compile: building", term, delay_s=0.1):
        time.sleep(1.3)
    drawn = term.getvalue()
    assert "compile: building  00:01" in drawn
    assert drawn.rstrip(" \r").endswith("00:01") and drawn.endswith("\r")  # blanked out at the end
    last = drawn.rsplit("00:01", 1)[1]
    assert last.strip(" \r") == "" and len(last) > len("compile: building")


def test_a_quick_step_draws_nothing() -> None:
    term = Terminal()
    with waiting("compile: building", term, delay_s=5.0):
        time.sleep(0.05)
    assert "compile" not in term.getvalue()


def test_nothing_is_drawn_when_stderr_is_not_a_terminal() -> None:
    log = io.StringIO()
    with waiting("compile: building", log, delay_s=0.0):
        time.sleep(0.6)
    assert log.getvalue() == ""


def test_an_error_in_the_block_propagates_and_stops_the_line() -> None:
    term = Terminal()
    with pytest.raises(RuntimeError, match="boom"), waiting("x", term, delay_s=0.0):
        raise RuntimeError("boom")


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_kernelbench(tmp_path_factory.mktemp("kb"))


def test_the_wrapper_shows_the_tool_on_the_terminal_and_not_in_the_observation(tree: Path, tmp_path: Path) -> None:
    def slow_build(task, solution):
        time.sleep(1.2)
        return ok_build(solution.format)

    term = Terminal()
    env = ShowProgress(make_env(tree, FakeJudge(build_fn=slow_build), workspace_dir=str(tmp_path)), term,
                       delay_s=0.1)
    try:
        env.reset(seed=0)
        env.step(act("write_file", path="model_new.py", content="import cuda_extension\n"))
        obs, _, _, _, info = env.step(act("compile"))
    finally:
        env.close()
    assert "compile: waiting for the judge  00:01" in term.getvalue()
    assert "waiting for the judge" not in obs and "waiting" not in str(info)


def test_draws_on_a_real_terminal_that_reports_no_size() -> None:
    import os
    import pty
    import subprocess
    import sys

    master, slave = pty.openpty()  # a fresh pty reports 0x0, as under `script` or some CI runners
    code = "import time\nfrom cudagym.progress import waiting\nwith waiting('building', delay_s=0.1):\n" \
           "    time.sleep(1.3)\n"
    try:
        done = subprocess.run([sys.executable, "-c", code], stderr=slave, stdout=subprocess.DEVNULL, timeout=120)
    finally:
        os.close(slave)
    drawn = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the other side is closed and everything was read
            break
        if not chunk:
            break
        drawn += chunk
    os.close(master)
    assert done.returncode == 0 and b"building  00:01" in drawn
