"""Which trajectories' outcomes differ between two models on the same task and sampling seed
(`cudaperf.train.compare_table.trajectory_outcomes`, `paired_outcomes`): equal rates can hide tasks one
model solves and the other does not; and those outcomes counted by task family (`family_outcomes`)."""

from __future__ import annotations

from types import SimpleNamespace

from cudaperf.train.compare_table import (
    families_markdown,
    family_outcomes,
    outcomes_markdown,
    paired_outcomes,
    task_family,
    trajectory_outcomes,
)
from cudaperf.train.training_seeds import policy_name
from cudaperf.types import TaskKind


def _trajectory(task: str, sample: int, *turns: tuple[bool, str], speedup: float | None = None):
    return SimpleNamespace(task_id=task, sample=sample, turns=[
        SimpleNamespace(correct=c, response=r, speedup=speedup, baseline="naive",
                        result=SimpleNamespace(timings=())) for c, r in turns])


def test_a_tasks_trajectories_are_keyed_by_their_rank_not_their_sample_number():
    out = trajectory_outcomes([_trajectory("t", 5, (False, "a")), _trajectory("t", 2, (True, "b"))])
    assert list(out) == ["t#0", "t#1"] and out["t#0"][:2] == [True, True]


def test_a_fix_at_a_later_turn_counts_as_any_turn_correct_only():
    (outcome,) = trajectory_outcomes([_trajectory("t", 0, (False, "a"), (True, "b"))]).values()
    assert outcome[:2] == [False, True]


def test_the_same_first_reply_has_the_same_digest():
    a = trajectory_outcomes([_trajectory("t", 0, (False, "same"))])
    b = trajectory_outcomes([_trajectory("t", 0, (True, "same"))])
    assert a["t#0"][2] == b["t#0"][2]


def test_a_correct_timed_first_reply_keeps_its_speedup_and_an_untimed_one_none():
    timed = trajectory_outcomes([_trajectory("t", 0, (True, "a"), speedup=1.2)])
    wrong = trajectory_outcomes([_trajectory("t", 0, (False, "a"), speedup=1.2)])
    assert timed["t#0"][3:] == [1.2, False] and wrong["t#0"][3:] == [None, None]


def test_the_same_reply_timed_in_both_runs_gives_the_timings_drift():
    later = {"s": {0: {"a#0": [True, True, "x", 1.10, True], "b#0": [True, True, "y", 0.99, False],
                       "c#0": [True, True, "z", 1.5, True]}}}
    earlier = {"s": {0: {"a#0": [True, True, "x", 1.00, False], "b#0": [True, True, "y", 1.0, False],
                         "c#0": [True, True, "other", 1.0, False]}}}
    (row,) = paired_outcomes({"earlier": earlier, "later": later})
    assert (row["same_reply_timed"], row["same_reply_sure_differs"]) == (2, 1)
    assert row["same_reply_ratio_max"] == 1.1


def test_outcomes_kept_without_speedups_count_as_untimed():
    old = {"s": {0: {"a#0": [True, True, "x"]}}}
    new = {"s": {0: {"a#0": [True, True, "x", 1.0, False]}}}
    (row,) = paired_outcomes({"old": old, "new": new})
    assert (row["same_first_reply"], row["same_reply_timed"], row["same_reply_ratio_max"]) == (1, 0, None)


def _runs(**models):
    return {name: {"s": {0: trajectory_outcomes(trs)}} for name, trs in models.items()}


OUTCOMES = _runs(
    sft=[_trajectory("a", 0, (True, "x")), _trajectory("b", 0, (False, "y"), (False, "y2")),
         _trajectory("c", 0, (False, "z"), (True, "z2"))],
    rl=[_trajectory("a", 0, (False, "x2"), (False, "x3")), _trajectory("b", 0, (True, "y")),
        _trajectory("c", 0, (False, "z"), (True, "z2"))])


def test_pairs_count_where_only_one_model_is_correct():
    (row,) = paired_outcomes(OUTCOMES)
    assert (row["what"], row["pairs"], row["first_later_only"], row["first_earlier_only"]) == \
        ("rl vs sft", 3, 1, 1)


def test_pairs_count_any_turn_and_the_same_first_replies():
    (row,) = paired_outcomes(OUTCOMES)
    assert (row["best_later_only"], row["best_earlier_only"], row["same_first_reply"]) == (1, 1, 2)


def test_only_trajectories_both_models_ran_are_paired():
    outcomes = {**OUTCOMES, "rl": {"s": {0: {k: v for k, v in OUTCOMES["rl"]["s"][0].items() if k != "a#0"},
                                         1: OUTCOMES["rl"]["s"][0]}}}
    assert paired_outcomes(outcomes)[0]["pairs"] == 2


def test_two_training_seeds_of_one_policy_are_not_paired():
    outcomes = {"rl@seed0": OUTCOMES["sft"], "rl@seed1": OUTCOMES["rl"]}
    assert paired_outcomes(outcomes, policy_of=policy_name) == []


def test_the_markdown_has_a_row_a_comparison():
    text = outcomes_markdown(paired_outcomes(OUTCOMES))
    assert "| s | rl vs sft | 3 | 2 | 1 | 1 | 1 | 1 | 0 | - | 0 |" in text and outcomes_markdown([]) == ""


FAMILIES = {"a": "c/gemv", "b": "c/gemv", "c": "pytorch/softmax"}


def test_a_task_family_is_its_kind_and_family():
    assert task_family(SimpleNamespace(kind=TaskKind.C, family="gemv")) == "c/gemv"


def test_a_task_without_a_family_is_named_with_a_dash():
    assert task_family(SimpleNamespace(kind=TaskKind.PYTORCH, family=None)) == "pytorch/-"


def test_outcomes_are_counted_per_family_and_model():
    rows = family_outcomes(OUTCOMES, FAMILIES)
    gemv = {r["model"]: (r["trajectories"], r["first_turn_correct"], r["any_turn_correct"])
            for r in rows if r["family"] == "c/gemv"}
    assert gemv == {"sft": (2, 1, 1), "rl": (2, 1, 1)}


def test_a_later_turns_fix_counts_at_any_turn_only():
    (row,) = [r for r in family_outcomes(OUTCOMES, FAMILIES) if (r["family"], r["model"]) ==
              ("pytorch/softmax", "rl")]
    assert (row["first_turn_correct"], row["any_turn_correct"]) == (0, 1)


def test_family_counts_sum_over_seeds():
    outcomes = {"m": {"s": {0: OUTCOMES["sft"]["s"][0], 1: OUTCOMES["sft"]["s"][0]}}}
    (row,) = [r for r in family_outcomes(outcomes, FAMILIES) if r["family"] == "c/gemv"]
    assert (row["trajectories"], row["first_turn_correct"]) == (4, 2)


def test_a_task_of_unknown_family_is_counted_under_a_question_mark():
    rows = family_outcomes(OUTCOMES, {"a": "c/gemv"})
    assert {r["family"] for r in rows} == {"c/gemv", "?"}


def test_without_families_there_is_no_table():
    assert family_outcomes(OUTCOMES, {}) == [] and families_markdown([]) == ""


def test_the_family_table_has_a_column_a_model():
    table = families_markdown(family_outcomes(OUTCOMES, FAMILIES))
    assert "| s | c/gemv | 1 of 2 (any turn 1) | 1 of 2 (any turn 1) |" in table

