"""Comparison of a candidate's outputs with the reference's, on any device.

An output passes when it has the reference's structure (tensor, or nested tuple/list/dict of tensors),
every tensor is a plain ``torch.Tensor`` (exactly that type: a subclass can compute lazily or lie about its
values), with the same shape, dtype and device, all values finite, and every element within
``|out - ref| <= atol + rtol * |ref|`` (``torch.isclose``'s rule; integer and boolean outputs, indices and
counts, must be equal: a tolerance that grows with ``|ref|`` passed an argmax off by a few places, and int64
values beyond 2**53 compared as float64 passed any low-bit error). NaN and Inf never pass, not even where
the reference has them: a reference that is not finite makes the task invalid (see
:func:`nonfinite_count`), which the runner reports as the judge's problem, not the agent's.

Every elementwise pass walks the tensors in chunks (:func:`~cudagym.judge.harness.memory.flat_chunks`), so a
7 GiB output is compared with temporaries of a few hundred MB, not five copies of it.

With ``atol_scale`` (the protocol's scale-aware tolerance), the absolute tolerance of each output tensor is
at most that fraction of the reference tensor's RMS (never below :data:`ATOL_FLOOR`): on a reference whose
values are all far below ``atol``, zeros (or any constant near them) no longer pass.

Relative errors are reported over the elements with ``|ref| >= atol`` (below that only the absolute
error is meaningful), so a near-zero reference value does not produce a meaningless huge ratio. Maximum
errors are over finite differences (records stay plain JSON numbers); NaN and Inf outputs are counted as
mismatches and named in the message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from cudagym.judge.harness import memory
from cudagym.judge.harness.memory import count_where_not_finite, flat_chunks
from cudagym.judge.harness.memory import float64_copy as _float64
from cudagym.judge.records import InputCheck

ATOL_FLOOR = 1e-7  # the scale-aware absolute tolerance never goes below this


@dataclass(frozen=True)
class Tolerance:
    """Elementwise tolerance ``|out - ref| <= atol + rtol * |ref|``; ``atol_scale`` caps ``atol`` per tensor."""

    atol: float
    rtol: float
    atol_scale: float = 0.0  # > 0: atol is at most this times the reference tensor's RMS

    def for_reference(self, ref: torch.Tensor) -> Tolerance:
        """The tolerance for one reference tensor (``atol`` scaled down to its magnitude where asked)."""
        if self.atol_scale <= 0 or ref.numel() == 0 or not ref.is_floating_point():
            return self
        squares = sum(float(_float64(piece).pow_(2).sum().item()) for _, (piece,) in flat_chunks(ref))
        rms = (squares / ref.numel()) ** 0.5
        scaled = max(ATOL_FLOOR, self.atol_scale * rms)
        return Tolerance(min(self.atol, scaled), self.rtol) if scaled < self.atol else self


@dataclass
class _Totals:
    max_abs: float = 0.0
    max_rel: float = 0.0
    mismatches: int = 0
    numel: int = 0
    first_index: tuple[int, ...] = ()
    message: str = ""

    def fail(self, message: str) -> None:
        if not self.message:
            self.message = message


def compare_outputs(
    reference: Any, candidate: Any, tolerance: Tolerance, *, index: int = 0, seed: int = 0
) -> InputCheck:
    """Check one input's candidate output against the reference output.

    Args:
        reference: The reference model's output tree.
        candidate: The candidate's output tree.
        tolerance: atol and rtol.
        index: Input set number, copied into the result.
        seed: Input set seed, copied into the result.
    """
    mismatch = getattr(candidate, "structure_mismatch", None)  # the split's runner said why it could not deliver
    if isinstance(mismatch, str):
        return InputCheck(index=index, seed=seed, passed=False, message=f"output: {mismatch}")
    totals = _Totals()
    _compare(reference, candidate, "output", tolerance, totals)
    return InputCheck(
        index=index,
        seed=seed,
        passed=not totals.message,
        max_abs_error=totals.max_abs,
        max_rel_error=totals.max_rel,
        mismatch_count=totals.mismatches,
        numel=totals.numel,
        first_mismatch_index=totals.first_index,
        message=totals.message,
    )


def nonfinite_count(tree: Any) -> int:
    """Number of NaN or Inf elements in the floating-point tensors of a tree."""
    return sum(count_where_not_finite(tensor) for tensor in _tensors(tree))


def _compare(ref: Any, out: Any, where: str, tol: Tolerance, totals: _Totals) -> None:
    if isinstance(ref, torch.Tensor):
        _compare_tensor(ref, out, where, tol, totals)
    elif isinstance(ref, (list, tuple)):
        if not isinstance(out, (list, tuple)) or len(out) != len(ref):
            totals.fail(f"{where}: expected a {type(ref).__name__} of {len(ref)} items, got {_describe(out)}")
            return
        for i, (r, o) in enumerate(zip(ref, out, strict=True)):
            _compare(r, o, f"{where}[{i}]", tol, totals)
    elif isinstance(ref, dict):
        if not isinstance(out, dict) or set(out) != set(ref):
            totals.fail(f"{where}: expected a dict with keys {sorted(map(str, ref))}, got {_describe(out)}")
            return
        for key in ref:
            _compare(ref[key], out[key], f"{where}[{key!r}]", tol, totals)
    elif isinstance(ref, (int, float)) and not isinstance(ref, bool):
        if isinstance(out, torch.Tensor) or not isinstance(out, (int, float)):
            totals.fail(f"{where}: expected a Python number, got {_describe(out)}")
        elif not abs(out - ref) <= tol.atol + tol.rtol * abs(ref):
            totals.fail(f"{where}: got {out!r}, expected {ref!r}")
    elif out != ref:
        totals.fail(f"{where}: got {_describe(out)}, expected {ref!r}")


def _compare_tensor(ref: torch.Tensor, out: Any, where: str, tol: Tolerance, totals: _Totals) -> None:
    totals.numel += ref.numel()
    if type(out) is not torch.Tensor:
        why = " (a subclass: outputs must be plain tensors)" if isinstance(out, torch.Tensor) else ""
        totals.fail(f"{where}: expected a torch.Tensor, got {_describe(out)}{why}")
        totals.mismatches += ref.numel()
        return
    for attr in ("shape", "dtype", "device"):
        want, got = getattr(ref, attr), getattr(out, attr)
        if want != got:
            shown = tuple(got) if attr == "shape" else got
            expected = tuple(want) if attr == "shape" else want
            totals.fail(f"{where}: expected {attr} {expected}, got {shown}")
            totals.mismatches += ref.numel()
            return
    if ref.numel() == 0:
        return
    tol = tol.for_reference(ref)
    first = _Mismatch()
    for offset, (ref_piece, out_piece) in flat_chunks(ref, out):
        _compare_piece(ref_piece, out_piece, offset, tol, totals, first)
    if first.flat < 0:
        return
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(first.flat), ref.shape))
    if not totals.first_index:
        totals.first_index = index
    nonfinite = f"; {first.nan} NaN, {first.inf} Inf" if first.nan or first.inf else ""
    rule = f"{ref.dtype} must be equal" if _exact(ref) else f"atol={tol.atol:g}, rtol={tol.rtol:g}"
    totals.fail(
        f"{where}: {first.count} of {ref.numel()} elements differ{nonfinite}; first at {index}: "
        f"got {_shown(first.got)}, expected {_shown(first.want)} ({rule})"
    )


@dataclass
class _Mismatch:
    """The mismatches of one output tensor, accumulated over its chunks."""

    count: int = 0
    nan: int = 0
    inf: int = 0
    flat: int = -1  # flat index of the first mismatch (-1: none yet)
    got: Any = 0.0  # an element of the output (int, float or complex)
    want: Any = 0.0


def _compare_piece(ref: torch.Tensor, out: torch.Tensor, offset: int, tol: Tolerance, totals: _Totals,
                   first: _Mismatch) -> None:
    """One flat chunk of an output: errors into ``totals``, mismatches into ``first``."""
    ref_v, out_v = _comparable(ref), _comparable(out)
    # Temporaries: at most three of the piece's size and a mask at once (in-place steps on the judge's own
    # tensors, no boolean indexing and its int64 indices): ~200 MB for a 16M-element fp32 piece, not ~560 MB.
    diff = torch.abs(out_v - ref_v)
    magnitude = ref_v.abs()
    if _exact(ref):  # in their own dtype: int64 beyond 2**53 is not exact as float64
        bad = out.ne(ref)
    else:
        limit = magnitude.mul(tol.rtol).add_(tol.atol)
        bad = diff.le(limit).logical_not_()  # NaN in diff is "not <=": NaN or Inf always mismatches
        del limit
    diff.nan_to_num_(nan=0.0, posinf=0.0)  # the errors are over finite differences (the rest are counted)
    totals.max_abs = max(totals.max_abs, float(diff.max().item()))
    insignificant = magnitude < tol.atol  # relative errors only where |ref| >= atol
    if not bool(insignificant.all()):
        magnitude.masked_fill_(insignificant, float("inf"))  # their ratio is 0, below any real one
        del insignificant
        ratio = diff.div_(magnitude).nan_to_num_(nan=0.0, posinf=0.0)
        totals.max_rel = max(totals.max_rel, float(ratio.max().item()))
    count = int(bad.sum().item())
    if count == 0:
        return
    totals.mismatches += count
    first.count += count
    if out_v.is_floating_point():
        first.nan += int(torch.isnan(out_v).sum().item())
        first.inf += int(torch.isinf(out_v).sum().item())
    if first.flat < 0:
        local = int(bad.nonzero()[0].item())
        first.flat = offset + local
        first.got, first.want = out[local].item(), ref[local].item()


def comparison_temporaries_bytes(tree: Any) -> int:
    """Device memory that comparing ``tree``'s tensors (a reference's outputs) holds beside them at most.

    The largest tensor's share, one chunk at a time: in :func:`_compare_piece` the difference, then three
    temporaries of the piece (the difference's and the reference's magnitudes, the limit) and two masks, beside
    both sides' converted copies where the dtype changes (half precision and integers compare in float64) and
    both sides' piece copies where the tensor is not contiguous; the scale-aware tolerance's float64 copy comes
    before them, never beside them. Each temporary is counted as the caching allocator rounds it. Part of the
    memory bound's small buffers (README, "Device memory is bounded").
    """
    most, chunk = 0, memory.CHUNK_ELEMENTS  # read at each call, as flat_chunks does
    for t in _tensors(tree):
        n = t.numel()
        if n == 0:
            continue
        row = n // t.shape[0] if t.dim() > 0 and t.shape[0] > 0 else n
        contiguous = t.dim() == 0 or t.is_contiguous()
        piece = min(n, chunk) if contiguous else min(n, max(row, chunk // max(row, 1) * row))
        comparable = _comparable(torch.empty(0, dtype=t.dtype)).dtype
        wide = comparable.itemsize
        real = wide // 2 if comparable.is_complex else wide  # |a - b| and |ref| of complex values are real
        kept = []  # alive through the piece's comparison
        if comparable != t.dtype:
            kept += [piece * wide] * 2  # the reference's and the output's pieces, converted
        if not contiguous:
            kept += [piece * t.dtype.itemsize] * 2  # the pieces themselves, copied out of strided tensors
        difference = kept + [piece * wide, piece * real]  # out - ref, and its magnitude
        checking = kept + [piece * real] * 3 + [piece] * 2  # diff, |ref|, the limit; the two masks
        compare = max(sum(_blocks(b) for b in difference), sum(_blocks(b) for b in checking))
        most = max(most, compare, _blocks(piece * 8))  # the tolerance's float64 copy, alone
    return most


def _blocks(nbytes: int) -> int:
    """``nbytes`` as the caching allocator holds it: rounded up to 512 B below 1 MiB, to 2 MiB from there."""
    block = 512 if nbytes < 1 << 20 else 2 << 20
    return -(-nbytes // block) * block


def _exact(t: torch.Tensor) -> bool:
    """Whether a tensor's values must match exactly (integers and booleans: indices, counts, masks)."""
    return not (t.is_floating_point() or t.is_complex())


def _shown(value: Any) -> str:
    """An element for a message: integers in full (an int64 index beyond 2**53 too), floats to 6 digits."""
    return str(value) if isinstance(value, (bool, int)) else f"{value:.6g}"


def _comparable(t: torch.Tensor) -> torch.Tensor:
    """Values in a dtype where subtraction is exact enough to judge a tolerance."""
    if t.is_complex():
        return t.to(torch.complex128)
    if t.dtype in (torch.float16, torch.bfloat16) or not t.is_floating_point():
        return t.to(torch.float64) if t.dtype != torch.bool else t.to(torch.float32)
    return t


def _tensors(tree: Any) -> list[torch.Tensor]:
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, (list, tuple)):
        return [t for item in tree for t in _tensors(item)]
    if isinstance(tree, dict):
        return [t for item in tree.values() for t in _tensors(item)]
    return []


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"{type(value).__name__}(shape={tuple(value.shape)}, dtype={value.dtype}, device={value.device})"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)} items"
    return f"a {type(value).__name__}"
