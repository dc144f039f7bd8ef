"""The unified reward: each preset on hand-made results, the correctness gate, flags, coverage weighting,
config validation and the preset registry (structural score and turn returns have their own files)."""

from __future__ import annotations

import math
import sys
import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudaperf.reward import (
    PRESETS,
    RewardConfig,
    compute_reward,
    cudaperf,
    get_preset,
    is_applicable,
    resolve_config,
)
from cudaperf.types import (
    CoalescingClass,
    EvalResult,
    Flag,
    KernelFeatures,
    MemoryAccess,
    Occupancy,
    Outcome,
    ResourceUsage,
    Severity,
)


def result(outcome: Outcome = Outcome.CORRECT, eager: float | None = None, compiled: float | None = None,
           coverage: float | None = None, flags: tuple[Flag, ...] = ()) -> EvalResult:
    return EvalResult(task_id="t", solution_id="s", outcome=outcome, speedup_vs_eager=eager,
                      speedup_vs_compile=compiled, coverage=coverage, flags=flags)


def good_kernel(name: str = "k") -> KernelFeatures:
    """A kernel that is perfect on every structural component."""
    return KernelFeatures(
        kernel=name,
        resources=ResourceUsage(kernel=name, arch="sm_90", registers=32),
        occupancy=Occupancy(arch="sm_90", block_size=256, active_blocks_per_sm=8, occupancy=1.0),
        accesses=(MemoryAccess(1, "a[i]", "global", "load", CoalescingClass.COALESCED, 1, None, 4),),
        sass={"ldg128": 1}, dynamic={"roofline_fraction": 1.0}, roofline_regime="memory",
    )


def bad_kernel(name: str = "k") -> KernelFeatures:
    return KernelFeatures(
        kernel=name,
        resources=ResourceUsage(kernel=name, arch="sm_90", registers=255, stack_frame_bytes=4096,
                                spill_store_bytes=2048, spill_load_bytes=2048),
        occupancy=Occupancy(arch="sm_90", block_size=32, active_blocks_per_sm=1, occupancy=0.02),
        accesses=(MemoryAccess(1, "a[i*n]", "global", "load", CoalescingClass.UNCOALESCED),),
        sass={"ldl": 3}, dynamic={"roofline_fraction": 0.01}, roofline_regime="memory",
    )


ERROR_FLAG = Flag("impossible_speed", "faster than the speed of light", Severity.ERROR)
FAILURES = [o for o in Outcome if o is not Outcome.CORRECT]

# ------------------------------------------------------------------------------------------------
# kevin: 0.3·correct + speedup·correct


def test_kevin_correct_faster_is_bonus_plus_speedup():
    assert compute_reward(result(eager=2.0), config=get_preset("kevin")).total == pytest.approx(2.3)


def test_kevin_correct_slower_keeps_linear_speedup():
    assert compute_reward(result(eager=0.5), config=get_preset("kevin")).total == pytest.approx(0.8)


def test_kevin_ignores_compile_speedup():
    assert compute_reward(result(eager=2.0, compiled=0.1),
                          config=get_preset("kevin")).total == pytest.approx(2.3)


def test_kevin_untimed_correct_gets_bonus_only():
    b = compute_reward(result(), config=get_preset("kevin"))
    assert b.total == pytest.approx(0.3) and b.details["speedup_missing"] == 1.0


@pytest.mark.parametrize("outcome", FAILURES)
def test_kevin_any_failure_is_zero(outcome):
    assert compute_reward(result(outcome, eager=5.0), config=get_preset("kevin")).total == 0.0


def test_kevin_error_flag_is_zero():
    assert compute_reward(result(eager=5.0, flags=(ERROR_FLAG,)), config=get_preset("kevin")).total == 0.0


# ------------------------------------------------------------------------------------------------
# cuda-agent milestones: −1 wrong, 1 correct, 2 >5% faster than eager, 3 >5% faster than eager and compile


@pytest.mark.parametrize(("eager", "compiled", "expected"), [
    (1.0, 0.5, 1.0),
    (1.06, 0.9, 2.0),
    (1.06, 1.06, 3.0),
    (1.05, 1.05, 1.0),  # "more than 5%": exactly 5% is not enough
    (0.9, 2.0, 1.0),  # rungs are cumulative: beating compile alone is not a rung
    (1.2, None, 2.0),  # an unmeasured baseline is never beaten
    (None, None, 1.0),
])
def test_cuda_agent_milestones(eager, compiled, expected):
    b = compute_reward(result(eager=eager, compiled=compiled), config=get_preset("cuda-agent"))
    assert b.total == pytest.approx(expected)


@pytest.mark.parametrize("outcome", FAILURES)
def test_cuda_agent_any_failure_is_minus_one(outcome):
    assert compute_reward(result(outcome, eager=9.0, compiled=9.0),
                          config=get_preset("cuda-agent")).total == -1.0


def test_cuda_agent_error_flag_is_minus_one():
    r = result(eager=9.0, compiled=9.0, flags=(ERROR_FLAG,))
    assert compute_reward(r, config=get_preset("cuda-agent")).total == -1.0


# ------------------------------------------------------------------------------------------------
# cudaperf: 1 + ln clip(s, 0.5, 10) + 0.2·structure + 0.1·ranker, credit × coverage


def test_cudaperf_is_the_default_config():
    assert get_preset("cudaperf") == RewardConfig() == cudaperf()


def test_cudaperf_log_speedup_against_faster_baseline():
    b = compute_reward(result(eager=4.0, compiled=1.5))
    assert b.total == pytest.approx(1.0 + math.log(1.5))
    assert b.speedup_term == pytest.approx(math.log(1.5))


def test_cudaperf_clips_huge_speedups():
    assert compute_reward(result(eager=1000.0, compiled=1000.0)).total == pytest.approx(1.0 + math.log(10.0))


def test_cudaperf_slow_correct_still_beats_wrong():
    slow = compute_reward(result(eager=0.01, compiled=0.01)).total
    assert slow == pytest.approx(1.0 + math.log(0.5))
    assert slow > compute_reward(result(Outcome.INCORRECT)).total


def test_cudaperf_falls_back_to_eager_when_compile_not_measured():
    assert compute_reward(result(eager=2.0)).total == pytest.approx(1.0 + math.log(2.0))


def test_cudaperf_coverage_scales_speed_gain():
    assert compute_reward(result(eager=2.0, compiled=2.0, coverage=0.5)).speedup_term == pytest.approx(
        0.5 * math.log(2.0))


def test_cudaperf_coverage_never_softens_slowdown():
    assert compute_reward(result(eager=0.5, compiled=0.5,
                                 coverage=0.1)).speedup_term == pytest.approx(math.log(0.5))


def test_cudaperf_ranker_term_is_weighted_and_clipped():
    assert compute_reward(result(), ranker_score=1.0).ranker_term == pytest.approx(0.1)
    assert compute_reward(result(), ranker_score=7.0).ranker_term == pytest.approx(0.1)
    assert compute_reward(result(), ranker_score=float("nan")).ranker_term == 0.0


def test_cudaperf_perfect_structure_adds_structural_weight():
    b = compute_reward(result(eager=1.0, compiled=1.0), [good_kernel()])
    assert b.structural_term == pytest.approx(0.2)
    assert b.total == pytest.approx(1.2)


def test_cudaperf_structure_worth_less_than_25_percent_speedup():
    beautiful = compute_reward(result(eager=1.0, compiled=1.0), [good_kernel()]).total
    ugly_but_faster = compute_reward(result(eager=1.25, compiled=1.25), [bad_kernel()]).total
    assert ugly_but_faster > beautiful


@pytest.mark.parametrize("outcome", FAILURES)
def test_structure_never_credited_when_not_correct(outcome):
    b = compute_reward(result(outcome), [good_kernel()], config=RewardConfig(correctness_gate=False))
    assert b.structural_term == 0.0


def test_structure_zero_when_no_own_kernel_ran():
    b = compute_reward(result(coverage=0.0), [good_kernel()])
    assert b.structural_term == 0.0 and b.details["structural.no_own_kernel_ran"] == 1.0


def test_decoy_kernel_that_never_ran_earns_no_structure():
    times = {"void ugly(float*, int)": 1.0}  # the profiler saw only `ugly` run
    b = compute_reward(result(), [good_kernel("decoy"), bad_kernel("ugly")], kernel_time_ms=times)
    alone = compute_reward(result(), [bad_kernel("ugly")], kernel_time_ms=times)
    assert b.structural_term == pytest.approx(alone.structural_term)
    assert b.details["structural.never_launched"] == 1.0


def test_coverage_scales_structure():
    full = compute_reward(result(coverage=1.0), [good_kernel()]).structural_term
    half = compute_reward(result(coverage=0.5), [good_kernel()]).structural_term
    assert half == pytest.approx(full / 2)


def test_total_is_base_plus_terms():
    b = compute_reward(result(eager=3.0, compiled=2.0, coverage=0.8), [good_kernel()], ranker_score=0.7)
    assert b.total == pytest.approx(b.details["base"] + b.speedup_term + b.structural_term + b.ranker_term)


# ------------------------------------------------------------------------------------------------
# Gate and flags


def test_error_flag_closes_gate_even_if_correct():
    b = compute_reward(result(eager=3.0, flags=(ERROR_FLAG,)), [good_kernel()], ranker_score=1.0)
    assert b.gate == 0.0 and b.total == 0.0 and b.details["gating_flags"] == 1.0


def test_warning_flag_does_not_gate_by_default():
    flag = Flag("low_coverage", "most time in torch", Severity.WARNING)
    assert compute_reward(result(flags=(flag,))).gate == 1.0


def test_gate_flag_codes_gate_warnings():
    flag = Flag("low_coverage", "most time in torch", Severity.WARNING)
    assert compute_reward(result(flags=(flag,)),
                          config=RewardConfig(gate_flag_codes=("low_coverage",))).gate == 0.0


def test_error_flags_can_be_ungated():
    b = compute_reward(result(flags=(ERROR_FLAG,)), config=RewardConfig(gate_error_flags=False))
    assert b.gate == 1.0


def test_gate_off_ablation_pays_speed_to_incorrect_without_bonus():
    b = compute_reward(result(Outcome.INCORRECT, eager=2.0), config=RewardConfig(correctness_gate=False))
    assert b.total == pytest.approx(math.log(2.0)) and b.gate == 0.0


@pytest.mark.parametrize("outcome", [Outcome.SKIPPED, Outcome.HARNESS_ERROR])
def test_harness_outcomes_are_marked_not_applicable(outcome):
    assert not is_applicable(result(outcome))
    assert compute_reward(result(outcome)).details["applicable"] == 0.0


_floats = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True, width=64))
_flags = st.lists(st.builds(Flag, code=st.sampled_from(["impossible_speed", "x"]), message=st.just(""),
                            severity=st.sampled_from(list(Severity))), max_size=3).map(tuple)
_results = st.builds(EvalResult, task_id=st.just("t"), solution_id=st.just("s"),
                     outcome=st.sampled_from(list(Outcome)), speedup_vs_eager=_floats,
                     speedup_vs_compile=_floats, coverage=_floats, flags=_flags)


@settings(max_examples=150, deadline=None)
@given(r=_results, preset=st.sampled_from(sorted(PRESETS)), ranker=_floats)
def test_incorrect_never_scores_above_wrong_value(r, preset, ranker):
    config = get_preset(preset)
    b = compute_reward(r, [good_kernel()], ranker, config)
    if r.outcome is not Outcome.CORRECT:
        assert b.total <= config.wrong_reward


@settings(max_examples=150, deadline=None)
@given(r=_results, preset=st.sampled_from(sorted(PRESETS)), ranker=_floats)
def test_error_flag_always_gates(r, preset, ranker):
    config = get_preset(preset)
    flagged = EvalResult(**{**r.__dict__, "flags": (*r.flags, ERROR_FLAG)})
    b = compute_reward(flagged, [good_kernel()], ranker, config)
    assert b.gate == 0.0 and b.total == config.wrong_reward


@settings(max_examples=150, deadline=None)
@given(r=_results, preset=st.sampled_from(sorted(PRESETS)), ranker=_floats)
def test_correct_total_within_config_bounds(r, preset, ranker):
    config = get_preset(preset)
    b = compute_reward(r, [good_kernel(), bad_kernel("b")], ranker, config)
    assert math.isfinite(b.total)
    if b.gate == 1.0:
        assert config.wrong_reward <= config.min_correct_total <= b.total <= config.max_total + 1e-9


# ------------------------------------------------------------------------------------------------
# Config validation: impossible combinations are rejected with the fields and the fix


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"speedup_transform": "log", "clip_min": None}, ["clip_min"]),
    ({"clip_min": 2.0, "clip_max": 1.0}, ["clip_min", "clip_max"]),
    ({"speedup_transform": "clipped", "clip_min": None, "clip_max": None}, ["clipped", "linear"]),
    ({"speedup_transform": "milestones", "milestone_thresholds": ()}, ["milestone_thresholds"]),
    ({"speedup_transform": "milestones", "milestone_thresholds": (2.0, 1.5)}, ["increasing"]),
    ({"speedup_transform": "cubic"}, ["speedup_transform"]),
    ({"baseline": "cuBLAS"}, ["baseline"]),
    ({"structural_weight": -0.1}, ["structural_weight"]),
    ({"clip_min": 0.0}, ["clip_min"]),
    ({"correct_bonus": 0.1}, ["wrong_reward", "correct_bonus", "clip_min"]),
])
def test_impossible_config_rejected_naming_fields(kwargs, words):
    with pytest.raises(ValueError) as exc:
        RewardConfig(**kwargs)
    for word in words:
        assert word in str(exc.value)


def test_correct_never_below_wrong_is_enforced_for_negative_wrong_reward():
    RewardConfig(speedup_transform="linear", clip_min=None, clip_max=None, correct_bonus=0.0,
                 wrong_reward=-1.0)


# ------------------------------------------------------------------------------------------------
# Registry


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(ValueError, match="cuda-agent"):
        get_preset("kevln")


def test_preset_names_accept_underscores():
    assert get_preset("cuda_agent") == get_preset("cuda-agent")


def test_dotted_path_to_a_function():
    assert get_preset("cudaperf.reward:kevin") == get_preset("kevin")


def test_dotted_path_to_a_config_instance(monkeypatch):
    module = types.ModuleType("my_presets")
    module.MINE = RewardConfig(structural_weight=0.05)
    monkeypatch.setitem(sys.modules, "my_presets", module)
    assert get_preset("my_presets:MINE").structural_weight == 0.05


def test_dotted_path_to_something_else_is_a_type_error():
    with pytest.raises(TypeError, match="RewardConfig"):
        get_preset("math:pi")


def test_dotted_path_that_does_not_import_says_so():
    with pytest.raises(ValueError, match="cannot import"):
        get_preset("no_such_module_xyz:f")


def test_resolve_config_none_is_cudaperf():
    assert resolve_config(None) == cudaperf()


def test_c_task_speed_is_measured_against_the_naive_cuda_port():
    import dataclasses

    from cudaperf.reward import compute_reward, get_preset
    from cudaperf.types import EvalResult, Outcome

    base = EvalResult(task_id="t", solution_id="s", outcome=Outcome.CORRECT)
    faster = dataclasses.replace(base, speedups={"naive_cuda": 4.0, "serial_c": 200.0})
    slower = dataclasses.replace(base, speedups={"naive_cuda": 0.5, "serial_c": 25.0})
    config = get_preset("kevin")
    assert compute_reward(faster, config=config).total > compute_reward(slower, config=config).total


@pytest.mark.parametrize("preset", ["cudaperf", "kevin", "cuda-agent"])
def test_no_reward_reads_a_baseline_outside_speedup_baselines(preset):
    import dataclasses

    from cudaperf.reward import SPEEDUP_BASELINES, compute_reward, get_preset
    from cudaperf.types import EvalResult, Outcome

    base = EvalResult(task_id="t", solution_id="s", outcome=Outcome.CORRECT,
                      speedups={"naive_cuda": 2.0}, speedup_vs_eager=2.0, speedup_vs_compile=1.5)
    other = dataclasses.replace(base, speedups={**base.speedups, "serial_c": 300.0})
    assert "serial_c" not in SPEEDUP_BASELINES
    config = get_preset(preset)
    assert compute_reward(other, config=config) == compute_reward(base, config=config)
