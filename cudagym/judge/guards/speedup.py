"""suspicious_speedup: a very large speedup is re-verified before it is accepted.

A speedup over eager above the threshold (10x by default; ``protocol.extra["suspicious_speedup_x"]``)
is rarely real on an fp32 task (KernelBench EVAL.md: "a >2x speedup for anything is highly unlikely").
It triggers, before acceptance:

- a correctness check on more inputs from unpublished seeds (``max(5, num_inputs)`` of them), with every
  output guard running on each;
- a consistency check of the timing (CUDA events timer): the candidate's per-forward GPU kernel time from
  the profiler may not exceed twice its event-timed median, i.e. the events must have seen the work.

The log notes a re-verified speedup either way.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING

from cudagym.judge.guards.base import Guard, register

if TYPE_CHECKING:  # pragma: no cover
    from cudagym.judge.harness.context import EvalContext

DEFAULT_THRESHOLD_X = 10.0
KERNEL_OVER_EVENT_MAX = 2.0


@register
class SuspiciousSpeedup(Guard):
    """Speedups above the threshold are re-verified on more inputs and against the profiler."""

    name = "suspicious_speedup"
    summary = "speedups above 10x vs eager are re-verified on extra inputs before they count"
    order = 95

    def after_timing(self, ctx: EvalContext) -> None:
        """Re-verify when the speedup vs eager passes the threshold."""
        threshold = float(ctx.protocol.extra.get("suspicious_speedup_x", DEFAULT_THRESHOLD_X))
        if ctx.speedup_vs_eager <= threshold:
            return
        extra = max(5, ctx.protocol.num_inputs)
        for n in range(extra):
            seed = secrets.randbelow(2**31 - 1)
            check = ctx.verify_seed(seed, 1000 + n, "suspicious_speedup")
            if not check.passed:
                ctx.flag(self.name, f"{ctx.speedup_vs_eager:.1f}x vs eager, but wrong on an extra input (seed "
                         f"{seed}): {check.message}")
                return
        self._check_profile(ctx)
        ctx.note(f"suspicious_speedup: {ctx.speedup_vs_eager:.1f}x vs eager re-verified on {extra} extra inputs")

    def _check_profile(self, ctx: EvalContext) -> None:
        if not ctx.on_gpu or ctx.protocol.timing != "cuda_events":
            return
        cand = ctx.timed.get("candidate")
        if cand is None or not cand.measured:
            return
        kernel_us = ctx.kernel_profile().busy_per_forward_us  # overlapping kernels counted once
        if kernel_us > KERNEL_OVER_EVENT_MAX * cand.median_us:
            ctx.flag(self.name, f"the profiler saw {kernel_us:.1f} us of GPU work per forward but the timed "
                     f"median is {cand.median_us:.1f} us: the timing did not see the work")
