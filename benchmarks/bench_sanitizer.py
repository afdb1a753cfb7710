"""What the compute-sanitizer gates cost a SUBMIT (issue 13): p50 with the gates off and on, bundled tasks, H200.

The gated protocol is the default with ``sanitizer=("memcheck", "initcheck")``: after the usual SUBMIT (checks,
interleaved timing, profile), one sanitized runner per tool, both at once, runs the correctness inputs under
the tool. Builds and baselines are cached first (one PROFILE per task), so the rounds time the evaluation.
Run on the GPU host, with nothing else on it::

    pytest benchmarks/bench_sanitizer.py --benchmark-only -s --benchmark-columns=min,median,max,rounds

Each gate's own wall time (from the result's notes) goes to ``benchmark.extra_info`` and is printed.
"""

from __future__ import annotations

import os
import re

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

from cudagym.judge import EvalMode  # noqa: E402
from cudagym.judge.local import LocalJudge, probe_gpus  # noqa: E402
from cudagym.judge.pipeline import PipelineJudge  # noqa: E402
from cudagym.judge.protocol import DEFAULT_PROTOCOL  # noqa: E402
from cudagym.judge.records import EvalStatus  # noqa: E402
from cudagym.sources.bundled import BundledSource  # noqa: E402

TASKS = ["bundled/L1/01_Swish", "bundled/L1/05_Softmax"]
GATED = DEFAULT_PROTOCOL.with_changes(id="cudagym-v2-sanitized", sanitizer=("memcheck", "initcheck"))
ROUNDS = {"off": int(os.environ.get("CUDAGYM_BENCH_ROUNDS_OFF", "3")),
          "on": int(os.environ.get("CUDAGYM_BENCH_ROUNDS_ON", "2"))}
GATE_NOTE = re.compile(r"^compute-sanitizer (\w+): no errors .*\(([\d.]+) s\)$")


@pytest.fixture(scope="module")
def bundled() -> BundledSource:
    return BundledSource()


@pytest.fixture(scope="module")
def judges(bundled):
    with LocalJudge(DEFAULT_PROTOCOL, devices=list(probe_gpus("auto").device_ids[:1])) as off, \
            PipelineJudge(GATED, off.pipeline) as on:
        builds = [off.pipeline.builds.build(bundled.get(t), bundled.solution(t), off.protocol) for t in TASKS]
        assert all(b.result().ok for b in builds), [b.result().message for b in builds]  # built side by side
        yield {"off": off, "on": on}


@pytest.fixture(scope="module")
def warmed() -> set[str]:
    return set()  # the tasks whose baselines are cached


@pytest.mark.parametrize("gates", ["off", "on"])
@pytest.mark.parametrize("task_id", TASKS)
def test_submit_latency_with_gates(benchmark, judges, warmed, bundled, task_id, gates):
    task, solution = bundled.get(task_id), bundled.solution(task_id)
    if task_id not in warmed:  # the baselines timed and cached once, by a PROFILE without gates
        first = judges["off"].evaluate(task, solution, EvalMode.PROFILE)
        assert first.correct, first.message
        warmed.add(task_id)
    result = benchmark.pedantic(judges[gates].evaluate, args=(task, solution, EvalMode.SUBMIT),
                                rounds=ROUNDS[gates], iterations=1)
    assert result.status is EvalStatus.OK and not result.violations, result.message + result.log[-2000:]
    gate_s = {m.group(1): float(m.group(2)) for n in result.notes if (m := GATE_NOTE.match(n))}
    assert set(gate_s) == (set(GATED.sanitizer) if gates == "on" else set()), result.notes
    stats = benchmark.stats.stats
    benchmark.extra_info.update(task=task_id, gates=gates, gate_s=gate_s, p50_s=stats.median,
                                speedup_vs_eager=result.speedup_vs_eager)
    print(f"\n{task_id} gates {gates}: SUBMIT p50 {stats.median:.2f} s over {stats.rounds} rounds "
          f"(min {stats.min:.2f}, max {stats.max:.2f})"
          + (f"; last round's gates: {', '.join(f'{k} {v:.1f} s' for k, v in gate_s.items())}" if gate_s else "")
          + f"; speedup vs eager {result.speedup_vs_eager:.2f}x")
