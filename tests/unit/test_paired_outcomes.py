"""Which trajectories' outcomes differ between two models on the same task and sampling seed
(`cudaperf.train.compare_table.trajectory_outcomes`, `paired_outcomes`): equal rates can hide tasks one
model solves and the other does not."""

from __future__ import annotations

from types import SimpleNamespace

from cudaperf.train.compare_table import outcomes_markdown, paired_outcomes, trajectory_outcomes
from cudaperf.train.training_seeds import policy_name


def _trajectory(task: str, sample: int, *turns: tuple[bool, str]):
    return SimpleNamespace(task_id=task, sample=sample,
                           turns=[SimpleNamespace(correct=c, response=r) for c, r in turns])


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
    assert "| s | rl vs sft | 3 | 2 | 1 | 1 | 1 | 1 |" in text and outcomes_markdown([]) == ""
