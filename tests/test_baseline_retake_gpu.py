"""A baseline's host hiccup on a real GPU, through LocalJudge: ``kernelbench-v0.5`` takes those rounds again,
``kernelbench-v0.4`` kept them (and its mean then credited the candidate).

The task's forward sleeps 20 ms on the host every eighth call: twice the longest cover the preset sizes (10 ms),
so in those calls the GPU waits for the host inside the baseline's timed region whatever the warm-up calls saw
(a warm-up that caught a sleep sizes the cover to its 10 ms cap; one that did not, to tens of microseconds).

    pytest -m gpu tests/test_baseline_retake_gpu.py -v -s
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cudagym.judge.baselines import reference_solution
from cudagym.judge.harness.runner import RETAKEN_NOTE
from cudagym.judge.interface import EvalMode
from cudagym.judge.protocol import get_protocol
from cudagym.judge.records import EvalStatus
from cudagym.task import make_task

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

HICCUP = '''
import time
import torch
import torch.nn as nn

_CALLS = [0]


@torch.compiler.disable
def _hiccup():
    _CALLS[0] += 1
    if _CALLS[0] % 8 == 0:
        time.sleep(0.020)


class Model(nn.Module):
    def forward(self, x):
        _hiccup()
        return torch.relu(x)


def get_inputs():
    return [torch.randn(4096, 4096)]


def get_init_inputs():
    return []
'''

QUICK = dict(guards=(), warmup_ms=0.0, min_runs=20, max_runs=20, target_ci_pct=0.0)


@needs_gpu
@pytest.mark.parametrize("version", ["kernelbench-v0.4", "kernelbench-v0.5"])
def test_a_baseline_host_hiccup_is_retaken_under_v05_and_kept_under_v04(tmp_path: Path, version: str) -> None:
    from cudagym.judge.local import LocalJudge, probe_gpus

    task = make_task(HICCUP, id=f"test/hiccup_{version[-3:]}", suite="test", level=1, name="hiccup", origin="test")
    protocol = get_protocol(version).with_changes(id=f"{version}-quick", **QUICK)
    with LocalJudge(protocol, devices=list(probe_gpus("auto").device_ids[:1]), cache_dir=tmp_path / "cache") as j:
        result = j.evaluate(task, reference_solution(task), EvalMode.SUBMIT)
    assert result.status is EvalStatus.OK, result.message + result.log[-3000:]
    eager = result.eager
    retaken = [n for n in result.notes if n.startswith(RETAKEN_NOTE)]
    print(f"{version}: eager median {eager.median_us:.1f} us, mean {eager.mean_us:.1f}, max {eager.max_us:.1f}; "
          f"candidate mean {result.candidate.mean_us:.1f}; {retaken or 'no retakes'}")
    if version == "kernelbench-v0.5":
        assert retaken and "eager" in retaken[0], result.log[-3000:]
        assert eager.max_us < eager.median_us + 1_000.0  # no sample holds the 5 ms sleep
    else:
        assert not retaken
        assert eager.max_us > eager.median_us + 3_000.0  # the sleeps are in its samples
