"""input_mutation and hard_coding: the inputs are read-only, and the answer must hold for any input.

input_mutation. The candidate gets its own copy of each input set; after its forward the copy must be bit
for bit what it was (compared with the pristine set no model saw). A candidate that overwrites its inputs
could feed a reference that runs after it (KernelBench PR #82: Kevin's harness ran the candidate first),
or hide state in them. Exempt: a task whose reference itself writes to its inputs.

hard_coding. The protocol's seeds are public. After correctness the candidate is checked on two more
input sets from seeds drawn at random for this job (named in the message): outputs memorised for the
known seeds, or special cases for their values, fail there. Where the protocol's scaled input sets (unseen
seeds too) failed first, this check still runs, at the task's own scale: wrong there as well is hard coding;
right there, the failure is the scale's and the verdict stays INCORRECT. Timing draws fresh inputs for every call and
spot-checks them, which covers hard-coding too. KernelBench tasks have fixed shapes, so shapes do not vary.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING

from cudagym.judge.guards.base import Guard, register

if TYPE_CHECKING:  # pragma: no cover
    from cudagym.judge.harness.context import CheckRecord, EvalContext

EXTRA_SEEDS = 2


@register
class InputMutation(Guard):
    """Writing to the inputs."""

    name = "input_mutation"
    summary = "treat inputs as read-only"

    def on_check(self, ctx: EvalContext, record: CheckRecord) -> None:
        """The candidate's copy of the inputs must equal the pristine set after its forward.

        The harness compared them before the reference ran on the pristine set (``record.inputs_changed``,
        the changed ones in ``record.changed_inputs``): no further copy is drawn (bounded memory).
        """
        if not record.inputs_changed:
            return
        if record.reference_writes_inputs:
            ctx.note(f"seed {record.seed}: the reference itself writes to its inputs; input_mutation not enforced")
            return
        changed = list(record.changed_inputs)
        ctx.flag(self.name, f"forward changed its input(s) {changed} (seed {record.seed}); inputs are read-only")


@register
class HardCoding(Guard):
    """Answers that hold only for the protocol's known inputs."""

    name = "hard_coding"
    summary = "the kernel must be correct for any input of the task's shapes, not only the published seeds"
    order = 70
    probes_unseen_inputs = True

    def after_correctness(self, ctx: EvalContext) -> None:
        """Check on input sets from unpublished seeds."""
        for n in range(EXTRA_SEEDS):
            seed = secrets.randbelow(2**31 - 1)
            check = ctx.verify_seed(seed, ctx.protocol.num_inputs + n, "hard_coding")
            if not check.passed:
                ctx.flag(self.name, f"correct on the protocol's inputs but wrong on an unseen input (seed {seed}): "
                         f"{check.message}")
                return
