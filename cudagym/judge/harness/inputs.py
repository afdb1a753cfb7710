"""Input sets and output trees: seeded generation, copies, bitwise comparison and memory poisoning.

A task's ``get_inputs()`` returns a list of tensors and plain values; ``forward`` may return a tensor or a
(nested) tuple/list/dict of them. These helpers walk such trees.

Poisoning: memory the judge frees after holding reference (or baseline) results is first overwritten with a
NaN whose payload no arithmetic produces (``0x7FA5A5A5`` for fp32). A candidate that returns memory it never
wrote (the Sakana "stale memory" exploit) hands back that exact bit pattern, which the ``stale_memory``
guard recognises; arithmetic on it yields a canonical NaN, which fails correctness anyway.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import torch

from cudagym.judge.harness.memory import chunked_equal, count_equal, flat_chunks

# Bit patterns written into freed result memory, per element size; floats get a signalling-NaN payload.
_POISON_VIEW: dict[torch.dtype, tuple[torch.dtype, int]] = {
    torch.float32: (torch.int32, 0x7FA5A5A5),
    torch.float64: (torch.int64, 0x7FF4A5A5A5A5A5A5),
    torch.float16: (torch.int16, 0x7D5A),
    torch.bfloat16: (torch.int16, 0x7FA5),
    torch.int64: (torch.int64, 0x5A5A5A5A5A5A5A5A),
    torch.int32: (torch.int32, 0x5A5A5A5A),
    torch.int16: (torch.int16, 0x5A5A),
    torch.int8: (torch.int8, 0x5A),
    torch.uint8: (torch.uint8, 0xA5),
}

# Same-size integer views for bitwise equality of float tensors (NaN == NaN bit for bit).
_BITS_VIEW: dict[torch.dtype, torch.dtype] = {
    torch.float32: torch.int32,
    torch.float64: torch.int64,
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
}


def seed_all(seed: int) -> None:
    """Seed torch (CPU and every CUDA device), Python's ``random`` and numpy (when installed)."""
    torch.manual_seed(seed)
    random.seed(seed)
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is a dependency, but stay robust
        return
    np.random.seed(seed % 2**32)


def generate_inputs(
    get_inputs: Callable[[], Sequence[Any]], seed: int, device: torch.device, *, on_device: bool = False
) -> list[Any]:
    """One input set of a task from ``seed``, moved to ``device``.

    Args:
        get_inputs: The task's ``get_inputs``.
        seed: Seeds every generator before the call.
        device: Where the tensors go.
        on_device: Create tensors directly on ``device`` (factory calls inside ``get_inputs`` default to
            it): fast enough to draw fresh inputs for every call. Otherwise they are created on the CPU,
            as KernelBench does, and copied.
    """
    seed_all(seed)
    if on_device and device.type != "cpu":
        with torch.device(device):
            raw = get_inputs()
    else:
        raw = get_inputs()
    if not isinstance(raw, (list, tuple)):
        raw = [raw]
    return [to_device(item, device) for item in raw]


def map_tensors(tree: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """Apply ``fn`` to every tensor of a tree of lists, tuples and dicts; other leaves are kept."""
    if isinstance(tree, torch.Tensor):
        return fn(tree)
    if isinstance(tree, (list, tuple)):
        mapped = [map_tensors(item, fn) for item in tree]
        return mapped if isinstance(tree, list) else tuple(mapped)
    if isinstance(tree, dict):
        return {key: map_tensors(value, fn) for key, value in tree.items()}
    return tree


def tensors_in(tree: Any) -> list[torch.Tensor]:
    """Every tensor of a tree, depth first."""
    found: list[torch.Tensor] = []
    map_tensors(tree, found.append)
    return found


def to_device(tree: Any, device: torch.device) -> Any:
    """A copy of ``tree`` with its tensors on ``device``."""
    return map_tensors(tree, lambda t: t.to(device))


def clone_tree(tree: Any) -> Any:
    """A deep copy of the tensors of ``tree`` (same strides and device); other leaves are shared."""
    return map_tensors(tree, lambda t: t.clone())


def nbytes(tree: Any) -> int:
    """Bytes held by the tensors of a tree."""
    return sum(t.numel() * t.element_size() for t in tensors_in(tree))


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when two tensors have the same dtype, shape and bits (NaNs included)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    view = _BITS_VIEW.get(a.dtype)
    if view is not None:
        return chunked_equal(a.view(view), b.view(view))
    return chunked_equal(a, b)


# A digest's pass: int64 temporaries of 32 MB per piece (the value, its weights, their product).
DIGEST_CHUNK_ELEMENTS = 1 << 22
_INT_OF_WIDTH: dict[int, torch.dtype] = {1: torch.uint8, 2: torch.int16}


def bits_digest(tensor: torch.Tensor) -> tuple[str, tuple[int, ...], int, int]:
    """A fingerprint of a tensor's dtype, shape and bits, made chunk by chunk (no full-size temporary).

    Two sums over its raw bits read as integers, modulo 2**64: plain and weighted by position. Bit-identical
    tensors share it; a write that keeps both sums (more than one element changed, in a way made to balance
    them) is the only one it misses, so it tells whether task code wrote a tensor, not whether an adversary did.
    """
    flat = tensor.detach()
    if flat.dtype == torch.bool:
        flat = flat.view(torch.uint8)
    plain = torch.zeros((), dtype=torch.int64, device=tensor.device)
    weighted = torch.zeros((), dtype=torch.int64, device=tensor.device)
    position = 0  # in units of the integer view's elements
    for _, (piece,) in flat_chunks(flat, chunk=DIGEST_CHUNK_ELEMENTS):
        width = piece.element_size()
        # a strided 1-D piece is copied (one piece at most): a view across element sizes needs unit stride
        ints = piece.contiguous().view(_INT_OF_WIDTH.get(width, torch.int32)).to(torch.int64)
        weights = torch.arange(position + 1, position + 1 + ints.numel(), dtype=torch.int64, device=ints.device)
        plain += ints.sum()
        weighted += (ints * (weights % _DIGEST_MODULUS)).sum()
        position += ints.numel()
    return str(tensor.dtype), tuple(tensor.shape), int(plain.item()), int(weighted.item())


_DIGEST_MODULUS = (1 << 31) - 1  # position weights below 2**31: a weight times a 32-bit value fits in int64


def tree_digest(tree: Any) -> Any:
    """The tree with each tensor replaced by its :func:`bits_digest` (a new structure; other leaves kept).

    Two digests compare equal (``==``) when the trees had the same structure, the same bits in every tensor
    and equal other leaves; one digest taken before a call and one after tell whether the call wrote the tree.
    """
    return map_tensors(tree, bits_digest)


def trees_bitwise_equal(a: Any, b: Any) -> bool:
    """True when two trees have the same structure and bit-identical tensors and equal other leaves."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and bitwise_equal(a, b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(trees_bitwise_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(trees_bitwise_equal(a[k], b[k]) for k in a)
    try:
        return bool(a == b)
    except Exception:  # an exotic leaf without a usable __eq__: call it different
        return False


def poison_(tensor: torch.Tensor) -> None:
    """Overwrite a tensor in place with the poison pattern of its dtype (no-op for other dtypes)."""
    spec = _POISON_VIEW.get(tensor.dtype)
    if spec is None or tensor.numel() == 0:
        return
    view_dtype, pattern = spec
    tensor.view(view_dtype).fill_(_signed(pattern, view_dtype))


def poison_tree_(tree: Any) -> None:
    """Poison every tensor of a tree in place (call it before dropping the last reference)."""
    for tensor in tensors_in(tree):
        if tensor.is_inference() and not torch.is_inference_mode_enabled():
            continue  # inference tensors cannot be written outside inference mode
        poison_(tensor)


def poison_count(tensor: torch.Tensor) -> int:
    """How many elements of ``tensor`` hold exactly the poison pattern of its dtype."""
    spec = _POISON_VIEW.get(tensor.dtype)
    if spec is None or tensor.numel() == 0:
        return 0
    view_dtype, pattern = spec
    return count_equal(tensor.view(view_dtype), _signed(pattern, view_dtype))


def _signed(pattern: int, dtype: torch.dtype) -> int:
    """The pattern as the signed value the integer dtype stores."""
    if dtype == torch.uint8:
        return pattern
    bits = torch.iinfo(dtype).bits
    return pattern - (1 << bits) if pattern >= 1 << (bits - 1) else pattern
