"""Properties of cudaperf.correctness: tolerances, compare, degenerate outputs, inputs, seeds (CPU only)."""

from __future__ import annotations

import pytest
import torch

from cudaperf.correctness import (
    EXACT,
    clone_inputs,
    compare,
    degenerate_flags,
    derive_seed,
    fill_sentinel_,
    inputs_mutated,
    mutated_positions,
    poison_allocator,
    sentinel_mask,
    tolerance_for,
)
from cudaperf.types import Severity, Tolerance


def _codes(flags):
    return {f.code for f in flags}


# -- tolerances ------------------------------------------------------------------------------------


def test_default_tolerances_per_dtype():
    assert tolerance_for(torch.float32) == Tolerance(1e-4, 1e-4)
    assert tolerance_for(torch.float16) == Tolerance(1e-2, 1e-2)
    assert tolerance_for(torch.bfloat16) == Tolerance(1e-2, 1e-2)
    assert tolerance_for(torch.float64) == Tolerance(1e-7, 1e-7)


def test_integers_and_bool_are_exact_even_with_overrides():
    assert tolerance_for(torch.int32, {"*": Tolerance(1, 1)}) == EXACT
    assert tolerance_for(torch.bool) == EXACT


def test_task_override_by_name_alias_wildcard_and_list():
    assert tolerance_for(torch.float32, {"float32": Tolerance(1e-3, 2e-3)}) == Tolerance(1e-3, 2e-3)
    assert tolerance_for(torch.float32, {"fp32": {"atol": 1e-3, "rtol": 1e-3}}) == Tolerance(1e-3, 1e-3)
    assert tolerance_for(torch.float16, {"*": [0.1, 0.2]}) == Tolerance(0.1, 0.2)
    assert tolerance_for(torch.float64, {"default": Tolerance(1e-5, 1e-5)}) == Tolerance(1e-5, 1e-5)
    assert tolerance_for(torch.float32, {"float16": Tolerance(1, 1)}) == Tolerance(1e-4, 1e-4)


# -- compare ---------------------------------------------------------------------------------------


def test_zeros_fail_on_tiny_outputs_that_plain_allclose_accepts():
    # KernelBench issue #165: softmax over a wide axis, every value far below atol
    ref = torch.softmax(torch.rand(4, 200_000, generator=torch.Generator().manual_seed(0)), dim=-1)
    zeros = torch.zeros_like(ref)
    assert torch.allclose(zeros, ref, atol=1e-4, rtol=1e-4)  # the hole
    result = compare(zeros, ref)
    assert not result.ok
    assert "all zeros" in result.message


def test_fp32_rounding_noise_passes_on_tiny_outputs():
    x = torch.randn(4, 200_000, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    ref = torch.softmax(x.float(), dim=-1)
    assert compare(torch.softmax(x, dim=-1).float(), ref).ok


def test_unit_scale_outputs_behave_like_allclose():
    ref = torch.randn(1000, generator=torch.Generator().manual_seed(2))
    ref = ref / ref.square().mean().sqrt()  # rms exactly 1: the bound is atol + rtol*|ref|
    assert compare(ref + 0.5e-4, ref).ok
    assert not compare(ref + 3e-4, ref).ok


def test_error_is_relative_to_the_output_scale():
    ref = 1000 * torch.randn(1000, generator=torch.Generator().manual_seed(3))
    assert compare(ref + 0.05, ref).ok  # 5e-5 of the scale
    assert not compare(ref + 0.5, ref).ok


def test_reported_relative_error_is_at_most_one_when_passing():
    ref = torch.randn(100)
    result = compare(ref + 1e-5, ref)
    assert result.ok and result.max_rel_error <= 1.0 and result.mismatch_fraction == 0.0


def test_tensor_subclass_output_is_rejected():
    class Lazy(torch.Tensor):
        pass

    ref = torch.randn(8)
    result = compare(ref.clone().as_subclass(Lazy), ref)
    assert not result.ok
    assert "subclass" in result.message
    assert _codes(result.flags) == {"tensor_subclass_output"}
    assert result.flags[0].severity is Severity.ERROR


def test_non_tensor_output_is_rejected():
    result = compare([1.0, 2.0], torch.tensor([1.0, 2.0]))
    assert not result.ok and "expected a torch.Tensor" in result.message


def test_nan_where_reference_is_finite_fails():
    ref = torch.randn(10)
    out = ref.clone()
    out[3] = float("nan")
    result = compare(out, ref)
    assert not result.ok and "NaN" in result.message and result.mismatch_fraction == pytest.approx(0.1)


def test_nan_at_the_same_positions_passes_by_default_and_fails_when_forbidden():
    ref = torch.tensor([1.0, float("nan"), 3.0])
    out = torch.tensor([1.0, float("nan"), 3.0])
    assert compare(out, ref).ok
    assert not compare(out, ref, nan_policy="forbid").ok


def test_infinity_must_match_in_sign():
    ref = torch.tensor([1.0, float("inf")])
    assert compare(torch.tensor([1.0, float("inf")]), ref).ok
    assert not compare(torch.tensor([1.0, float("-inf")]), ref).ok


def test_shape_mismatch_message():
    result = compare(torch.zeros(3, 4), torch.zeros(4, 3))
    assert not result.ok and "shape (3, 4), expected (4, 3)" in result.message


def test_dtype_mismatch_message():
    result = compare(torch.zeros(3, dtype=torch.float16), torch.zeros(3))
    assert not result.ok and "dtype float16, expected float32" in result.message


def test_device_mismatch_is_rejected():
    result = compare(torch.zeros(3, device="meta"), torch.zeros(3))
    assert not result.ok and "meta" in result.message


def test_storage_smaller_than_the_shape_is_rejected():
    out = torch.randn(10)
    out.untyped_storage().resize_(8)
    result = compare(out, torch.randn(10))
    assert not result.ok and "storage" in result.message


def test_output_sharing_the_reference_memory_is_flagged():
    ref = torch.randn(10)
    result = compare(ref.view(10), ref)
    assert not result.ok and _codes(result.flags) == {"output_aliases_reference"}


def test_poisoned_memory_is_named_in_the_message():
    out = fill_sentinel_(torch.empty(16))
    result = compare(out, torch.randn(16))
    assert not result.ok and "allocator poison" in result.message


def test_integers_must_match_exactly():
    ref = torch.arange(10)
    assert compare(ref.clone(), ref).ok
    off = ref.clone()
    off[5] += 1
    result = compare(off, ref)
    assert not result.ok and result.max_abs_error == 1.0


def test_integer_outputs_may_differ_by_the_declared_number_of_units():
    ref = torch.tensor([0, 128, 255], dtype=torch.uint8)
    out = torch.tensor([1, 127, 254], dtype=torch.uint8)
    assert compare(out, ref, Tolerance(atol=1.0, rtol=0.0, int_atol=1)).ok


def test_integer_outputs_beyond_the_declared_units_fail():
    ref = torch.tensor([0, 128, 255], dtype=torch.uint8)
    out = torch.tensor([2, 128, 255], dtype=torch.uint8)
    result = compare(out, ref, Tolerance(atol=1.0, rtol=0.0, int_atol=1))
    assert not result.ok and result.max_abs_error == 2.0 and "|out-ref| <= 1" in result.message


def test_a_float_tolerance_alone_keeps_integers_exact():
    ref = torch.tensor([0, 128, 255], dtype=torch.uint8)
    out = torch.tensor([1, 128, 255], dtype=torch.uint8)
    assert not compare(out, ref, Tolerance(atol=1.0, rtol=0.0)).ok


def test_bool_outputs_stay_exact_whatever_the_integer_tolerance():
    assert not compare(torch.tensor([True]), torch.tensor([False]), Tolerance(1.0, 0.0, int_atol=1)).ok


def test_tuples_are_compared_element_wise_and_name_the_failing_element():
    ref = (torch.randn(4), torch.arange(3))
    assert compare((ref[0].clone(), ref[1].clone()), ref).ok
    result = compare([ref[0].clone(), ref[1] + 1], ref)
    assert not result.ok and result.message.startswith("output[1]")


def test_tuple_length_mismatch_fails():
    ref = (torch.randn(4), torch.randn(4))
    assert not compare((ref[0].clone(),), ref).ok


def test_fp16_tolerance_accepts_half_rounding():
    x = torch.randn(1000, generator=torch.Generator().manual_seed(4))
    assert compare((x.double() * 3).half(), (x * 3).half()).ok


def test_explicit_tolerance_wins():
    ref = torch.randn(100)
    assert compare(ref + 1e-3, ref, Tolerance(1e-2, 1e-2)).ok


# -- degenerate outputs -----------------------------------------------------------------------------


def test_constant_reference_flags_the_task_not_the_candidate():
    refs = [torch.zeros(5) + 2.0, torch.zeros(5) + 2.0]
    flags = degenerate_flags([r.clone() for r in refs], refs, True)
    assert {"task_constant_output", "task_input_independent"} <= _codes(flags)
    assert not any(c.startswith("candidate_") for c in _codes(flags))
    assert all(f.severity is Severity.WARNING for f in flags)


def test_tiny_reference_flags_the_task():
    refs = [torch.rand(5) * 1e-7, torch.rand(5) * 1e-7]
    assert "task_tiny_output" in _codes(degenerate_flags(refs, refs, True))


def test_constant_candidate_against_varying_reference_is_flagged():
    refs = [torch.randn(5), torch.randn(5)]
    flags = degenerate_flags([torch.ones(5), torch.ones(5)], refs, True)
    assert {"candidate_constant_output", "candidate_input_independent"} <= _codes(flags)
    assert all(f.severity is Severity.ERROR for f in flags if f.code.startswith("candidate_"))


def test_input_independent_candidate_is_flagged():
    fixed = torch.randn(5)
    flags = degenerate_flags([fixed.clone(), fixed.clone()], [torch.randn(5), torch.randn(5)], True)
    assert "candidate_input_independent" in _codes(flags)


def test_honest_outputs_raise_no_degenerate_flag():
    refs = [torch.randn(5), torch.randn(5)]
    assert degenerate_flags([r.clone() for r in refs], refs, True) == ()


def test_identical_outputs_are_not_flagged_when_the_inputs_were_identical():
    fixed = torch.randn(5)
    assert degenerate_flags([fixed, fixed], [fixed, fixed], False) == ()


# -- inputs ----------------------------------------------------------------------------------------


def test_clone_inputs_copies_tensors_and_keeps_other_values():
    inputs = [torch.randn(3), 7, {"k": torch.ones(2)}]
    copy = clone_inputs(inputs)
    copy[0].zero_()
    copy[2]["k"].zero_()
    assert inputs[0].abs().sum() > 0 and inputs[2]["k"].sum() == 2
    assert copy[1] == 7


def test_in_place_change_is_detected_with_its_path():
    before = [torch.randn(4), torch.randn(4)]
    after = clone_inputs(before)
    assert not inputs_mutated(before, after)
    after[1][0] = 0.0
    assert inputs_mutated(before, after)
    assert mutated_positions(before, after) == ("inputs[1]",)


def test_unchanged_nan_inputs_are_not_a_mutation():
    before = [torch.tensor([1.0, float("nan")])]
    assert not inputs_mutated(before, clone_inputs(before))


def test_resize_is_a_mutation():
    before = [torch.randn(4)]
    after = clone_inputs(before)
    after[0].resize_(2)
    assert inputs_mutated(before, after)


# -- seeds and poison --------------------------------------------------------------------------------


def test_derive_seed_is_deterministic_and_keyed_by_the_secret():
    assert derive_seed(1, "ab12") == derive_seed(1, bytes.fromhex("ab12"))
    assert derive_seed(1, "ab12") != derive_seed(1, "ab13")
    assert derive_seed(1, "ab12") != derive_seed(2, "ab12")


def test_derived_seeds_are_63_bit_and_do_not_reveal_the_public_seed():
    seeds = {derive_seed(s, "00ff") for s in range(100)}
    assert len(seeds) == 100
    assert all(0 <= s < 2**63 for s in seeds)
    assert not seeds & set(range(100))


def test_poison_allocator_is_a_no_op_on_cpu():
    assert poison_allocator("cpu", 1 << 20) == 0


def test_sentinel_mask_finds_poisoned_elements_of_any_dtype():
    for dtype in (torch.float32, torch.float16, torch.int32):
        t = torch.zeros(6, dtype=dtype)
        fill_sentinel_(t[2:4])
        assert sentinel_mask(t).tolist() == [False, False, True, True, False, False]
    assert torch.isnan(fill_sentinel_(torch.empty(3, dtype=torch.bfloat16))).all()
