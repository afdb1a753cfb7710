"""The precision guard's decision functions on CPU tensors: a GEMM on fp16/TF32/bf16-rounded inputs against
honest fp32 GEMMs that only sum in another order, on all-positive inputs (KernelBench's ``torch.rand``)
where the error-magnitude rule alone cannot tell them apart."""

from __future__ import annotations

import pytest
import torch

from cudagym.judge.guards.precision import (
    ROUNDINGS,
    _compare,
    _matches_rounding,
    _round_tf32,
    _truncate_tf32,
    rounding_slope,
)

M, K, N = 64, 2048, 64


@pytest.fixture(scope="module")
def gemm() -> dict[str, torch.Tensor]:
    """The inputs, the fp32 and float64 references and candidates computed in several ways."""
    gen = torch.Generator().manual_seed(0)
    a, b = torch.rand(M, K, generator=gen), torch.rand(K, N, generator=gen)
    half = lambda t: t.half().float()  # noqa: E731
    chunks = [a[:, i:i + 64] @ b[i:i + 64, :] for i in range(0, K, 64)]
    sequential = torch.zeros(M, N)
    for part in chunks:  # fp32 running sum over 32 K-blocks, as a tiled kernel without split-K does
        sequential = sequential + part
    return {
        "ref32": a @ b,
        "ref64": a.double() @ b.double(),
        "rounded64": {name: rnd(a).double() @ rnd(b).double() for name, rnd in ROUNDINGS.items()},
        "a_only64": _round_tf32(a).double() @ b.double(),
        "fp16": half(a) @ half(b),
        "fp16_a_only": half(a) @ b,
        "bf16": a.bfloat16().float() @ b.bfloat16().float(),
        "tf32_truncated": _truncate_tf32(a) @ _truncate_tf32(b),
        "split_k": sum(a[:, i::8] @ b[i::8, :] for i in range(8)),
        "sequential": sequential,
        "pairwise": torch.stack(chunks).sum(0),
    }


def test_roundings_keep_ten_or_seven_mantissa_bits():
    x = torch.tensor([1.0 + 2**-11, 1.0 + 2**-11 + 2**-20, -(1.0 + 3 * 2**-11), 3.0])
    assert _round_tf32(x).tolist() == [1.0 + 2**-10, 1.0 + 2**-10, -(1.0 + 2 * 2**-10), 3.0]  # ties away
    assert _truncate_tf32(x).tolist() == [1.0, 1.0, -(1.0 + 2**-10), 3.0]
    y = torch.rand(1000, generator=torch.Generator().manual_seed(1)) + 0.5  # no ties
    assert torch.equal(_round_tf32(y), y.half().float())  # fp16 rounds like TF32 in its range
    assert ROUNDINGS["bf16"](x).tolist() == [1.0, 1.0, -1.0, 3.0]


def test_magnitude_rule_alone_misses_fp16_inputs_on_positive_inputs(gemm):
    # what happened on the H200: the K-times rule plus the ulp floor let a 2048-long fp16 GEMM through
    assert _compare(0, gemm["fp16"], gemm["ref32"], gemm["ref64"], "as drawn") == ""
    assert _compare(0, gemm["bf16"], gemm["ref32"], gemm["ref64"], "as drawn") != ""


@pytest.mark.parametrize("candidate", ["fp16", "bf16", "tf32_truncated"])
def test_rounded_inputs_match_their_rounding_signature(gemm, candidate):
    hits = {name: _matches_rounding(gemm[candidate], gemm["ref32"], gemm["ref64"], rounded)
            for name, rounded in gemm["rounded64"].items()}
    expected = {"fp16": "TF32/fp16", "bf16": "bf16", "tf32_truncated": "truncated TF32"}[candidate]
    assert hits[expected][0], hits
    assert 0.9 < hits[expected][1] < 1.1  # the slope: the candidate's error is the rounding's displacement


def test_rounding_one_operand_matches_that_operand_alone(gemm):
    beta_all, _ = rounding_slope(gemm["fp16_a_only"], gemm["ref64"], gemm["rounded64"]["TF32/fp16"])
    assert 0.35 < beta_all < 0.65  # its share of both operands' rounding: too little alone
    assert not _matches_rounding(gemm["fp16_a_only"], gemm["ref32"], gemm["ref64"],
                                 gemm["rounded64"]["TF32/fp16"])[0]
    assert _matches_rounding(gemm["fp16_a_only"], gemm["ref32"], gemm["ref64"], gemm["a_only64"])[0]


@pytest.mark.parametrize("candidate", ["split_k", "sequential", "pairwise", "ref32"])
def test_fp32_in_another_order_matches_no_rounding(gemm, candidate):
    assert _compare(0, gemm[candidate], gemm["ref32"], gemm["ref64"], "as drawn") == ""
    for name, rounded in [*gemm["rounded64"].items(), ("a only", gemm["a_only64"])]:
        beta, z = rounding_slope(gemm[candidate], gemm["ref64"], rounded)
        assert abs(beta) < 0.05, (name, beta, z)
        assert not _matches_rounding(gemm[candidate], gemm["ref32"], gemm["ref64"], rounded)[0]


def test_small_or_unchanged_outputs_never_match():
    ref64 = torch.linspace(1, 2, 100, dtype=torch.float64)
    cand = (ref64 + 1e-3).float()
    assert not _matches_rounding(cand, ref64.float(), ref64, ref64 + 1e-3)[0]  # too few outputs for a slope
    big = torch.linspace(1, 2, 4096, dtype=torch.float64)
    assert rounding_slope(big.float(), big, big) == (0.0, 0.0)  # a rounding that changes nothing
