"""precision: the candidate may not compute in a lower precision than the protocol allows.

With the default fp32 protocol, TF32 tensor cores or fp16/bf16 arithmetic can pass a tolerance and win
2-7x for free (CUDA Agent issue #16). Both checks compare against a float64 reference computed on the same
device, on an input set of their own as the task's ``get_inputs`` draws it (always run), then as a bonus on
the same set with the signs of its floating tensors flipped at random. The set's seed is drawn per job and
never published, and is never a correctness seed: a correctness input given again is one the candidate has
seen, whose precise answer it can keep while it computes every other input in fp16 (and in VERIFY mode no
timed round follows to look at another). The sign flip is seeded from it too.

Error magnitude (both probes)::

    e_cand = rms(candidate - ref64)          e_ref = rms(ref32 - ref64)
    violation when  e_cand > K * e_ref + FLOOR_ULPS * eps * rms(ref64)

``ref32`` is the task's own reference at the protocol's switches (TF32 on only in a ``tf32`` protocol, so
there the yardstick is TF32's own error). K = 64 and a floor of 64 ulps of the output's RMS (for outputs
whose float64 error is ~0) leave six times the worst honest reordering. On KernelBench's all-positive
``torch.rand`` inputs this rule is weak for long dot products: their value grows like K while rounding
errors of the inputs cancel like sqrt(K), so fp16 inputs on a 2048-long dot product are only ~13x the error
of a sequential fp32 sum (cuBLAS's) and under the floor. Simulated on 64x4096x64 matmuls (fp32 reference
through MKL; errors as multiples of ``e_ref``):

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

Rounding signature (the probes' drawn input, and the timed round the float64 rule runs on, which the
candidate cannot tell from the other timed rounds): the float64 reference is rerun with operands rounded to
bf16, TF32 (round-to-nearest, which fp16 equals in its range) and TF32 (truncated, what tensor cores do to
raw fp32 bits; both TF32 roundings are left out in a ``tf32`` protocol), first all floating inputs and
parameters together. With ``d = candidate - ref64`` and ``D = ref64(rounded) - ref64`` the regression slope
``beta = <d, D> / <D, D>`` is ~1 when the candidate rounded those operands and ~0 for an honest
candidate, whatever its summation order: its error does not depend on the discarded low bits. A violation
needs ``beta >= BETA_MIN``, a slope at least Z_MIN standard errors from 0, at least MIN_ELEMENTS outputs, and
an error above RATIO_MIN times ``e_ref``. A candidate that rounded only some operands gives their share
of ``D`` as its slope; a significant positive share has each operand (up to MAX_SINGLE_OPERANDS) rounded
alone, where a rounded one gives ~1. By Cauchy-Schwarz ``beta >= 0.5`` also needs
``rms(d) >= rms(D) / 2``, so an honest kernel much more accurate than the rounding can never match.

The sign flip can take inputs out of a task's domain (``log``, ``sqrt``): that probe is skipped when the
float64 or fp32 reference is not finite there, or when over 1% of the candidate's outputs are non-finite or
miss the tolerance a hundredfold (it relies on the task's input range, which is its right; that is not a
precision question); otherwise the outputs that do are left out of its errors.

The guard also flags changes to torch's precision switches (``allow_tf32``, ``float32_matmul_precision``,
...) made by candidate code: they would change the baselines, and are restored.
"""

from __future__ import annotations

import copy
import secrets
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from cudagym.judge.guards.base import Guard, register

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from cudagym.judge.harness.context import EvalContext, ForwardCall

K_ERROR = 64.0
FLOOR_ULPS = 64.0
DOMAIN_FACTOR = 100.0  # an output the candidate misses by this many tolerances is out of its domain
DOMAIN_SHARE = 0.01  # a probe with more such outputs than this share is skipped
BETA_MIN = 0.5  # regression slope of the candidate's error on a rounding's displacement
Z_MIN = 10.0  # standard errors of that slope from 0
RATIO_MIN = 2.0  # the candidate's float64 error over the fp32 reference's
MIN_ELEMENTS = 256  # outputs needed for the slope to mean anything
MAX_SINGLE_OPERANDS = 8  # operands rounded one at a time (inputs first, then parameters)


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
        need = 2 * ctx.meter.peak_bytes()  # float64 doubles what one fp32 check needed (weights, inputs, outputs)
        if not ctx.meter.room_for(need):
            ctx.note(f"precision: float64 probe skipped: it needs about {need / (1 << 30):.1f} GiB more than this GPU "
                     "has free for this task (the precision switches are still checked)")
            return
        try:
            ref64_model = copy.deepcopy(ctx.ref_model).double()
        except Exception as exc:
            ctx.note(f"precision: no float64 copy of the reference ({type(exc).__name__}: {exc}); probe skipped")
            return
        # An input set of the probes' own: a correctness input given again would get an answer the candidate kept.
        seed = _probe_seed(ctx.protocol.input_seeds())
        base = ctx.make_inputs(seed)
        message = self._probe(ctx, ref64_model, base, "as drawn", signature=True)
        if not message:
            generator = torch.Generator(device=ctx.device).manual_seed(seed)
            message = self._probe(ctx, ref64_model, _flip_signs(base, generator), "with signs flipped")
        if message:
            ctx.flag(self.name, message)

    def after_timing(self, ctx: EvalContext) -> None:
        """Switches changed between timed calls."""
        if ctx.flag_changes:
            ctx.flag(self.name, f"torch's precision switches were changed during timing: {ctx.flag_changes[0]}")
        self._check_switches(ctx, "timing")

    def check_timed(self, ctx: EvalContext, inputs: list[Any], outputs: Any, reference: Any, label: str) -> None:
        """The error-magnitude rule on one timed call's outputs (the candidate cannot tell it from the others)."""
        import torch

        from cudagym.judge.harness.inputs import tensors_in

        if ctx.ref_model is None or not ctx.meter.room_for(2 * ctx.meter.peak_bytes()):
            return
        try:
            ref64_model = copy.deepcopy(ctx.ref_model).double()
        except Exception:
            return
        ref64 = _forward64(ref64_model, inputs)
        if ref64 is None:
            return
        compared: list[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]] = []
        for i, (cand, r32, r64) in enumerate(zip(tensors_in(outputs), tensors_in(reference), ref64, strict=False)):
            if not (r32.is_floating_point() and cand.shape == r32.shape == r64.shape):
                continue
            if not (bool(torch.isfinite(r64).all()) and bool(torch.isfinite(r32).all())):
                return
            keep = _in_domain(cand, r32, ctx.tolerance.atol, ctx.tolerance.rtol)
            message = _compare(i, cand[keep], r32[keep], r64[keep], label)
            if message:
                ctx.flag(self.name, message)
                return
            if bool(keep.all()):
                compared.append((i, cand, r32, r64))
        # The rounding signature too: fp16's error on KernelBench's all-positive matmuls stays under the magnitude
        # rule's limit, and the probes after the correctness runs, on an input set the candidate has not seen, are
        # still calls it can count and answer in fp32 while it rounds every timed one.
        if compared:
            message = _signature_probe(ref64_model, list(inputs), compared, _roundings(ctx), f"on inputs {label}")
            if message:
                ctx.flag(self.name, message)

    def _check_switches(self, ctx: EvalContext, stage: str) -> None:
        from cudagym.judge.harness.integrity import TorchFlags

        now = TorchFlags.capture()
        if now != ctx.flags:
            ctx.flag(self.name, f"torch's precision switches were changed during {stage}: "
                     f"{'; '.join(ctx.flags.differences(now))}")
            ctx.flags.apply()

    def _probe(self, ctx: EvalContext, ref64_model: Any, inputs: list[Any], label: str,
               signature: bool = False) -> str:
        import torch

        from cudagym.judge.harness.inputs import clone_tree, tensors_in

        candidate = tensors_in(ctx.run_candidate(ctx.candidate_copy(inputs), "precision"))
        ref32 = tensors_in(ctx.run_reference(clone_tree(inputs) if ctx.reference_writes_inputs else inputs))
        ref64 = _forward64(ref64_model, inputs)
        if ref64 is None:
            ctx.note(f"precision: the float64 reference failed on inputs {label}; probe skipped")
            return ""
        compared: list[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]] = []
        for i, (cand, r32, r64) in enumerate(zip(candidate, ref32, ref64, strict=False)):
            if not (r32.is_floating_point() and cand.shape == r32.shape == r64.shape):
                continue
            if not (bool(torch.isfinite(r64).all()) and bool(torch.isfinite(r32).all())):
                ctx.note(f"precision: reference not finite on inputs {label}; probe skipped")
                return ""
            keep = _in_domain(cand, r32, ctx.tolerance.atol, ctx.tolerance.rtol)
            if float(keep.double().mean()) < 1.0 - DOMAIN_SHARE:
                ctx.note(f"precision: the candidate is far off on inputs {label} (outside the task's input "
                         "range); probe skipped")
                return ""
            message = _compare(i, cand[keep], r32[keep], r64[keep], label)
            if message:
                return message
            compared.append((i, cand, r32, r64))
        if signature and compared:
            return _signature_probe(ref64_model, inputs, compared, _roundings(ctx), f"on inputs {label}")
        return ""


def _probe_seed(correctness_seeds: Iterable[int]) -> int:
    """The probes' seed: drawn per job, never published, never one of ``correctness_seeds``."""
    taken = set(correctness_seeds)
    while (seed := secrets.randbelow(2**31 - 1)) in taken:
        pass
    return seed


def _roundings(ctx: EvalContext) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """The roundings the signature looks for: TF32's left out where the protocol allows TF32."""
    allowed = ctx.protocol.matmul_tf32 or ctx.protocol.cudnn_tf32
    return {k: v for k, v in ROUNDINGS.items() if not (allowed and "TF32" in k)}


def _forward64(ref64_model: Any, inputs: list[Any]) -> list[torch.Tensor] | None:
    """The float64 reference's output tensors on ``inputs`` (converted to float64), or None if it raised."""
    import torch

    from cudagym.judge.harness.inputs import map_tensors, tensors_in

    try:
        doubled = map_tensors(inputs, lambda t: t.to(torch.float64, copy=True) if t.is_floating_point() else t.clone())
        return tensors_in(ref64_model(*doubled))
    except Exception:
        return None


def _compare(i: int, cand: torch.Tensor, ref32: torch.Tensor, ref64: torch.Tensor, label: str) -> str:
    """The error-magnitude rule: a violation message, or ``""`` when the candidate's error is allowed."""
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


def rounding_slope(cand: torch.Tensor, ref64: torch.Tensor, rounded64: torch.Tensor) -> tuple[float, float]:
    """How much of the candidate's error a rounding of its operands explains.

    Returns:
        ``(beta, z)``: the least-squares slope of ``cand - ref64`` on ``rounded64 - ref64`` (~1 when the
        candidate computed on those rounded operands, ~0 otherwise) and the slope over its standard error.
        ``(0.0, 0.0)`` when the rounding changes nothing.
    """
    d = (cand.double() - ref64).flatten()
    displacement = (rounded64.double() - ref64).flatten()
    energy = float(displacement.pow(2).sum())
    if energy == 0.0 or d.numel() < 2:
        return 0.0, 0.0
    beta = float((d * displacement).sum()) / energy
    residual = float((d - beta * displacement).pow(2).sum()) / (d.numel() - 1)
    stderr = (residual / energy) ** 0.5
    return beta, (beta / stderr if stderr > 0 else float("inf"))


def _matches_rounding(cand: torch.Tensor, ref32: torch.Tensor, ref64: torch.Tensor,
                      rounded64: torch.Tensor) -> tuple[bool, float]:
    """Whether the candidate's error is the displacement of a rounding (see the module docstring)."""
    if cand.numel() < MIN_ELEMENTS:
        return False, 0.0
    e_cand = _rms(cand.double() - ref64)
    if e_cand <= RATIO_MIN * _rms(ref32.double() - ref64):
        return False, 0.0
    beta, z = rounding_slope(cand, ref64, rounded64)
    return beta >= BETA_MIN and z >= Z_MIN, beta


def _signature_probe(ref64_model: Any, inputs: list[Any],
                     compared: list[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]],
                     roundings: dict[str, Callable[[torch.Tensor], torch.Tensor]],
                     label: str = "on inputs as drawn") -> str:
    """The rounding-signature check on a drawn input (``label`` names it): a violation message, or ``""``.

    Each rounding first applies to all operands at once; the operands are rounded one at a time only when
    that shows a significant positive slope (some of them were rounded), so an honest candidate costs one
    float64 forward per rounding.
    """
    operands = _operands(ref64_model, inputs)
    for fmt, rounder in roundings.items():
        subsets: list[tuple[str, list[Operand]]] = [("all floating inputs and parameters", operands)]
        while subsets:
            what, chosen = subsets.pop(0)
            with _rounded(chosen, rounder):
                outputs = _forward64(ref64_model, inputs)
            if outputs is None:
                continue
            for i, cand, r32, r64 in compared:
                if i >= len(outputs) or outputs[i].shape != r64.shape:
                    continue
                hit, beta = _matches_rounding(cand, r32, r64, outputs[i])
                if hit:
                    return (f"output {i} {label}: its error vs a float64 reference is that of "
                            f"{fmt} rounding of {what} (slope {beta:.2f}; an fp32 computation gives ~0): "
                            "arithmetic below the protocol's precision")
                partial = rounding_slope(cand, r64, outputs[i])
                if chosen is operands and len(operands) > 1 and partial[0] > 0 and partial[1] >= Z_MIN:
                    subsets = [(name, [(name, get, put)]) for name, get, put in operands[:MAX_SINGLE_OPERANDS]]
    return ""


Operand = tuple[str, Callable[[], Any], Callable[[Any], None]]


def _operands(ref64_model: Any, inputs: list[Any]) -> list[Operand]:
    """The floating tensors a rounding can apply to: (name, read it, write it) for inputs, then parameters."""
    found: list[Operand] = []
    for index, value in enumerate(inputs):
        if getattr(value, "is_floating_point", lambda: False)():
            def read(i: int = index) -> Any:
                return inputs[i]

            def write(v: Any, i: int = index) -> None:
                inputs[i] = v

            found.append((f"input {index}", read, write))
    for pname, param in ref64_model.named_parameters():
        if param.is_floating_point():
            def pread(p: Any = param) -> Any:
                return p.data

            def pwrite(v: Any, p: Any = param) -> None:
                p.data = v

            found.append((f"parameter {pname}", pread, pwrite))
    return found


@contextmanager
def _rounded(operands: list[Operand], rounder: Callable[[torch.Tensor], torch.Tensor]) -> Iterator[None]:
    """``operands`` replaced by their rounding (as float64 when they are float64) for the ``with`` body."""
    saved = [(get(), put) for _, get, put in operands]
    try:
        for value, put in saved:
            put(rounder(value.float()).to(value.dtype))
        yield
    finally:
        for value, put in saved:
            put(value)


def _round_bf16(t: torch.Tensor) -> torch.Tensor:
    import torch

    return t.to(torch.bfloat16).float()


def _round_tf32(t: torch.Tensor) -> torch.Tensor:
    """Nearest TF32 (10 mantissa bits), ties away from zero like ``cvt.rna.tf32.f32``."""
    import torch

    return ((t.contiguous().view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)


def _truncate_tf32(t: torch.Tensor) -> torch.Tensor:
    """TF32 by dropping the low 13 bits, what tensor cores do with raw fp32 operands."""
    import torch

    return (t.contiguous().view(torch.int32) & ~0x1FFF).view(torch.float32)


# fp16 rounds like TF32 (same 10 mantissa bits) inside its range; outside it a candidate fails the tolerance.
ROUNDINGS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "TF32/fp16": _round_tf32, "bf16": _round_bf16, "truncated TF32": _truncate_tf32}


def _in_domain(cand: torch.Tensor, ref32: torch.Tensor, atol: float, rtol: float) -> torch.Tensor:
    """Outputs that are finite and within DOMAIN_FACTOR tolerances of the fp32 reference."""
    import torch

    bound = DOMAIN_FACTOR * (atol + rtol * ref32.abs())
    return torch.isfinite(cand) & ((cand - ref32).abs() <= bound)


def _rms(t: torch.Tensor) -> float:
    return float(t.double().pow(2).mean().sqrt().item()) if t.numel() else 0.0


def _flip_signs(inputs: list[Any], generator: torch.Generator) -> list[Any]:
    import torch

    from cudagym.judge.harness.inputs import map_tensors

    def flip(t: torch.Tensor) -> torch.Tensor:
        if not t.is_floating_point():
            return t.clone()
        signs = torch.randint(0, 2, t.shape, device=t.device, generator=generator).to(t.dtype) * 2 - 1
        return t * signs

    return map_tensors(inputs, flip)
