"""The sizing of a job's device memory (`execute.memory_plan`): pure, free bytes + footprint -> plan.

The footprints are those of full-size KernelBench level-1 problems (measured on the meta device) on an
H200's free memory; the small ones force each degradation step in turn."""

from __future__ import annotations

import pytest

from cudaperf.execute.memory_plan import (
    MIN_OUTPUT_CAP_BYTES,
    Footprint,
    Wanted,
    peak_bytes,
    plan_memory,
)

GB = 10**9
MIB = 1 << 20
H200_FREE = 139 * GB
RELU_19 = Footprint(input_bytes=6_442_450_944, output_bytes=6_442_450_944)  # 4096 x 393216 fp32
AVG_POOL_45 = Footprint(input_bytes=17_179_869_184, output_bytes=141_705_216)
SMALL = Footprint(input_bytes=8 * MIB, output_bytes=8 * MIB, param_bytes=MIB)


def _wanted(fp: Footprint, *, references: int = 9, seeds: int = 3, cap: int | None = None,
            flush: int = 2 * GB) -> Wanted:
    return Wanted(all_references_bytes=references * fp.reference_bytes, seeds=seeds, input_sets=3,
                  flush_bytes=flush, min_flush_bytes=120 * MIB, cache_bytes=35 * GB, max_output_bytes=cap)


# Large inputs, small outputs and a large wanted flush: timing decides the peak, so both the number of
# input sets and the flush matter.
TIMING_BOUND = Footprint(input_bytes=10 * GB, output_bytes=GB // 10)


def test_a_small_task_gets_the_full_protocol():
    plan = plan_memory(H200_FREE, SMALL, _wanted(SMALL))
    assert plan.fits and plan.degraded == ()
    assert (plan.keep_references, plan.input_sets, plan.flush_bytes, plan.cache_bytes) == (
        True, 3, 2 * GB, 35 * GB)


def test_the_plan_peak_fits_in_the_free_memory():
    for fp in (SMALL, RELU_19, AVG_POOL_45):
        plan = plan_memory(H200_FREE, fp, _wanted(fp))
        assert plan.fits and plan.needed_bytes <= H200_FREE


def test_a_full_size_relu_is_evaluated_with_references_one_at_a_time():
    plan = plan_memory(H200_FREE, RELU_19, _wanted(RELU_19))
    assert plan.fits and not plan.keep_references and plan.input_sets == 3
    assert any("one (configuration, seed) at a time" in d for d in plan.degraded)


def test_the_output_cap_admits_a_full_size_relu_output():
    plan = plan_memory(H200_FREE, RELU_19, _wanted(RELU_19))
    assert plan.max_output_bytes >= RELU_19.output_bytes > 4 << 30  # the old fixed cap refused it


def test_the_output_cap_is_twice_the_reference_output_when_memory_allows():
    fp = Footprint(input_bytes=GB, output_bytes=GB)
    assert plan_memory(H200_FREE, fp, _wanted(fp)).max_output_bytes == 2 * GB


def test_the_output_cap_has_a_floor_for_tiny_outputs():
    fp = Footprint(input_bytes=MIB, output_bytes=4)
    assert plan_memory(H200_FREE, fp, _wanted(fp)).max_output_bytes == MIN_OUTPUT_CAP_BYTES


def test_the_callers_output_cap_is_never_exceeded():
    plan = plan_memory(H200_FREE, RELU_19, _wanted(RELU_19, cap=16))
    assert plan.max_output_bytes == 16


def _free_for(fp: Footprint, wanted: Wanted, sets: int, flush: int) -> int:
    """Free bytes whose usable share is exactly the peak of that plan (references one at a time)."""
    return int(peak_bytes(fp, wanted, False, sets, flush) / 0.9) + 1


def test_fewer_input_sets_before_a_smaller_flush():
    wanted = _wanted(TIMING_BOUND, flush=8 * GB)
    plan = plan_memory(_free_for(TIMING_BOUND, wanted, 2, 8 * GB), TIMING_BOUND, wanted)
    assert (plan.input_sets, plan.flush_bytes) == (2, 8 * GB)
    assert any("input set" in d for d in plan.degraded)


def test_the_flush_shrinks_to_its_floor_when_one_input_set_does_not_fit_with_it():
    wanted = _wanted(TIMING_BOUND, flush=8 * GB)
    plan = plan_memory(_free_for(TIMING_BOUND, wanted, 1, 120 * MIB), TIMING_BOUND, wanted)
    assert plan.fits and (plan.input_sets, plan.flush_bytes) == (1, 120 * MIB)
    assert any("flush" in d for d in plan.degraded)


def test_a_task_larger_than_the_device_is_refused_with_the_reason():
    fp = Footprint(input_bytes=100 * GB, output_bytes=100 * GB)
    plan = plan_memory(H200_FREE, fp, _wanted(fp))
    assert not plan.fits and "does not fit" in plan.refused and "inputs 100.00 GB" in plan.refused


def test_every_degradation_names_what_changed():
    wanted = _wanted(TIMING_BOUND, flush=8 * GB)
    plan = plan_memory(_free_for(TIMING_BOUND, wanted, 1, 120 * MIB), TIMING_BOUND, wanted)
    assert len(plan.degraded) >= 3 and all("GB" in d or "MiB" in d for d in plan.degraded)


def test_the_cross_job_cache_gets_only_what_the_job_leaves():
    plan = plan_memory(H200_FREE, AVG_POOL_45, _wanted(AVG_POOL_45))
    assert plan.cache_bytes <= H200_FREE * 0.9 - plan.needed_bytes


@pytest.mark.parametrize("sets", [1, 2, 3])
def test_more_input_sets_never_need_less_memory(sets):
    w = _wanted(RELU_19)
    assert peak_bytes(RELU_19, w, False, sets, GB) <= peak_bytes(RELU_19, w, False, sets + 1, GB)
