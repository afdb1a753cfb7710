"""Output comparison, input-tree helpers, poisoning and the integrity snapshot, on CPU tensors."""

from __future__ import annotations

import json
import time

import pytest
import torch

from cudagym.judge.harness.correctness import Tolerance, compare_outputs, nonfinite_count
from cudagym.judge.harness.failures import CandidateFailure, candidate_traceback, is_cuda_error
from cudagym.judge.harness.inputs import (
    bitwise_equal,
    clone_tree,
    generate_inputs,
    poison_,
    poison_count,
    trees_bitwise_equal,
)
from cudagym.judge.harness.integrity import PRISTINE, AttributeSnapshot, TorchFlags, protocol_flags
from cudagym.judge.records import to_dict

TOL = Tolerance(atol=1e-4, rtol=1e-4)


def test_identical_outputs_pass_with_zero_error():
    ref = torch.rand(4, 5)
    check = compare_outputs(ref, ref.clone(), TOL, index=2, seed=44)
    assert check.passed and check.max_abs_error == 0.0 and check.mismatch_count == 0
    assert (check.index, check.seed, check.numel) == (2, 44, 20)


def test_mismatch_reports_counts_errors_and_the_first_index_unravelled():
    ref = torch.ones(3, 4)
    out = ref.clone()
    out[1, 2] = 1.5
    out[2, 3] = 0.0
    check = compare_outputs(ref, out, TOL)
    assert not check.passed
    assert check.mismatch_count == 2 and check.numel == 12
    assert check.first_mismatch_index == (1, 2)
    assert check.max_abs_error == pytest.approx(1.0)
    assert check.max_rel_error == pytest.approx(1.0)
    assert "2 of 12 elements differ" in check.message and "(1, 2)" in check.message


def test_tolerance_is_atol_plus_rtol_times_reference():
    ref = torch.tensor([100.0, 0.0])
    inside = torch.tensor([100.0 + 0.9e-2, 0.9e-4])  # 1e-4 + 1e-4 * 100 = 1.01e-2
    outside = torch.tensor([100.0 + 1.1e-2, 0.0])
    assert compare_outputs(ref, inside, TOL).passed
    assert not compare_outputs(ref, outside, TOL).passed


def test_nan_and_inf_never_pass_and_errors_stay_json_numbers():
    ref = torch.rand(8)
    out = ref.clone()
    out[3] = float("nan")
    out[5] = float("inf")
    check = compare_outputs(ref, out, TOL)
    assert not check.passed and check.mismatch_count == 2
    assert "1 NaN, 1 Inf" in check.message
    json.dumps(to_dict(check), allow_nan=False)


@pytest.mark.parametrize(
    ("out", "words"),
    [
        ((torch.zeros(2, 2),), "expected a torch.Tensor, got a tuple"),
        (torch.zeros(2, 3), "expected shape (2, 2), got (2, 3)"),
        (torch.zeros(2, 2, dtype=torch.float64), "expected dtype torch.float32"),
        (torch.zeros(2, 2, device="meta"), "expected device cpu"),
        (None, "expected a torch.Tensor, got a NoneType"),
    ],
)
def test_structure_shape_dtype_device_must_match(out, words):
    check = compare_outputs(torch.zeros(2, 2), out, TOL)
    assert not check.passed and words in check.message


def test_tensor_subclasses_are_rejected():
    class Lazy(torch.Tensor):
        pass

    ref = torch.rand(3)
    check = compare_outputs(ref, ref.clone().as_subclass(Lazy), TOL)
    assert not check.passed and "subclass" in check.message


def test_nested_outputs_name_the_failing_item():
    ref = (torch.ones(2), [torch.ones(3), {"a": torch.ones(1)}])
    out = (torch.ones(2), [torch.ones(3), {"a": torch.zeros(1)}])
    check = compare_outputs(ref, out, TOL)
    assert not check.passed and check.message.startswith("output[1][1]['a']")
    assert check.numel == 6


def test_half_precision_outputs_are_compared_in_double():
    ref = torch.tensor([1.0, 2.0], dtype=torch.float16)
    assert compare_outputs(ref, ref.clone(), TOL).passed


def test_nonfinite_count():
    assert nonfinite_count((torch.tensor([1.0, float("nan")]), [torch.tensor([float("inf")])])) == 2
    assert nonfinite_count(torch.arange(3)) == 0


def test_poison_pattern_is_a_payload_nan_and_is_counted():
    t = torch.rand(10)
    poison_(t[:4])
    assert poison_count(t) == 4
    assert torch.isnan(t[:4]).all()
    # arithmetic never reproduces the payload: NaN results are canonical
    assert poison_count(t * 1.0) == 0
    for dtype in (torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64, torch.uint8):
        x = torch.zeros(6, dtype=dtype)
        poison_(x)
        assert poison_count(x) == 6


def test_bitwise_equality_treats_nan_bits_as_equal_and_minus_zero_as_different():
    a = torch.tensor([float("nan"), 1.0])
    assert bitwise_equal(a, a.clone())
    assert not bitwise_equal(torch.tensor([0.0]), torch.tensor([-0.0]))
    assert trees_bitwise_equal([a, 3], [a.clone(), 3])
    assert not trees_bitwise_equal([a, 3], [a.clone(), 4])
    assert not trees_bitwise_equal([a], (a.clone(), a))


def test_generate_inputs_is_seeded_and_clone_is_deep():
    def get_inputs():
        return [torch.rand(4), 7]

    a = generate_inputs(get_inputs, 5, torch.device("cpu"))
    b = generate_inputs(get_inputs, 5, torch.device("cpu"))
    c = generate_inputs(get_inputs, 6, torch.device("cpu"))
    assert trees_bitwise_equal(a, b) and not trees_bitwise_equal(a, c)
    copy = clone_tree(a)
    copy[0].add_(1)
    assert trees_bitwise_equal(a, b)


def test_snapshot_sees_and_undoes_monkey_patching():
    snapshot = AttributeSnapshot()
    original = time.perf_counter
    original_sync = torch.cuda.synchronize
    try:
        time.perf_counter = lambda: 0.0  # type: ignore[assignment]
        torch.cuda.synchronize = lambda *a, **k: None  # type: ignore[assignment]
        assert set(snapshot.changes()) >= {"time.perf_counter", "torch.cuda.synchronize"}
        restored = snapshot.restore()
        assert "time.perf_counter" in restored
        assert time.perf_counter is original and torch.cuda.synchronize is original_sync
        assert snapshot.changes() == []
    finally:
        time.perf_counter = original  # type: ignore[assignment]
        torch.cuda.synchronize = original_sync  # type: ignore[assignment]


def test_pristine_references_do_not_follow_a_patch():
    original = time.perf_counter
    try:
        time.perf_counter = lambda: 0.0  # type: ignore[assignment]
        assert PRISTINE.perf_counter is original
        assert PRISTINE.perf_counter() > 0
    finally:
        time.perf_counter = original  # type: ignore[assignment]


def test_torch_flags_capture_apply_and_diff():
    before = TorchFlags.capture()
    try:
        strict = protocol_flags(allow_tf32=False)
        strict.apply()
        assert TorchFlags.capture() == strict
        assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
        torch.backends.cudnn.allow_tf32 = True
        diff = strict.differences(TorchFlags.capture())
        assert diff == ["cudnn_allow_tf32: False -> True"]
        protocol_flags(allow_tf32=True).apply()
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    finally:
        before.apply()


def test_candidate_traceback_keeps_only_candidate_frames(tmp_path):
    src = tmp_path / "model_new.py"
    src.write_text("def boom():\n    raise ValueError('bad shape')\n")
    namespace: dict = {}
    exec(compile(src.read_text(), str(src), "exec"), namespace)
    try:
        namespace["boom"]()
    except ValueError as exc:
        text = candidate_traceback(exc, (tmp_path.resolve(),))
    assert 'File "model_new.py", line 2, in boom' in text
    assert "ValueError: bad shape" in text
    assert "test_harness_compare" not in text


def test_cuda_errors_are_recognised_but_out_of_memory_is_not():
    assert is_cuda_error(RuntimeError("CUDA error: an illegal memory access was encountered"))
    assert is_cuda_error(RuntimeError("device-side assert triggered"))
    assert not is_cuda_error(RuntimeError("shape mismatch"))
    oom = type("OutOfMemoryError", (RuntimeError,), {})("CUDA out of memory. CUDA error")
    assert not is_cuda_error(oom)
    failure = CandidateFailure("forward", "CUDA error: x", cuda=True)
    assert failure.cuda and failure.stage == "forward"
