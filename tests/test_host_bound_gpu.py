"""A host-bound forward through LocalJudge on a real GPU: how long the split waits for the runner to queue a call.

The trust split times a candidate's call on the GPU between the judge's go and the runner's done; the runner queues
the whole call before the go, so only device work is timed, unless queueing takes longer than the judge waits
(``Protocol.arm_wait_ms``): then the go is given anyway and the call runs behind its host. Under ``cudagym-v4``
(5 ms) on the H200 (session 21) ``L3/30_SwinTransformerV2``'s reference, judged as its own candidate, came to
0.767x eager that way: its busy GPU time was 0.367x its timed median, and its time in the runner moved between
11.7 and 15.3 ms.

Here the forward launches 400 tiny kernels with 25 µs of host work before each (about 15 ms to queue on the H200
host, about 0.8 ms of device work). Under ``cudagym-v4`` it is timed behind its host; under ``cudagym-v5`` (250 ms)
the runner queues it in full first and it is timed at its device work (session 22: 10,161 against 762 µs). A
forward that waits for the GPU inside cannot be queued in full: it waits the long wait once, then 5 ms a call,
the result says how many of its calls were late, and those calls, the reference's in the runner as the candidate's,
are timed by the judge's GPU clock (their bracket less an empty call's cost), so a forged claim gains nothing.

    pytest -m gpu tests/test_host_bound_gpu.py -v -s
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_split_gpu import FORGE_TIMER  # the runner's timer patched to claim a twentieth of each call

from cudagym.judge.baselines import reference_solution
from cudagym.judge.harness.claims import LATE_CHARGE_NOTE, REQUEST_PARTS_NOTE, UNQUEUED_NOTE
from cudagym.judge.interface import EvalMode
from cudagym.judge.protocol import get_protocol
from cudagym.judge.records import EvalResult, EvalStatus
from cudagym.solution import Solution
from cudagym.task import Task, make_task

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

HOST_BOUND = '''
import time
import torch
import torch.nn as nn

LAUNCHES = 400
HOST_US = 25.0


class Model(nn.Module):
    @torch.compiler.disable
    def forward(self, x):
        for _ in range(LAUNCHES):
            t = time.perf_counter()
            while (time.perf_counter() - t) * 1e6 < HOST_US:
                pass
            x = x + 1.0
        return x


def get_inputs():
    return [torch.randn(256)]


def get_init_inputs():
    return []
'''

SYNCS_INSIDE = HOST_BOUND.replace("            x = x + 1.0\n", "            x = x + 1.0\n"
                                  "            if _ == LAUNCHES // 2:\n"
                                  "                x = x + float(x.sum().item()) * 0.0\n").replace("400", "40")

QUICK = dict(guards=(), warmup_ms=0.0, min_runs=30, max_runs=30, target_ci_pct=0.0)


def _task(name: str, source: str) -> Task:
    return make_task(source, id=f"test/host_bound_{name}", suite="test", level=1, name="host_bound", origin="test")


def _judge(tmp_path: Path, spec: str, name: str, source: str = HOST_BOUND, ok: bool = True,
           candidate: Solution | None = None) -> EvalResult:
    from cudagym.judge.local import LocalJudge, probe_gpus

    base = get_protocol(spec)
    protocol = base.with_changes(id=f"{base.id}-quick", **QUICK)
    task = _task(name, source)
    with LocalJudge(protocol, devices=list(probe_gpus("auto").device_ids[:1]), cache_dir=tmp_path / name) as judge:
        result = judge.evaluate(task, candidate or reference_solution(task), EvalMode.SUBMIT)
    if ok:
        assert result.status is EvalStatus.OK, result.message + result.log[-3000:]
    parts = next((n for n in result.notes if n.startswith(REQUEST_PARTS_NOTE)), "")
    late = next((n for n in result.notes if n.startswith(UNQUEUED_NOTE)), "no call late")
    print(f"{protocol.id}: candidate {result.candidate.median_us:.1f} us, runner's reference "
          f"{result.runner_reference.median_us:.1f} us, eager {result.eager.median_us:.1f} us, "
          f"{result.speedup_vs_eager:.3f}x vs eager, {result.status.value}, wall {result.wall_time_s:.1f} s\n"
          f"  {parts}\n  {late}")
    return result


@needs_gpu
def test_a_call_queued_in_full_before_the_go_is_timed_at_its_device_work(tmp_path: Path) -> None:
    behind = _judge(tmp_path, "cudagym-v4", "behind")
    queued = _judge(tmp_path, "cudagym", "queued")
    assert get_protocol("cudagym").arm_wait_ms == 250.0
    # 10-15 ms of host work a call: with 5 ms to queue it, most of it is timed; with 250 ms, none of it
    assert behind.candidate.median_us > 3000, behind.log[-3000:]
    assert queued.candidate.median_us < 0.5 * behind.candidate.median_us, queued.log[-3000:]
    assert any(n.startswith(UNQUEUED_NOTE) for n in behind.notes), behind.notes
    assert not any(n.startswith(UNQUEUED_NOTE) for n in queued.notes), queued.notes
    # the yardstick is timed the same way in each; queued in full, the same code is as fast as eager, behind its
    # host it moves with the host's speed at the time (session 22: 0.927x)
    assert 0.9 < queued.speedup_vs_eager < 1.1, queued.log[-3000:]
    assert 0.75 < behind.speedup_vs_eager < 1.33, behind.log[-3000:]


@needs_gpu
def test_a_reference_whose_host_outlasts_any_cover_is_not_timed_in_batches(tmp_path: Path) -> None:
    # 15 ms of host a call against a 2 ms cover at most: batched behind a cover its samples would hold host time,
    # so each call stays a request of its own, queued in full before its go, and timed at its device work
    queued = _judge(tmp_path, "cudagym[runner_reference_batch=10]", "queued_batch")
    assert not any("timed in the runner's own loop" in n for n in queued.notes), queued.notes
    assert 0.9 < queued.speedup_vs_eager < 1.1, queued.log[-3000:]


@pytest.fixture(scope="module")
def syncs_inside(tmp_path_factory: pytest.TempPathFactory) -> EvalResult:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    return _judge(tmp_path_factory.mktemp("syncs"), "cudagym", "syncs", SYNCS_INSIDE, ok=False)


@needs_gpu
def test_a_forward_that_waits_for_the_gpu_inside_pays_the_long_wait_once(syncs_inside: EvalResult) -> None:
    late = next(n for n in syncs_inside.notes if n.startswith(UNQUEUED_NOTE))
    counts = {kind: (int(a), int(b)) for kind, a, b in re.findall(r"(\w+) (\d+) of (\d+)", late)}
    # every call of it is late (it cannot finish queueing before the go); only the first of a kind waits 250 ms
    assert counts and all(a == b for a, b in counts.values()), late
    assert "waited 250 ms for the first, 5 ms after" in late, late


@needs_gpu
def test_a_forward_that_waits_for_the_gpu_inside_is_timed_by_the_judges_clock(syncs_inside: EvalResult) -> None:
    # its bracket holds the runner's delivery, queued by its host after the forward returns: no claim of its calls is
    # judged by that gap (session 22: 139.1 us beyond the claim and an empty call's cost read as unverifiable_timing);
    # each call, the reference's in the runner as the candidate's, counts at its bracket less an empty call's cost
    assert syncs_inside.status is EvalStatus.OK, syncs_inside.message + syncs_inside.log[-3000:]
    charged = next(n for n in syncs_inside.notes if n.startswith(LATE_CHARGE_NOTE))
    print(charged)
    counted, claimed = _late(charged, "timed")
    assert counted >= claimed and _late(charged, "reference")[0] >= _late(charged, "reference")[1], charged
    # where the count beyond the claims went, by the runner's account of its delivery after each forward
    # (session 25: reference 512.4 us on the GPU's clock, 268.9 us of host time), and the host time's parts
    assert re.search(r"the runner says its delivery after the forward .* took reference [\d.]+ us on the GPU's "
                     r"clock, [\d.]+ us of host time \(the outputs queued [\d.]+ us, done [\d.]+ us, armed [\d.]+ us "
                     r"of it\); timed [\d.]+ us", charged), charged
    # the same code as the reference, timed the same way in the same runner: the two are charged alike
    # (session 24: 1,230.2 us against the runner's reference's 1,152.4 us, 0.937x)
    assert syncs_inside.runner_reference is not None, syncs_inside.log[-3000:]
    alike = syncs_inside.runner_reference.median_us / syncs_inside.candidate.median_us
    assert 0.8 < alike < 1.25, syncs_inside.log[-3000:]
    # against eager in the judge's own process (the yardstick may lower the speedups, not raise them, where its
    # calls were late) it pays the late path: the GPU's wait for the runner's host after the go and after the forward
    # returns (session 24: 0.681x, with the runner's reference at 1.376x eager's time; session 23, before that wait
    # was charged: 0.932x)
    assert 0.5 < syncs_inside.speedup_vs_eager < 1.25, syncs_inside.log[-3000:]


def _late(note: str, kind: str) -> tuple[float, float]:
    """A late-charge note's median count and median claim for ``kind`` (µs)."""
    found = re.search(kind + r" \d+ call\(s\), median ([\d.]+) us against a median claim of ([\d.]+) us", note)
    assert found, note
    return float(found.group(1)), float(found.group(2))


@needs_gpu
def test_a_late_forward_that_forges_its_claims_is_charged_what_the_clock_saw(syncs_inside: EvalResult,
                                                                              tmp_path: Path) -> None:
    forged = _judge(tmp_path, "cudagym", "forged", SYNCS_INSIDE, ok=False,
                    candidate=Solution("raw", {**reference_solution(_task("syncs", SYNCS_INSIDE)).files,
                                               "model_new.py": f"{SYNCS_INSIDE.rstrip()}\n\n\nModelNew = Model\n"
                                                               f"{FORGE_TIMER}"}))
    charged = next(n for n in forged.notes if n.startswith(LATE_CHARGE_NOTE))
    print(charged)
    claim = _late(charged, "timed")[1]
    # claimed at a twentieth, counted at what the judge's clock saw: no faster than the same code's reference timed
    # in its own runner before it loaded, give or take (a host-bound forward's time moves from one job to the next:
    # session 24, the honest job's reference 1,152.4 us, the forger's 1,075.0 us; the forger counted 985.8 us)
    assert claim < 0.2 * syncs_inside.candidate.median_us, charged
    if forged.status is EvalStatus.OK:
        assert forged.runner_reference is not None, forged.log[-3000:]
        assert forged.candidate.median_us > 0.8 * forged.runner_reference.median_us, forged.log[-3000:]
        assert forged.speedup_vs_eager < 1.25 * max(syncs_inside.speedup_vs_eager, forged.eager.median_us
                                                    / forged.runner_reference.median_us), forged.log[-3000:]
    else:  # a claim check may still catch it on a call that was on time: then by its name
        assert {v.guard for v in forged.violations} == {"unverifiable_timing"}, forged.message
