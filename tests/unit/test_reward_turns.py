"""Multi-turn returns (Kevin): turn t gets Σ_{k≥t} γ^{k−t}·s_k ("sum") or max_{k≥t} γ^{k−t}·s_k ("max")."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cudaperf.reward import turn_returns

_scores = st.lists(st.floats(-10, 10), max_size=8)
_gammas = st.floats(0, 1)


def test_sum_worked_example():
    assert turn_returns([1.0, 2.0, 3.0], gamma=0.4) == pytest.approx(
        [1 + 0.4 * 2 + 0.16 * 3, 2 + 0.4 * 3, 3.0])


def test_max_worked_example():
    assert turn_returns([1.0, 0.0, 5.0], gamma=0.4, mode="max") == pytest.approx([1.0, 2.0, 5.0])


@given(_scores, _gammas)
def test_sum_matches_definition(scores, gamma):
    expected = [sum(gamma ** (k - t) * scores[k] for k in range(t, len(scores))) for t in range(len(scores))]
    assert turn_returns(scores, gamma, "sum") == pytest.approx(expected, abs=1e-9)


@given(_scores, _gammas)
def test_max_matches_definition(scores, gamma):
    expected = [max(gamma ** (k - t) * scores[k] for k in range(t, len(scores))) for t in range(len(scores))]
    assert turn_returns(scores, gamma, "max") == pytest.approx(expected, abs=1e-9)


@given(_scores)
def test_sum_with_gamma_zero_returns_the_scores(scores):
    assert turn_returns(scores, 0.0, "sum") == pytest.approx(scores)


def test_max_with_gamma_zero_floors_negative_turns_at_zero():
    # by definition later turns contribute 0^(k−t)·s_k = 0, so a negative turn followed by any turn gets 0
    assert turn_returns([-1.0, 0.0], 0.0, "max") == [0.0, 0.0]


@given(_scores, _gammas, st.sampled_from(["sum", "max"]))
def test_one_return_per_turn_and_last_is_its_score(scores, gamma, mode):
    returns = turn_returns(scores, gamma, mode)
    assert len(returns) == len(scores)
    if scores:
        assert returns[-1] == scores[-1]


@given(st.lists(st.floats(0, 10), min_size=1, max_size=8), _gammas)
def test_max_never_exceeds_sum_for_nonnegative_scores(scores, gamma):
    for m, s in zip(turn_returns(scores, gamma, "max"), turn_returns(scores, gamma, "sum"), strict=True):
        assert m <= s + 1e-9


@pytest.mark.parametrize("gamma", [-0.1, 1.5])
def test_gamma_outside_unit_interval_rejected(gamma):
    with pytest.raises(ValueError, match="gamma"):
        turn_returns([1.0], gamma)


def test_unknown_mode_rejected():
    with pytest.raises(ValueError, match="mode"):
        turn_returns([1.0], 0.4, "mean")
