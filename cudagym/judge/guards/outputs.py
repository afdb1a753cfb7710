"""lazy_output and degenerate_output: outputs must be real, owned, and follow the reference's variation.

lazy_output. An output must be a plain ``torch.Tensor`` (a subclass can compute on access or lie about its
values), on a real device (not ``meta``), and own its memory: it may not alias the candidate's inputs,
another output or the model's weights (its ``state_dict``), unless the reference's output does the same (a view task).
Static: subclassing ``torch.Tensor``, ``_make_subclass``, ``as_subclass``, ``__torch_function__`` and
``__torch_dispatch__`` in ``model_new.py``.

degenerate_output. A tolerance can pass an output that ignores the input: all zeros where the reference's
values are all below ``atol`` (KernelBench issue #165: softmax over 393216 columns), or the same output
for every input. Two checks on outputs that passed the tolerance:

- within one output: when the reference varies (its standard deviation is above 1e-3 of its largest
  magnitude, so the variation is not rounding noise), the candidate's RMS error must stay under 10% of that
  standard deviation. An honest fp32 kernel's error is ~1e-6 of it; a constant output's is ~100%;
- across inputs: the candidate's outputs for different seeds must not be bit-identical where the
  reference's differ beyond the tolerance.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from cudagym.judge.guards.base import Guard, register
from cudagym.judge.guards.source_scan import PYTHON_FILE, dotted, import_aliases, parse_python, resolve

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from cudagym.judge.harness.context import CheckRecord, EvalContext, ForwardCall

SPREAD_MIN = 1e-3  # reference std / max|reference| below this: its variation is noise, skip the check
ERROR_OVER_SPREAD = 0.1  # candidate RMS error / reference std above this: the output ignores the input
FINGERPRINT = 256  # leading elements compared across inputs
LAZY_NAMES = frozenset({"_make_subclass", "as_subclass", "__torch_function__", "__torch_dispatch__"})


@register
class LazyOutput(Guard):
    """Outputs that are tensor subclasses, not materialised, or alias inputs, each other or weights."""

    name = "lazy_output"
    summary = "return plain, materialised tensors that own their memory"

    def check_sources(self, ctx: EvalContext) -> None:
        """Flag tensor subclassing in model_new.py."""
        tree = parse_python(ctx.sources.get(PYTHON_FILE, ""))
        if tree is not None:
            self.flag_findings(ctx, list(_static_findings(tree)))

    def after_forward(self, ctx: EvalContext, call: ForwardCall) -> None:
        """In the split's runner: the same checks on the outputs as the candidate returned them.

        (The trusted side only ever sees plain tensors it rebuilt from bytes; whether the reference's own
        outputs alias comes from it, in ``ctx.reference_aliases``.)
        """
        if ctx.side != "runner":
            return
        from cudagym.judge.harness.inputs import tensors_in

        outputs = tensors_in(call.outputs)
        if not self._plain(ctx, outputs):
            return
        assert ctx.cand_model is not None
        facts = ctx.reference_aliases
        if _aliases(outputs, tensors_in(call.args)) and not facts.get("input"):
            ctx.flag(self.name, "an output shares memory with an input")
        if _aliases(outputs, list(ctx.cand_model.state_dict().values())) and not facts.get("weights"):
            ctx.flag(self.name, "an output shares memory with the model's weights")
        if _aliases_each_other(outputs) and not facts.get("each_other"):
            ctx.flag(self.name, "two outputs share memory")

    def _plain(self, ctx: EvalContext, outputs: list[Any]) -> bool:
        import torch

        for i, out in enumerate(outputs):
            if type(out) is not torch.Tensor:
                ctx.flag(self.name, f"output {i} is a {type(out).__qualname__}, not a plain torch.Tensor")
            elif out.device.type == "meta" or out.is_meta:
                ctx.flag(self.name, f"output {i} is a meta tensor (no data)")
        return all(type(o) is torch.Tensor for o in outputs)

    def on_check(self, ctx: EvalContext, record: CheckRecord) -> None:
        """Type, device and aliasing of each output tensor."""
        import torch

        from cudagym.judge.harness.inputs import tensors_in

        if ctx.side == "trusted":
            return  # the runner checked the outputs it returned (after_forward); here they are rebuilt copies
        outputs = tensors_in(record.outputs)
        for i, out in enumerate(outputs):
            if type(out) is not torch.Tensor:
                ctx.flag(self.name, f"output {i} is a {type(out).__qualname__}, not a plain torch.Tensor")
            elif out.device.type == "meta" or out.is_meta:
                ctx.flag(self.name, f"output {i} is a meta tensor (no data)")
        if any(type(o) is not torch.Tensor for o in outputs):
            return
        assert ctx.cand_model is not None
        ref_outputs = [t for t in tensors_in(record.reference) if type(t) is torch.Tensor]
        weights = list(ctx.cand_model.state_dict().values())  # parameters and persistent buffers
        groups = {
            "an input": (tensors_in(record.args), tensors_in(record.ref_args)),
            "the model's weights": (weights, []),
        }
        for what, (cand_others, ref_others) in groups.items():
            if _aliases(outputs, cand_others) and not _aliases(ref_outputs, ref_others):
                ctx.flag(self.name, f"an output shares memory with {what}")
        if _aliases_each_other(outputs) and not _aliases_each_other(ref_outputs):
            ctx.flag(self.name, "two outputs share memory")


@register
class DegenerateOutput(Guard):
    """Constant or input-independent outputs that a tolerance would let pass."""

    name = "degenerate_output"
    summary = "outputs must vary with the input as the reference's do (no constants under the tolerance)"
    order = 60

    def __init__(self) -> None:
        self._seen: list[tuple[int, list[Any], list[Any]]] = []  # (seed, candidate, reference) fingerprints

    def on_check(self, ctx: EvalContext, record: CheckRecord) -> None:
        """Within-output variation and cross-input identity, for outputs that passed the tolerance."""
        import torch

        from cudagym.judge.harness.inputs import tensors_in

        if not record.check.passed:
            return
        cands = [t for t in tensors_in(record.outputs) if t.is_floating_point()]
        refs = [t for t in tensors_in(record.reference) if t.is_floating_point()]
        for i, (cand, ref) in enumerate(zip(cands, refs, strict=False)):
            ratio = _error_over_spread(cand, ref)
            if ratio > ERROR_OVER_SPREAD:
                ctx.flag(self.name, f"output {i} does not follow the reference's variation: its RMS error is "
                         f"{100 * ratio:.0f}% of the reference's standard deviation (seed {record.seed})")
        fingerprint_c = [t.detach().reshape(-1)[:FINGERPRINT].double().cpu() for t in cands]
        fingerprint_r = [t.detach().reshape(-1)[:FINGERPRINT].double().cpu() for t in refs]
        for seed, seen_c, seen_r in self._seen:
            same_cand = len(seen_c) == len(fingerprint_c) and all(
                torch.equal(a, b) for a, b in zip(seen_c, fingerprint_c, strict=True))
            ref_differs = any(
                not torch.allclose(a, b, atol=ctx.tolerance.atol, rtol=ctx.tolerance.rtol)
                for a, b in zip(seen_r, fingerprint_r, strict=False))
            if same_cand and ref_differs:
                ctx.flag(self.name, f"identical outputs for seeds {seed} and {record.seed}, where the reference's "
                         "outputs differ")
        self._seen.append((record.seed, fingerprint_c, fingerprint_r))


def _error_over_spread(cand: torch.Tensor, ref: torch.Tensor) -> float:
    """RMS(cand - ref) / std(ref) when the reference varies beyond noise; 0.0 otherwise."""
    from cudagym.judge.harness.memory import moments, rms_difference

    if cand.shape != ref.shape or ref.numel() < 2:
        return 0.0
    found = moments(ref.detach())  # chunked, in float64: no full-size float64 copies
    spread = found.std
    if not spread > SPREAD_MIN * found.peak or spread == 0.0:
        return 0.0
    return rms_difference(cand.detach(), ref.detach()) / spread


def reference_aliasing(outputs: Any, inputs: list[Any], model: Any) -> dict[str, bool]:
    """Whether the reference's outputs share memory with its inputs, its weights, or each other."""
    from cudagym.judge.harness.inputs import tensors_in

    outs = tensors_in(outputs)
    return {"input": _aliases(outs, tensors_in(inputs)),
            "weights": _aliases(outs, list(model.state_dict().values())),
            "each_other": _aliases_each_other(outs)}


def _ranges(tensors: list[Any]) -> list[tuple[int, int]]:
    found = []
    for t in tensors:
        if t.numel() == 0 or t.device.type == "meta":
            continue
        storage = t.untyped_storage()
        found.append((storage.data_ptr(), storage.data_ptr() + storage.nbytes()))
    return found


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def _aliases(outputs: list[Any], others: list[Any]) -> bool:
    other_ranges = _ranges(others)
    return any(_overlap(o, r) for o in _ranges(outputs) for r in other_ranges)


def _aliases_each_other(outputs: list[Any]) -> bool:
    ranges = _ranges(outputs)
    return any(_overlap(ranges[i], ranges[j]) for i in range(len(ranges)) for j in range(i + 1, len(ranges)))


def _static_findings(tree: ast.Module) -> Iterator[str]:
    aliases = import_aliases(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                name = dotted(base)
                if name and resolve(name, aliases) == "torch.Tensor":
                    yield f"{PYTHON_FILE}:{node.lineno} class {node.name} subclasses torch.Tensor"
        elif isinstance(node, ast.FunctionDef) and node.name in LAZY_NAMES:
            yield f"{PYTHON_FILE}:{node.lineno} defines {node.name}"
        elif isinstance(node, ast.Attribute) and node.attr in LAZY_NAMES:
            yield f"{PYTHON_FILE}:{node.lineno} uses {node.attr}"
