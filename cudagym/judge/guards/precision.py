"""precision: the candidate may not compute in a lower precision than the protocol allows.

With the default fp32 protocol, TF32 tensor cores or fp16/bf16 arithmetic can pass a tolerance and win
2-7x for free (CUDA Agent issue #16). The check compares errors against a float64 reference computed on
the same device:

    e_cand = rms(candidate - ref64)          e_ref = rms(ref32 - ref64)
    violation when  e_cand > K * e_ref + FLOOR_ULPS * eps * rms(ref64)

``ref32`` is the task's own reference at the protocol's switches (TF32 on only in a ``tf32`` protocol, so
there the yardstick is TF32's own error). Two probes: the first correctness input as drawn, and the same
input with the signs of its floating tensors flipped at random. The second matters: KernelBench inputs are
``torch.rand`` (all positive), where a K-long dot product's value grows like K while TF32's input rounding
errors cancel like sqrt(K), so TF32's error is only ~70x fp32's; with mixed signs it is ~1000x. Simulated on
64x4096x64 matmuls (fp32 reference through MKL; errors as multiples of ``e_ref``):

==============================  ==============  ==============
candidate                       as drawn        signs flipped
==============================  ==============  ==============
split-K fp32 (reordered sums)   0.8             1.0
sequential fp32 dot products    10              4.4
TF32 inputs, fp32 accumulate    67              974
fp16 inputs, fp32 accumulate    67              974
bf16 inputs, fp32 accumulate    527             7920
fast-math ``exp`` (elementwise) 4.5             n/a
==============================  ==============  ==============

Hence K = 64 and a floor of 64 ulps of the output's RMS (for outputs whose float64 error is ~0): six times
the worst honest reordering above, a fifteenth of TF32 on mixed signs. The sign
flip can take inputs out of a task's domain (``log``, ``sqrt``); a probe is skipped when the float64 or
fp32 reference is not finite there, or when the candidate misses the tolerance a hundredfold (it relies on
the task's input range, which is its right; that is not a precision question).

The guard also flags changes to torch's precision switches (``allow_tf32``, ``float32_matmul_precision``,
...) made by candidate code: they would change the baselines, and are restored.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from cudagym.judge.guards.base import Guard, register

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from cudagym.judge.harness.context import EvalContext, ForwardCall

K_ERROR = 64.0
FLOOR_ULPS = 64.0
DOMAIN_FACTOR = 100.0  # a probe the candidate misses by this many tolerances is out of its domain


@register
class Precision(Guard):
    """Arithmetic below the protocol's precision (TF32/fp16/bf16 on an fp32 task), or changed torch switches."""

    name = "precision"
    summary = "compute in the task's precision (fp32: no TF32/fp16/bf16 shortcuts) and leave torch's switches"
    order = 80

    def after_load(self, ctx: EvalContext) -> None:
        """Torch's precision switches after loading."""
        self._check_switches(ctx, "loading")

    def after_forward(self, ctx: EvalContext, call: ForwardCall) -> None:
        """Torch's precision switches after each audited forward (the reference then resets them)."""
        self._check_switches(ctx, "a forward")

    def after_correctness(self, ctx: EvalContext) -> None:
        """The float64 probes (see the module docstring)."""
        self._check_switches(ctx, "the correctness runs")
        import torch

        assert ctx.ref_model is not None
        try:
            ref64_model = copy.deepcopy(ctx.ref_model).double()
        except Exception as exc:
            ctx.note(f"precision: no float64 copy of the reference ({type(exc).__name__}: {exc}); probe skipped")
            return
        base = ctx.make_inputs(ctx.protocol.seed)
        generator = torch.Generator(device=ctx.device).manual_seed(ctx.protocol.seed)
        for label, inputs in (("as drawn", base), ("with signs flipped", _flip_signs(base, generator))):
            message = self._probe(ctx, ref64_model, inputs, label)
            if message:
                ctx.flag(self.name, message)
                return

    def after_timing(self, ctx: EvalContext) -> None:
        """Switches changed between timed calls."""
        if ctx.flag_changes:
            ctx.flag(self.name, f"torch's precision switches were changed during timing: {ctx.flag_changes[0]}")
        self._check_switches(ctx, "timing")

    def _check_switches(self, ctx: EvalContext, stage: str) -> None:
        from cudagym.judge.harness.integrity import TorchFlags

        now = TorchFlags.capture()
        if now != ctx.flags:
            ctx.flag(self.name, f"torch's precision switches were changed during {stage}: "
                     f"{'; '.join(ctx.flags.differences(now))}")
            ctx.flags.apply()

    def _probe(self, ctx: EvalContext, ref64_model: Any, inputs: list[Any], label: str) -> str:
        import torch

        from cudagym.judge.harness.inputs import clone_tree, map_tensors, tensors_in

        candidate = tensors_in(ctx.run_candidate(clone_tree(inputs), "precision"))
        ref32 = tensors_in(ctx.run_reference(clone_tree(inputs)))
        try:
            doubled = map_tensors(clone_tree(inputs), lambda t: t.double() if t.is_floating_point() else t)
            ref64 = tensors_in(ref64_model(*doubled))
        except Exception as exc:
            ctx.note(f"precision: the float64 reference failed on inputs {label} ({type(exc).__name__}); skipped")
            return ""
        for i, (cand, r32, r64) in enumerate(zip(candidate, ref32, ref64, strict=False)):
            if not (r32.is_floating_point() and cand.shape == r32.shape == r64.shape):
                continue
            if not (bool(torch.isfinite(r64).all()) and bool(torch.isfinite(r32).all())):
                ctx.note(f"precision: reference not finite on inputs {label}; probe skipped")
                return ""
            if _out_of_domain(cand, r32, ctx):
                ctx.note(f"precision: the candidate is far off on inputs {label} (outside the task's input "
                         "range); probe skipped")
                return ""
            message = _compare(i, cand, r32, r64, label)
            if message:
                return message
        return ""


def _compare(i: int, cand: torch.Tensor, ref32: torch.Tensor, ref64: torch.Tensor, label: str) -> str:
    import torch

    e_cand = _rms(cand.double() - ref64)
    e_ref = _rms(ref32.double() - ref64)
    scale = _rms(ref64)
    limit = K_ERROR * e_ref + FLOOR_ULPS * torch.finfo(ref32.dtype).eps * scale
    if e_cand <= limit:
        return ""
    times = e_cand / max(e_ref, 1e-300)
    return (f"output {i} on inputs {label}: RMS error vs a float64 reference is {e_cand:.3g}, {times:.0f}x the "
            f"{ref32.dtype} reference's {e_ref:.3g} (allowed {limit:.3g}): arithmetic below the protocol's "
            "precision (TF32, fp16 or bf16?)")


def _out_of_domain(cand: torch.Tensor, ref32: torch.Tensor, ctx: EvalContext) -> bool:
    import torch

    if not bool(torch.isfinite(cand).all()):
        return True
    bound = DOMAIN_FACTOR * (ctx.tolerance.atol + ctx.tolerance.rtol * ref32.abs())
    return not bool(((cand - ref32).abs() <= bound).all())


def _rms(t: torch.Tensor) -> float:
    return float(t.pow(2).mean().sqrt().item()) if t.numel() else 0.0


def _flip_signs(inputs: list[Any], generator: torch.Generator) -> list[Any]:
    import torch

    from cudagym.judge.harness.inputs import map_tensors

    def flip(t: torch.Tensor) -> torch.Tensor:
        if not t.is_floating_point():
            return t.clone()
        signs = torch.randint(0, 2, t.shape, device=t.device, generator=generator).to(t.dtype) * 2 - 1
        return t * signs

    return map_tensors(inputs, flip)
