"""The sizing of a job's device memory (`execute.memory_plan`): pure, free bytes + footprint -> plan.

The footprints are those of full-size KernelBench level-1 problems (measured on the meta device) on an
H200's free memory; the small ones force each degradation step in turn."""

from __future__ import annotations

import pytest

from cudaperf.correctness import COMPARE_CHUNK_BYTES
from cudaperf.execute.memory_plan import (
    MIN_OUTPUT_CAP_BYTES,
    Footprint,
    Wanted,
    peak_bytes,
    plan_memory,
    stage_peaks,
)

GB = 10**9
MIB = 1 << 20
H200_FREE = 139 * GB
RELU_19 = Footprint(input_bytes=6_442_450_944, output_bytes=6_442_450_944)  # 4096 x 393216 fp32
AVG_POOL_45 = Footprint(input_bytes=17_179_869_184, output_bytes=141_705_216)
SUM_47 = Footprint(input_bytes=8_587_837_440, output_bytes=2_096_640)  # 128 x 4096 x 4095 fp32, dim 1
C = COMPARE_CHUNK_BYTES
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


# -- what the stages hold --------------------------------------------------------------------------------


def _self_check(fp: Footprint, *, refereed: bool = True, seeds: int = 1) -> Wanted:
    """What tests/gpu/test_full_size_gpu.py asks: the declared configuration and two derived ones at 0.36
    and 0.12 of its size, one seed (three timing input sets), the lead-sized flush of an H200."""
    references = (seeds + 2 + 0.36 + 0.12) * fp.reference_bytes
    return Wanted(all_references_bytes=int(references), seeds=seeds, input_sets=3, flush_bytes=502 * MIB,
                  min_flush_bytes=120 * MIB, cache_bytes=35 * GB, refereed=refereed)


def test_the_comparison_counts_its_chunk_bound_not_output_sizes():
    small = stage_peaks(RELU_19, _wanted(RELU_19), False, 1, 0)
    larger_output = Footprint(RELU_19.input_bytes, RELU_19.output_bytes + GB)
    large = stage_peaks(larger_output, _wanted(larger_output), False, 1, 0)
    # one more GB of output: the kept reference, the first run's output, the poison block and the output
    assert large["correctness"] - small["correctness"] == 4 * GB
    i = o = 6_442_450_944
    assert small["correctness"] == (i + o) + o + i + 2 * o + C  # not seven outputs' worth of temporaries


def test_a_refereed_worker_ships_instead_of_comparing():
    peaks = stage_peaks(RELU_19, _self_check(RELU_19), False, 1, 0)
    assert "correctness" not in peaks and "claim" not in peaks and "shipping" in peaks


def test_a_refereed_worker_has_no_claim_stage_even_when_references_are_kept():
    assert "claim" not in stage_peaks(SMALL, _self_check(SMALL), True, 3, 0)


def test_refereed_timing_counts_one_output_copy_per_input_set():
    refereed = stage_peaks(RELU_19, _self_check(RELU_19), False, 3, 0)["timing"]
    one_set_fewer = stage_peaks(RELU_19, _self_check(RELU_19), False, 2, 0)["timing"]
    # a clone of the inputs and the candidate's first output (for the referee); no baseline output
    assert refereed - one_set_fewer == RELU_19.input_bytes + RELU_19.output_bytes


def test_refereed_timing_counts_the_baselines_own_pool():
    forward = Footprint(RELU_19.input_bytes, RELU_19.output_bytes, forward_bytes=GB)
    refereed = stage_peaks(forward, _self_check(forward), False, 3, 0)["timing"]
    plain = stage_peaks(forward, _self_check(forward, refereed=False), False, 3, 0)["timing"]
    # plain sets: inputs plus two expected outputs; refereed: inputs plus three first outputs, and the pool
    assert refereed - plain == forward.output_bytes + GB


def test_shipping_counts_the_referees_item_beside_the_workers_runs():
    i = o = 6_442_450_944
    # worker: the reference's inputs, run 1's output, run 2's clone, poison block, output, contiguous copy;
    # referee: the assembled output and inputs after the call, and its comparison
    expected = i + o + i + 3 * o + (i + o + C)
    assert stage_peaks(RELU_19, _self_check(RELU_19), False, 1, 0)["shipping"] == expected


def test_a_full_size_relu_fits_beside_a_referee_with_100_gb_free():
    # all three timing input sets: each holds a clone of the 6.4 GB input and one 6.4 GB output copy (the
    # candidate's first output, kept for the referee; no baseline output is kept)
    plan = plan_memory(100 * GB, RELU_19, _self_check(RELU_19))
    assert plan.fits and plan.input_sets == 3 and plan.needed_bytes <= 90 * GB
    assert plan.max_output_bytes >= RELU_19.output_bytes


def test_a_full_size_relu_with_three_seeds_fits_beside_a_referee_with_100_gb_free():
    plan = plan_memory(100 * GB, RELU_19, _self_check(RELU_19, seeds=3))
    assert plan.fits and plan.needed_bytes <= 90 * GB


def test_a_full_size_relu_was_refused_only_because_43_gb_were_free():
    assert not plan_memory(int(43.3 * GB), RELU_19, _self_check(RELU_19)).fits


@pytest.mark.parametrize("fp, free_gb", [(AVG_POOL_45, 97), (SUM_47, 80)])
def test_the_other_full_size_problems_fit_in_what_was_free_beside_the_referee(fp, free_gb):
    plan = plan_memory(free_gb * GB, fp, _self_check(fp))
    assert plan.fits and plan.needed_bytes <= 0.9 * free_gb * GB


def test_the_summary_names_the_stage_of_the_peak():
    plan = plan_memory(100 * GB, RELU_19, _self_check(RELU_19))
    assert plan.peak_stage in ("reference", "shipping", "timing inputs", "timing")
    assert f"({plan.peak_stage})" in plan.summary()


def test_kept_rechecks_leave_the_cross_job_cache_and_the_referees_timed_judging_their_bytes():
    from cudaperf.execute.memory_plan import HEADROOM, recheck_budget_bytes, referee_timed_bytes

    for fp, free in ((RELU_19, 100 * GB), (RELU_19, H200_FREE), (SMALL, H200_FREE), (TIMING_BOUND, 60 * GB)):
        plan = plan_memory(free, fp, _self_check(fp))
        budget = recheck_budget_bytes(plan, fp)
        spare = int(plan.free_bytes * HEADROOM) - plan.needed_bytes
        assert budget == 0 or budget + plan.cache_bytes + referee_timed_bytes(fp, plan.input_sets) <= spare


def test_a_full_size_relu_keeps_no_later_output_at_100_gb_free():
    from cudaperf.execute.memory_plan import recheck_budget_bytes

    # the 18 GB the plan leaves are the cross-job cache's (references one at a time: this job's own are
    # kept there), and the referee's model runs on each timing set while the copies would be held
    plan = plan_memory(100 * GB, RELU_19, _self_check(RELU_19))
    assert recheck_budget_bytes(plan, RELU_19) == 0
def test_a_small_task_keeps_every_recheck_the_protocol_allows():
    from cudaperf.execute.memory_plan import recheck_budget_bytes
    from cudaperf.execute.outputs import KEPT_RECHECKS

    plan = plan_memory(H200_FREE, SMALL, _self_check(SMALL))
    assert recheck_budget_bytes(plan, SMALL) >= KEPT_RECHECKS * plan.input_sets * SMALL.output_bytes


def test_unseen_sets_are_bounded_by_the_host_bytes():
    from cudaperf.execute.memory_plan import UNSEEN_HOST_BYTES, unseen_sets_allowed

    fp = Footprint(input_bytes=UNSEEN_HOST_BYTES // 2, output_bytes=1)
    assert unseen_sets_allowed(5, fp, None) == 2


def test_unseen_sets_are_bounded_by_the_spare_device_bytes_two_outputs_each_with_a_referee():
    from cudaperf.execute.memory_plan import unseen_sets_allowed

    fp = Footprint(input_bytes=1, output_bytes=100)
    assert unseen_sets_allowed(5, fp, 450) == 4
    assert unseen_sets_allowed(5, fp, 450, refereed=True) == 2


def test_an_unseen_round_s_own_input_set_comes_out_of_the_spare_device_bytes():
    from cudaperf.execute.memory_plan import unseen_device_bytes, unseen_sets_allowed

    fp = Footprint(input_bytes=300, output_bytes=100)
    assert unseen_sets_allowed(5, fp, 450) == 1  # 300 for the round's set, 100 for one expected output
    assert unseen_device_bytes(fp, 1, refereed=False) == 400 and unseen_device_bytes(fp, 0, False) == 0


def test_unseen_sets_drawn_on_the_gpu_are_not_bounded_by_the_host_bytes():
    from cudaperf.execute.memory_plan import UNSEEN_HOST_BYTES, unseen_sets_allowed

    fp = Footprint(input_bytes=UNSEEN_HOST_BYTES // 2, output_bytes=1)
    assert unseen_sets_allowed(5, fp, None, on_host=False) == 5
