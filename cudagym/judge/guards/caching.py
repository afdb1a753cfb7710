"""result_cache: results may not be cached across calls (keyed on pointers, shapes or contents).

Three checks:

- a failed correctness input whose candidate output matches the reference output of an earlier input
  (within that reference's tolerance, the scaled one where the protocol scales it, on its leading elements),
  where that earlier reference differs from this input's, is a cache hit, not an ordinary bug;
- after correctness, the candidate runs twice on the same buffers with different contents copied in
  between: a cache keyed on addresses or shapes returns the first answer for the second input;
- every timed call gets a fresh input set, and the timed outputs are spot-checked against the reference
  (every round when the eager baseline is timed alongside; else every tenth round): a mismatch is flagged
  here (a cache or a behaviour change after warm-up).
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

from cudagym.judge.guards.base import Guard, register

if TYPE_CHECKING:  # pragma: no cover
    from cudagym.judge.harness.context import CheckRecord, EvalContext
    from cudagym.judge.harness.correctness import Tolerance

FINGERPRINT = 4096  # leading elements of each output remembered per input


@register
class ResultCache(Guard):
    """Results cached across calls instead of computed for the input at hand."""

    name = "result_cache"
    summary = "compute every call's result from its inputs: no caching across calls"

    def __init__(self) -> None:
        # (seed, leading elements of each output, each output's tolerance)
        self._references: list[tuple[int, list[Any], list[Tolerance]]] = []

    def on_check(self, ctx: EvalContext, record: CheckRecord) -> None:
        """A failed output equal to an earlier input's reference output, where the two references differ.

        Each reference is matched under its own tolerance, as correctness matched it: under a scaled ``atol``
        a memset fails a tiny reference, and the plain ``atol`` would find the same zeros "equal" to every
        earlier reference (a wrong output called a cached one).
        """
        from cudagym.judge.harness.inputs import tensors_in

        tensors = tensors_in(record.reference)
        refs = [_lead(t) for t in tensors]
        tolerances = [ctx.tolerance.for_reference(t) for t in tensors]
        if not record.check.passed:
            outs = [_lead(t) for t in tensors_in(record.outputs)]
            for seed, earlier, earlier_tol in self._references:
                if (seed != record.seed and _close(outs, earlier, earlier_tol)
                        and not _close(refs, earlier, earlier_tol)):
                    ctx.flag(self.name, f"the output for seed {record.seed} is the reference output of seed "
                             f"{seed}: a result cached from an earlier call")
                    break
        self._references.append((record.seed, refs, tolerances))

    def after_correctness(self, ctx: EvalContext) -> None:
        """Same buffers, new contents: the output must change with them."""
        from cudagym.judge.harness.correctness import compare_outputs
        from cudagym.judge.harness.inputs import tensors_in

        first = ctx.make_inputs(secrets.randbelow(2**31 - 1))
        ctx.run_candidate(first, "result_cache")
        second_seed = secrets.randbelow(2**31 - 1)
        second = ctx.make_inputs(second_seed)
        if [t.shape for t in tensors_in(first)] != [t.shape for t in tensors_in(second)]:
            return  # inputs of varying shapes: nothing to reuse
        if ctx.remote is None:  # the candidate's buffers are this process's tensors: new contents, same addresses
            _refill(first, second)
            outputs = ctx.run_candidate(first, "result_cache")
            del first  # before the reference runs on the pristine set: one input set beside it, not two
        else:  # the split: the buffers are the runner's input arena, which the next call refills in place
            del first  # (bounded memory: one input set beside the arena, not two)
            outputs = ctx.run_candidate(second, "result_cache")
        reference = ctx.run_reference(second)
        check = compare_outputs(reference, outputs, ctx.tolerance, seed=second_seed)
        if not check.passed:
            ctx.flag(self.name, "called again on the same input buffers holding new values, the candidate "
                     f"returned a wrong result ({check.message}): a result cached by address or shape")

    def after_timing(self, ctx: EvalContext) -> None:
        """Timed calls whose outputs did not match the reference."""
        if ctx.spot_failures:
            ctx.flag(self.name, f"{len(ctx.spot_failures)} spot check(s) of timed calls failed; first: "
                     f"{ctx.spot_failures[0]}")


def _refill(buffers: list[Any], values: list[Any]) -> None:
    """Copy the tensors of ``values`` into those of ``buffers``.

    A function of its own: no loop variable outlives it holding a tensor of ``buffers``, which kept that whole
    input set alive beside the reference's run (one input set more than the bound).
    """
    from cudagym.judge.harness.inputs import tensors_in

    for buffer, value in zip(tensors_in(buffers), tensors_in(values), strict=True):
        buffer.copy_(value)


def _lead(tensor: Any) -> Any:
    return tensor.detach().reshape(-1)[:FINGERPRINT].double().cpu()


def _close(a: list[Any], b: list[Any], tolerances: list[Tolerance]) -> bool:
    """Whether every tensor of ``a`` matches its counterpart of ``b`` (a reference) under that one's tolerance."""
    import torch

    if not a or len(a) != len(b):
        return False
    return all(x.shape == y.shape and bool(torch.allclose(x, y, atol=tol.atol, rtol=tol.rtol))
               for x, y, tol in zip(a, b, tolerances, strict=True))
