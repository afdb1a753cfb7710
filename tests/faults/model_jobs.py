"""Stand-in for the harness that, like it, imports torch when the worker starts (so workers come up warm)."""

from __future__ import annotations

import torch
from jobs import _load_candidate, _result

from cudagym.judge.job import Job
from cudagym.judge.records import EvalResult, EvalStatus


def run_model(job: Job) -> EvalResult:
    """A CPU mini-harness: build Model and ModelNew, run both on one input, compare."""
    reference: dict = {}
    exec(compile(job.task.source, "reference.py", "exec"), reference)
    try:
        candidate = _load_candidate(job)
        torch.manual_seed(job.protocol.seed)
        inputs = reference["get_inputs"]()
        init = reference["get_init_inputs"]()
        expected = reference["Model"](*init)(*inputs)
        out = candidate.ModelNew(*init)(*inputs)
    except Exception as exc:
        return _result(job, EvalStatus.RUNTIME_ERROR, f"{type(exc).__name__}: {exc}")
    ok = torch.allclose(out, expected, atol=job.protocol.atol, rtol=job.protocol.rtol)
    return _result(job, EvalStatus.OK if ok else EvalStatus.INCORRECT, "matched" if ok else "mismatch")
