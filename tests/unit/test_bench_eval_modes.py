"""benchmarks/eval_modes.py: the candidate mix and the summary (the runs themselves: the benchmark, on the
GPU machine or with --cpu)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from eval_modes import BARRIERS, RlArm, _in_kernel, arms, gpu_candidates, repeatability, summarise

KERNEL = 'SRC = r"""\nextern "C" __global__ void k(float* o) {\n    o[0] = 1.0f;\n}\n"""\n'


def test_a_line_is_put_first_in_the_first_kernels_body():
    assert _in_kernel(KERNEL, "return;").splitlines()[1:3] == ['extern "C" __global__ void k(float* o) {',
                                                               "    return;"]


def test_kernels_with_barriers_or_shuffles_are_recognised():
    assert BARRIERS.search("__syncthreads();") and BARRIERS.search("__shfl_down_sync(m, v, 1)")
    assert not BARRIERS.search("o[i] = a[i] + b[i];")


def test_the_gpu_mix_has_right_wrong_and_failing_candidates_of_both_kinds():
    from eval_modes import dataset_tasks

    tasks = dataset_tasks(2, 2)
    kinds = {c.kind for c in gpu_candidates(tasks)}
    assert kinds == {"right", "wrong", "build_error", "raises", "syntax"}
    assert {t.kind.value for _, t in tasks} == {"pytorch", "c"}


def _row(mode: str, speedup: float, outcome: str = "correct") -> dict:
    return {"mode": mode, "evals_per_min": 100.0 if mode == "rl" else 25.0,
            "speedups": {"s": {"eager": speedup}}, "outcomes": {"s": outcome}, "ci95_rel_median": 0.01,
            "samples_median": 40, "timing_s_median": 0.1}


def test_repeatability_is_the_median_relative_change_from_the_first_repeat():
    rows = [_row("rl", 2.0), _row("rl", 2.2), _row("rl", 1.9)]
    assert repeatability(rows)["median_abs_delta"] == pytest.approx(0.075)


def test_the_summary_names_candidates_whose_verdicts_differ_between_runs():
    summary = summarise([_row("default", 2.0), _row("rl", 2.0, "incorrect")])
    assert summary["differing"] == {"s": ["correct", "incorrect"]} and summary["rl_vs_default"] == 4.0


def test_an_arm_marked_r_leaves_the_gate_at_the_result():
    arm = RlArm.parse("8/5r")
    assert arm == RlArm(8, 5.0, True) and arm.name == "rl-w8-b5-r"
    assert RlArm.parse("8r").name == "rl-w8-r" and not RlArm.parse("8").release_at_result


def test_an_arm_marked_a_binds_threads_to_workers_with_task_affinity():
    assert RlArm.parse("8a") == RlArm(8, None, False, True)
    assert RlArm.parse("8/5ar") == RlArm(8, 5.0, True, True) and RlArm.parse("8/5ra").name == "rl-w8-b5-r-a"


def test_an_arm_marked_p_plans_the_baselines_at_the_go_ahead():
    assert RlArm.parse("8p") == RlArm(8, None, False, False, True) and RlArm.parse("8p").name == "rl-w8-p"
    assert not RlArm.parse("8ra").plan_at_go_ahead


def test_an_arm_marked_n_turns_the_referees_shared_store_of_c_references_off():
    assert RlArm.parse("8").shared_references and not RlArm.parse("8n").shared_references
    assert RlArm.parse("8/5rn") == RlArm(8, 5.0, True, False, False, False)
    assert RlArm.parse("8n").name == "rl-w8-n" and RlArm.parse("8pn").name == "rl-w8-p-n"


def test_the_rl_mode_runs_once_per_worker_count_and_the_best_arm_is_set_against_default():
    four, eight = RlArm.parse("4"), RlArm.parse("8/5")
    assert eight == RlArm(8, 5.0) and (four.name, eight.name) == ("rl-w4", "rl-w8-b5")
    assert arms([four, eight]) == [("default", "default", None), ("rl-w4", "rl", four),
                                   ("rl-w8-b5", "rl", eight)]
    assert arms([four]) == [("default", "default", None), ("rl", "rl", four)]
    rows = [{**_row("default", 2.0), "arm": "default"},
            {**_row("rl", 2.0), "arm": "rl-w4", "evals_per_min": 50.0},
            {**_row("rl", 2.0), "arm": "rl-w8", "evals_per_min": 75.0}]
    summary = summarise(rows)
    assert summary["arms"] == ["default", "rl-w4", "rl-w8"] and summary["rl_vs_default"] == 3.0


def test_speedups_against_cached_baselines_are_held_against_the_default_modes_both_ways():
    from eval_modes import against_default

    rl = {"speedups": {"s": {"compile": 0.9, "eager": 2.0}}, "through_anchor": {"s": {"compile": 1.05}}}
    default = {"speedups": {"s": {"compile": 1.0, "eager": 2.0}}}
    got = against_default([rl], [default, default])
    assert got["pairs"] == 2
    assert got["reported"]["median_ratio"] == pytest.approx(0.9)
    assert got["through_anchor"]["median_abs_delta"] == pytest.approx(0.05)


def test_copies_come_in_rounds_with_distinct_texts_and_ids():
    from eval_modes import Candidate, copies

    base = [Candidate(0, "t/a", KERNEL, "right"), Candidate(1, "u/b", "x = 1\n", "wrong")]
    got = copies(base, 3)
    assert [c.solution_id for c in got[:3]] == ["t/a/copy-0", "u/b/copy-0", "t/a/copy-1"]
    assert len({c.source for c in got}) == 6 and {c.kind for c in got} == {"right", "wrong"}
    assert copies(base, 1) == base


def test_the_schedule_report_of_a_timed_pass_leaves_out_the_warm_pass():
    from eval_modes import timed_pass_share

    def report(checked, waits, ratios):
        records = [{"ratio": r} for r in ratios]
        return {"checked": checked, "timed": checked, "carriers": 1, "verdict_changed": 0,
                "gate_wait_s": {"shared": waits}, "gate_state_s": {"free": waits},
                "live_drift": {"n": len(records), "records": records}}

    got = timed_pass_share(report(10, 5.0, [1.5, 1.02, 0.97]), report(4, 2.0, [1.5]))
    assert (got["checked"], got["carriers"], got["gate_wait_s"], got["gate_state_s"]) == (
        6, 0, {"shared": 3.0}, {"free": 3.0})
    assert got["live_drift"]["n"] == 2 and got["live_drift"]["max_abs"] == pytest.approx(0.03)
    assert timed_pass_share({}, {}) == {}


def test_an_arm_may_time_only_the_baselines_a_reward_reads():
    arm = RlArm.parse("8pw")
    assert arm == RlArm(8, None, False, False, True, True, True) and arm.name == "rl-w8-p-w"
