"""Whole-tensor checks of `cudaperf.correctness` done block by block (`COMPARE_CHUNK_BYTES`): the same
verdicts, figures and messages as one block, whatever the block size, dtype, layout or non-finite values;
and the temporaries of one check stay under the bound (measured with torch's CPU memory profiler).

Tiny bounds force blocks of one or a few elements, so small random tensors cross many block boundaries."""

from __future__ import annotations

import contextlib
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cudaperf import correctness
from cudaperf.correctness import compare, degenerate_flags, mutated_positions
from cudaperf.types import Tolerance

WHOLE = 1 << 62  # one block, whatever the tensor
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64, torch.complex128]
NARROW = [getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n)]
EXACTS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool]
SPECIAL = [math.nan, math.inf, -math.inf, 1e-40, -1e-42, 0.0, -0.0, 1e30, -1e30]
CHECKS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@contextlib.contextmanager
def chunk_bytes(size: int):
    saved = correctness.COMPARE_CHUNK_BYTES
    correctness.COMPARE_CHUNK_BYTES = size
    try:
        yield
    finally:
        correctness.COMPARE_CHUNK_BYTES = saved


def _in_blocks(fn, size: int):
    with chunk_bytes(size):
        return fn()


@st.composite
def shapes(draw):
    return tuple(draw(st.lists(st.integers(1, 6), min_size=0, max_size=4)))


@st.composite
def pairs(draw, dtypes):
    """(output, reference): a random reference, an output equal to it but for a few perturbed, special
    (NaN, inf, denormal) or copied-special positions; either may be a non-contiguous view."""
    dtype = draw(st.sampled_from(dtypes))
    shape = draw(shapes())
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31)))
    scale = draw(st.sampled_from([1e-6, 1.0, 1e3]))
    base = torch.randn(shape, dtype=torch.float64, generator=gen) * scale
    ref_wide, out_wide = base.clone(), base.clone()
    flat_ref, flat_out = ref_wide.view(-1), out_wide.view(-1)
    n = flat_ref.numel()
    for _ in range(draw(st.integers(0, 4))):
        at, what = draw(st.integers(0, n - 1)), draw(st.sampled_from(["tiny", "big", "special", "both"]))
        if what == "tiny":
            flat_out[at] += 1e-9 * scale
        elif what == "big":
            flat_out[at] += draw(st.sampled_from([1e-3, 0.5, 10.0])) * scale
        elif what == "special":
            target = draw(st.sampled_from([flat_out, flat_ref]))
            target[at] = draw(st.sampled_from(SPECIAL))
        else:
            flat_out[at] = flat_ref[at] = draw(st.sampled_from(SPECIAL))
    out, ref = _as(out_wide, dtype), _as(ref_wide, dtype)
    if draw(st.booleans()) and len(shape) >= 2:  # a transposed (non-contiguous) output and reference
        out, ref = out.transpose(0, -1).contiguous().transpose(0, -1), ref.transpose(0, -1).contiguous()
        ref = ref.transpose(0, -1)
    return out, ref


def _as(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if dtype.is_complex:
        return torch.complex(t, t.flip(-1) if t.dim() else t).to(dtype)
    if dtype == torch.bool:
        return t > 0
    if not dtype.is_floating_point:
        info = torch.iinfo(dtype)
        return t.nan_to_num(0.0, 0.0, 0.0).clamp(info.min, info.max).round().to(dtype)
    return t.to(dtype)


def _same(a, b) -> None:
    assert (a.ok, a.mismatch_fraction, a.max_abs_error, a.message, a.flags) == (
        b.ok, b.mismatch_fraction, b.max_abs_error, b.message, b.flags)
    if a.max_rel_error is None or math.isinf(a.max_rel_error):
        assert a.max_rel_error == b.max_rel_error
    else:  # the scale's fp64 sum of squares is added up in another order
        assert math.isclose(a.max_rel_error, b.max_rel_error, rel_tol=1e-9, abs_tol=1e-300)


# -- blocks ------------------------------------------------------------------------------------------


@given(shape=shapes(), limit=st.integers(1, 50))
@settings(max_examples=200, deadline=None)
def test_blocks_cover_every_element_once_in_row_major_order(shape, limit):
    t = torch.arange(math.prod(shape)).reshape(shape)
    blocks = [b for (b,) in correctness._blocks(limit, t)]
    assert all(b.numel() <= limit for b in blocks) or t.numel() <= limit
    assert torch.equal(torch.cat(blocks), t.reshape(-1))


@given(shape=shapes(), limit=st.integers(1, 50))
@settings(max_examples=100, deadline=None)
def test_blocks_of_a_transposed_view_follow_its_logical_order(shape, limit):
    t = torch.arange(math.prod(shape)).reshape(shape)
    view = t.transpose(0, -1) if t.dim() >= 2 else t
    assert torch.equal(torch.cat([b for (b,) in correctness._blocks(limit, view)]), view.reshape(-1))


# -- float comparison ----------------------------------------------------------------------------------


@given(pair=pairs(FLOATS + NARROW), size=st.integers(1, 4000), policy=st.sampled_from(["match", "forbid"]))
@CHECKS
def test_float_comparison_in_blocks_equals_one_block(pair, size, policy):
    out, ref = pair
    whole = _in_blocks(lambda: compare(out, ref, nan_policy=policy), WHOLE)
    _same(_in_blocks(lambda: compare(out, ref, nan_policy=policy), size), whole)


@given(pair=pairs(FLOATS), size=st.integers(1, 4000))
@CHECKS
def test_float_comparison_in_blocks_equals_the_whole_tensor_formulas(pair, size):
    out, ref = pair
    tol = correctness.tolerance_for(ref.dtype)
    ok, max_abs, max_rel, fraction = _whole_tensor_compare(out, ref, tol)
    got = _in_blocks(lambda: compare(out, ref), size)
    assert (got.ok, got.mismatch_fraction) == (ok, fraction)
    assert got.max_abs_error == max_abs
    assert math.isclose(got.max_rel_error, max_rel, rel_tol=1e-9) or got.max_rel_error == max_rel


def _whole_tensor_compare(output, reference, tol):
    """The comparison as one set of whole-tensor operations (the formulas of `correctness._bound` and
    `_compare_float`, "match" policy), for the property above."""
    out, ref = correctness._real_view(output), correctness._real_view(reference)
    out_finite, ref_finite = torch.isfinite(out), torch.isfinite(ref)
    nonfinite_ok = ~ref_finite & ((out.isnan() & ref.isnan()) | (out == ref))
    bound, _ = correctness._bound(ref, tol, ref_finite)
    both = out_finite & ref_finite
    diff = torch.where(both, (out - ref).abs(), torch.zeros_like(ref))
    ratio = torch.where(both, diff / bound.clamp_min(torch.finfo(bound.dtype).tiny), torch.zeros_like(ref))
    nonfinite_bad = ~both & ~nonfinite_ok
    bad = (both & (diff > bound)) | nonfinite_bad
    count = int(bad.sum())
    max_rel = math.inf if bool(nonfinite_bad.any()) else float(ratio.max())
    return count == 0, float(diff.max()), max_rel, count / ref.numel()


def test_a_failing_comparison_names_the_first_worst_element_across_blocks():
    ref = torch.zeros(10, 7)
    out = ref.clone()
    out[3, 2] = out[8, 1] = 5.0  # equal worst errors in different blocks: the first one is named
    message = _in_blocks(lambda: compare(out, ref), 1).message
    assert "worst at (3, 2)" in message and message == _in_blocks(lambda: compare(out, ref), WHOLE).message


def test_a_complex_failure_names_the_lane():
    ref = torch.zeros(3, 4, dtype=torch.complex64)
    out = ref.clone()
    out[1, 2] = complex(0.0, 2.0)
    assert "worst at (1, 2, 1)" in _in_blocks(lambda: compare(out, ref), 1).message


def test_poisoned_nan_is_counted_across_blocks():
    ref = torch.ones(64)
    out = ref.clone()
    correctness.fill_sentinel_(out[10:50])
    message = _in_blocks(lambda: compare(out, ref), 1).message
    assert "NaN at 40 positions" in message and "(40 hold the allocator poison" in message


def test_an_all_zero_output_is_named_across_blocks():
    ref = torch.rand(50, generator=torch.Generator().manual_seed(0)) + 1
    assert "all zeros" in _in_blocks(lambda: compare(torch.zeros(50), ref), 1).message


def test_zero_dimensional_tensors_compare_in_blocks():
    ref = torch.tensor(2.0)
    assert _in_blocks(lambda: compare(ref.clone(), ref), 1).ok
    _same(_in_blocks(lambda: compare(torch.tensor(3.0), ref), 1),
          _in_blocks(lambda: compare(torch.tensor(3.0), ref), WHOLE))


# -- exact comparison, mutation, degenerate outputs ----------------------------------------------------


@given(pair=pairs(EXACTS), size=st.integers(1, 4000), levels=st.sampled_from([0, 1, 3]))
@CHECKS
def test_exact_comparison_in_blocks_equals_one_block(pair, size, levels):
    out, ref = pair
    tol = Tolerance(atol=0.0, rtol=0.0, int_atol=levels)
    _same(_in_blocks(lambda: compare(out, ref, tol), size), _in_blocks(lambda: compare(out, ref, tol), WHOLE))


@given(pair=pairs(FLOATS + NARROW + EXACTS), size=st.integers(1, 4000))
@CHECKS
def test_mutation_check_in_blocks_equals_one_block(pair, size):
    out, ref = pair
    for before, after in ((ref, out), (ref, ref.clone()), (ref, ref.contiguous())):
        assert _in_blocks(lambda b=before, a=after: mutated_positions([b], [a]), size) == _in_blocks(
            lambda b=before, a=after: mutated_positions([b], [a]), WHOLE)


def test_mutation_check_sees_one_changed_bit_in_a_late_block():
    before = torch.zeros(1000)
    after = before.clone()
    after[999] = -0.0  # equal as a value, not as bytes
    assert _in_blocks(lambda: mutated_positions([before], [after]), 1) == ("inputs[0]",)
    assert _in_blocks(lambda: mutated_positions([before], [before.clone()]), 1) == ()


@given(pair=pairs(FLOATS + EXACTS), size=st.integers(1, 4000), constant=st.booleans())
@CHECKS
def test_degenerate_checks_in_blocks_equal_one_block(pair, size, constant):
    out, ref = pair
    outs = [torch.zeros_like(out) if constant else out, out.clone()]
    refs = [ref, ref.clone()]
    whole = _in_blocks(lambda: degenerate_flags(outs, refs, True), WHOLE)
    assert _in_blocks(lambda: degenerate_flags(outs, refs, True), size) == whole


# -- the bound on temporaries ----------------------------------------------------------------------------


def _peak_bytes(fn) -> int:
    """The most bytes `fn`'s CPU tensor allocations held at once (torch's memory profiler: allocations are
    charged to the op that made them, frees appear as `[memory]` events)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e.time_range.start, e.cpu_memory_usage if e.name == "[memory]"
                     else e.self_cpu_memory_usage) for e in prof.events())
    held = peak = 0
    for _, change in events:
        held += change
        peak = max(peak, held)
    return peak


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64, torch.int32])
def test_a_comparison_holds_at_most_the_chunk_bound(dtype):
    gen = torch.Generator().manual_seed(0)
    ref = _as(torch.randn(64, 128, dtype=torch.float64, generator=gen), dtype)
    out = _as(torch.randn(128, 64, dtype=torch.float64, generator=gen), dtype).t()  # strided, failing
    bound = 16 << 10
    with chunk_bytes(bound):
        assert _peak_bytes(lambda: compare(out, ref)) <= bound
        assert _peak_bytes(lambda: mutated_positions([ref], [out])) <= bound
    assert _peak_bytes(lambda: compare(out, ref)) > bound  # one block of the default bound is larger
