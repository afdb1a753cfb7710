"""Progress on the terminal during long waits (a build, the judge starting): an elapsed-time line on stderr.

Only people watching a terminal see it: the line is drawn by :mod:`tqdm` on ``stderr`` when that is a
terminal, after a short delay (quick steps draw nothing), and erased when the wait ends. It never reaches an
observation, ``info`` or stdout, so it changes nothing an agent or a log parser reads.

>>> with waiting("compile: building"):  # doctest: +SKIP
...     env.step(action)
compile: building  12s
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any, SupportsFloat, TextIO

import gymnasium as gym

DEFAULT_DELAY_S = 1.0
REFRESH_S = 0.5


@contextlib.contextmanager
def waiting(label: str, stream: TextIO | None = None, *, delay_s: float = DEFAULT_DELAY_S) -> Iterator[None]:
    """Show ``label`` and the elapsed seconds on ``stream`` (stderr) while the block runs.

    Args:
        label: What is being waited for.
        stream: Where to draw; default ``sys.stderr``. Nothing is drawn unless it is a terminal.
        delay_s: Draw only once the wait has lasted this long.
    """
    stream = stream if stream is not None else sys.stderr
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm is a dependency; a stripped install just shows no progress
        yield
        return
    # disable=None: off when the stream is not a terminal. The size from shutil, which falls back to 80x24
    # where the terminal reports none (a pty without a size: tqdm's own guess, -1 rows, draws nothing).
    size = shutil.get_terminal_size()
    bar = tqdm(total=None, desc=label, bar_format="{desc}  {elapsed}", file=stream, delay=delay_s, leave=False,
               disable=None, ncols=size.columns, nrows=size.lines)
    done = threading.Event()

    def tick() -> None:
        while not done.wait(REFRESH_S):
            bar.refresh()  # no iterations to count: redraw so the elapsed time moves

    ticker = threading.Thread(target=tick, name="cudagym-progress", daemon=True)
    start = time.monotonic()
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join()
        if not bar.disable and time.monotonic() - start >= delay_s:
            bar.clear()  # drawn by refresh() alone, which close() does not count as drawn: erase it here
        bar.close()


class ShowProgress(gym.Wrapper[str, str, str, str]):
    """Shows an elapsed-time line on the terminal while ``reset`` or ``step`` takes long (builds, the judge).

    Args:
        env: A cudagym env (or a wrapper of one).
        stream: Where to draw; default ``sys.stderr`` (nothing is drawn unless it is a terminal).
        delay_s: Draw only for waits longer than this.
    """

    def __init__(self, env: gym.Env[str, str], stream: TextIO | None = None, *,
                 delay_s: float = DEFAULT_DELAY_S) -> None:
        super().__init__(env)
        self._stream = stream
        self._delay_s = delay_s

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Reset, showing progress while the task loads and the judge starts."""
        with waiting("reset: loading the task and starting the judge", self._stream, delay_s=self._delay_s):
            return self.env.reset(seed=seed, options=options)

    def step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step, showing which tool call is running and for how long."""
        with waiting(f"{_tool_of(action)}: waiting for the judge", self._stream, delay_s=self._delay_s):
            return self.env.step(action)


def _tool_of(action: str) -> str:
    from cudagym.toolcalls import ToolCall, parse_action

    call = parse_action(action)
    return call.name if isinstance(call, ToolCall) else "step"


__all__ = ["ShowProgress", "waiting"]
