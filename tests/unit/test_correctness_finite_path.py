"""The tolerance comparison's pass for finite blocks (`_FloatTally.add_finite`, the unmasked scale) gives
what the masked formulas give, figure for figure and message for message, on outputs with and without
NaN, infinities, overflowing differences and denormals, in every floating dtype and block size; and a
judge given no inputs after the call reads them as untouched without comparing them."""

from __future__ import annotations

import math

import torch
from hypothesis import given
from hypothesis import strategies as st
from test_correctness_chunked import CHECKS, FLOATS, NARROW, chunk_bytes, pairs

from cudaperf import correctness
from cudaperf.correctness import mutated_positions
from cudaperf.types import Tolerance


def _both_paths(out, ref, tol, policy="match"):
    fast = correctness._compare_float(out, ref, tol, policy, "output")
    masked = correctness._compare_float(out, ref, tol, policy, "output", finite_path=False)
    return fast, masked


def _identical(a, b) -> None:
    """Every field the same; NaN figures (none are expected) count as equal to NaN."""
    for name in ("ok", "max_abs_error", "max_rel_error", "mismatch_fraction", "message", "flags"):
        x, y = getattr(a, name), getattr(b, name)
        assert x == y or (isinstance(x, float) and math.isnan(x) and math.isnan(y)), (name, x, y)


@given(pair=pairs(FLOATS + NARROW), size=st.integers(1, 4000), policy=st.sampled_from(["match", "forbid"]))
@CHECKS
def test_finite_path_gives_the_masked_figures_and_messages(pair, size, policy):
    out, ref = pair
    if ref.numel() == 0:
        return
    tol = correctness.tolerance_for(ref.dtype)
    with chunk_bytes(size):
        _identical(*_both_paths(out, ref, tol, policy))


@given(seed=st.integers(0, 2**31), atol=st.sampled_from([0.0, 1e-4, 1e-2]), size=st.integers(1, 4000))
@CHECKS
def test_finite_path_matches_under_task_tolerances_and_zero_references(seed, atol, size):
    gen = torch.Generator().manual_seed(seed)
    ref = torch.randn(7, 9, generator=gen)
    ref[0] = 0.0  # a zero reference row: the bound's floor at the smallest normal number
    out = ref + 1e-5 * torch.randn(7, 9, generator=gen)
    with chunk_bytes(size):
        _identical(*_both_paths(out, ref, Tolerance(atol=atol, rtol=1e-4)))


def test_finite_path_falls_back_on_an_overflowing_difference():
    ref = torch.tensor([-3e38, 1.0, 2.0])
    out = torch.tensor([3e38, 1.0, 2.0])  # both finite, their difference is not
    fast, masked = _both_paths(out, ref, correctness.tolerance_for(ref.dtype))
    _identical(fast, masked)
    assert not fast.ok and fast.max_abs_error == math.inf


def test_finite_path_falls_back_on_a_reference_with_nan():
    ref = torch.tensor([math.nan, 1.0, 2.0, math.inf])
    out = torch.tensor([math.nan, 1.0, 2.0, math.inf])
    fast, masked = _both_paths(out, ref, correctness.tolerance_for(ref.dtype))
    _identical(fast, masked)
    assert fast.ok


def test_a_job_s_output_set_is_judged_the_same_on_both_paths():
    """A dozen outputs as a job ships them, correct and wrong ones, the larger ones over several blocks
    (scaled down from benchmarks/results/cpu-2026-12-04-s15-region/compare_profile.py's set)."""
    gen = torch.Generator().manual_seed(7)
    shapes = [(1024, 1025)] + [(256, 257)] * 5 + [(17, 999)] * 6
    with chunk_bytes(16 << 20):
        _judge_each(shapes, gen)


def _judge_each(shapes, gen) -> None:
    for i, shape in enumerate(shapes):
        ref = torch.randn(shape, generator=gen)
        out = ref + 1e-6 * torch.randn(shape, generator=gen)
        if i % 3 == 1:
            out.view(-1)[i * 37] += 1.0  # one wrong element
        if i % 4 == 2:
            out.view(-1)[i] = math.nan
        fast, masked = _both_paths(out, ref, correctness.tolerance_for(ref.dtype))
        _identical(fast, masked)


def test_inputs_given_as_the_same_objects_are_untouched():
    inputs = [torch.randn(4, 4), torch.full((3,), math.nan), 5]
    assert mutated_positions(inputs, inputs) == ()
    changed = [inputs[0].clone(), inputs[1], 5]
    changed[0][0, 0] += 1
    assert mutated_positions(inputs, changed) == ("inputs[0]",)
