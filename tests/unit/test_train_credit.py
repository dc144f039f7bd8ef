"""Per-turn credit as TRL sees it: one reward per sample (Kevin's discounted returns, `train/credit.py`)."""

from __future__ import annotations

import pytest

from cudaperf.train.credit import TurnReturnReward, sample_rewards


def test_turn_credit_gives_each_turn_its_discounted_return():
    rewards = sample_rewards([0.0, 0.3, 1.3], [True, True, True], "turn", gamma=0.4)
    assert rewards == pytest.approx([0.4 * 0.3 + 0.16 * 1.3, 0.3 + 0.4 * 1.3, 1.3])


def test_max_mode_takes_the_best_discounted_later_score():
    rewards = sample_rewards([0.2, 1.0], [True, True], "turn", gamma=0.5, mode="max")
    assert rewards == pytest.approx([0.5, 1.0])


def test_not_applicable_turn_has_no_reward_and_adds_nothing_earlier():
    rewards = sample_rewards([0.3, 5.0, 1.0], [True, False, True], "turn", gamma=0.5)
    assert rewards == pytest.approx([0.3 + 0.25 * 1.0, None, 1.0])


def test_trajectory_credit_is_the_first_turns_return():
    assert sample_rewards([0.0, 1.0], [True, True], "trajectory", gamma=0.4) == pytest.approx([0.4])


def test_trajectory_without_applicable_turn_has_no_reward():
    assert sample_rewards([0.0, 0.0], [False, False], "trajectory", gamma=0.4) == [None]


def test_reward_function_returns_the_rollouts_returns_and_logs_components():
    logged = {}
    values = TurnReturnReward()(["p"] * 3, ["c"] * 3, turn_return=[0.5, None, 1.0],
                                reward_speedup_term=[0.2, 0.0, 0.4], turn_correct=[1.0, 0.0, 1.0],
                                log_metric=lambda k, v: logged.__setitem__(k, v))
    assert values == [0.5, None, 1.0]
    assert logged["reward/speedup_term"] == pytest.approx(0.2)
    assert logged["reward/turn_correct"] == pytest.approx(2 / 3)


def test_reward_function_without_the_rollout_column_fails_loudly():
    with pytest.raises(KeyError, match="turn_return"):
        TurnReturnReward()(["p"], ["c"])


def test_best_so_far_scores_a_failed_refinement_with_the_kernel_held_before_it():
    rewards = sample_rewards([1.0, 0.0], [True, True], "turn", gamma=0.4, turn_score="best_so_far")
    assert rewards == pytest.approx([1.0 + 0.4 * 1.0, 1.0])


def test_best_so_far_scores_an_improvement_with_its_own_score():
    rewards = sample_rewards([1.0, 1.2], [True, True], "turn", gamma=0.4, turn_score="best_so_far")
    assert rewards == pytest.approx([1.0 + 0.4 * 1.2, 1.2])


def test_best_so_far_keeps_a_not_applicable_turn_out_of_earlier_returns():
    rewards = sample_rewards([1.0, 5.0, 0.0], [True, False, True], "turn", gamma=0.5,
                             turn_score="best_so_far")
    assert rewards == pytest.approx([1.0 + 0.25 * 1.0, None, 1.0])


def test_an_unknown_turn_score_is_refused():
    with pytest.raises(ValueError, match="turn_score"):
        sample_rewards([1.0], [True], "turn", gamma=0.4, turn_score="mean")


def test_best_so_far_leaves_a_flagged_turn_its_own_score():
    rewards = sample_rewards([1.0, 0.0], [True, True], "turn", gamma=0.4, turn_score="best_so_far",
                             flagged=[False, True])
    assert rewards == pytest.approx([1.0, 0.0])


def test_only_a_policy_violation_keeps_its_own_score_under_best_so_far():
    from cudaperf.train.credit import keeps_own_score
    from cudaperf.types import Outcome

    assert [o for o in Outcome if keeps_own_score(o)] == [Outcome.POLICY_VIOLATION]
