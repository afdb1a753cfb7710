"""Every bundled solution judged as an agent's would be: through LocalJudge, the split and its runner, under SUBMIT.

The in-process suite (``test_guards_gpu.py``) has no runner, so none of the split's timing rules judges it: the
GPU bracket around each timed call, the on-time charge (a claim short of the judge's clock by more than
:func:`~cudagym.judge.split.remote.on_time_allowance_us` counts the clock) and the speedups against the reference
timed in the runner. Honest candidates must keep their claims and their tier under all of them; each task's notes
on how far the clock ran past the claims, the candidate's and the reference's, are printed (the allowance's
measure). A series of calls back to back would floor a claim too, but the bundled tasks' input and output sets are
too large for a series of two (``SERIES_ARENA_BYTES``): white-box 33 and 34 test it on a tiny kernel.

``CUDAGYM_BUNDLED_PROTOCOL`` names another protocol to judge them under (``cudagym[delivery=copy]``: the copy
delivery, to compare against the default's heap).
"""

from __future__ import annotations

import os
import time
from concurrent.futures import Future, as_completed

import pytest

from cudagym.judge.harness.claims import ON_TIME_CHARGE_NOTE, SERIES_NOTE, SHOWN_SPREAD_NOTE
from cudagym.judge.interface import EvalMode
from cudagym.judge.local import LocalJudge, probe_gpus
from cudagym.judge.protocol import DEFAULT_PROTOCOL, get_protocol
from cudagym.judge.records import EvalResult, EvalStatus
from cudagym.sources.bundled import BundledSource

pytestmark = pytest.mark.gpu

SOURCE = BundledSource()
IDS = SOURCE.ids()
PROTOCOL = get_protocol(os.environ.get("CUDAGYM_BUNDLED_PROTOCOL") or DEFAULT_PROTOCOL)


@pytest.fixture(scope="module")
def verdicts() -> dict[str, EvalResult]:
    """All bundled solutions submitted at once (the judge's lanes take them in turn), their verdicts by task.

    Each verdict is printed as it arrives, with the seconds since the first submission and its violations: a run
    cut short by its step's limit still shows which tasks were judged, how, and how long each took to come back
    (printed from the future's callback: ``submit`` itself waits while the judge holds as many jobs as a client may
    queue, so a loop over the futures would start only once the last one was handed over).
    """
    start = time.perf_counter()
    arrived: list[str] = []

    def show(task_id: str, future: Future[EvalResult]) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        result = future.result()
        arrived.append(task_id)
        rules = ", ".join(v.guard for v in result.violations) or "none"
        print(f"[{time.perf_counter() - start:6.1f} s] {len(arrived)}/{len(IDS)} {task_id}: {result.status.value}, "
              f"violations: {rules}; {result.message[:160]}", flush=True)

    with LocalJudge(PROTOCOL, devices=list(probe_gpus("auto").device_ids[:1])) as judge:
        futures: dict[Future[EvalResult], str] = {}
        for task_id in IDS:
            future = judge.submit(SOURCE.get(task_id), SOURCE.solution(task_id), EvalMode.SUBMIT)
            future.add_done_callback(lambda f, t=task_id: show(t, f))
            futures[future] = task_id
        return {futures[future]: future.result() for future in as_completed(futures)}


@pytest.mark.parametrize("task_id", IDS)
def test_a_bundled_solution_keeps_its_claims_and_its_tier_through_the_split(verdicts, task_id) -> None:
    result = verdicts[task_id]
    assert result.status is EvalStatus.OK, f"{task_id}: {result.message[:1500]}\n{result.log[-3000:]}"
    assert result.violations == ()
    assert "made by the trusted process" in result.log
    if PROTOCOL.extra.get("delivery", "heap") == "heap":  # the runner copied nothing it forgave
        assert "outputs read from the heap shared with the runner" in result.log
    for line in result.log.splitlines():
        if line.startswith("the runner's heap:"):  # its own word: outputs it moved into the reserve, in their time
            print(f"{task_id}: {line}")
    series = [n for n in result.notes if n.startswith(SERIES_NOTE)]
    print(f"{task_id}: {result.candidate.median_us:.1f} us, {result.speedup_vs_eager:.2f}x eager, "
          f"{result.speedup_vs_compile:.2f}x compile; {series[0] if series else 'no series read'}")
    for note in result.notes:  # how far the judge's clock and honest claims part (the on-time allowance's measure)
        if note.startswith((SHOWN_SPREAD_NOTE, ON_TIME_CHARGE_NOTE)):
            print(f"{task_id}: {note}")
    assert not any("each counts at least" in n for n in series), series  # an honest claim stands as it was
    assert result.speedup_vs_eager > 1.05, f"{task_id}: a bundled solution must earn tier 2 or 3"
