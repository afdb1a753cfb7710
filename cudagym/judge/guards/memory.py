"""stale_memory: the candidate must compute its outputs, not return memory that earlier results left behind.

The Sakana AI CUDA Engineer's "150x" kernel allocated its output and returned it unwritten: the memory
still held the reference's answer from the run just before. The harness closes the hole by construction
(the candidate runs before the reference on each input; reference and baseline results are overwritten
with a poison pattern before they are freed; free allocator blocks are scrubbed with the pattern before
each audited forward; see :mod:`cudagym.judge.harness.scrub`). This guard names the exploit: an output
holding the poison pattern (a signalling NaN with a payload no arithmetic produces) was never written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cudagym.judge.guards.base import Guard, register

if TYPE_CHECKING:  # pragma: no cover
    from cudagym.judge.harness.context import CheckRecord, EvalContext

# Float patterns are NaN payloads no kernel computes: one element is proof. An integer pattern is a
# legitimate value, so integer outputs need a share of them.
INTEGER_SHARE = 0.01


@register
class StaleMemory(Guard):
    """Outputs that were never written and hold whatever the memory held before."""

    name = "stale_memory"
    summary = "write every output element; never return uninitialised memory"

    def on_check(self, ctx: EvalContext, record: CheckRecord) -> None:
        """Count the poison pattern in the candidate's outputs."""
        from cudagym.judge.harness.inputs import poison_count, tensors_in

        for i, out in enumerate(tensors_in(record.outputs)):
            count = poison_count(out)
            if not count:
                continue
            if out.is_floating_point() or count >= INTEGER_SHARE * out.numel():
                ctx.flag(self.name, f"output {i} holds {count} of {out.numel()} elements of the judge's poison "
                         "pattern: memory the candidate returned without writing it (seed "
                         f"{record.seed})")
