"""The pure parts of the verl adapter, without verl: turn segments of a response mask, where turn scores sit,
and the turn-level advantage arithmetic (Kevin's discounted returns, group-relative over every turn)."""

from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from cudaperf.train.verl_adapter.credit import (  # noqa: E402
    score_positions,
    segment_scores,
    turn_level_advantages,
    turn_segments,
)

#        reply0    feedback  reply1   pad
MASK = [1, 1, 1, 0, 0, 0, 1, 1, 0, 0]


def test_segments_are_the_runs_of_generated_tokens():
    assert turn_segments(MASK) == [(0, 3), (6, 8)]
    assert turn_segments([0, 0]) == [] and turn_segments([1, 1]) == [(0, 2)]


def test_scores_sit_on_the_last_token_of_each_reply():
    assert score_positions(MASK) == [2, 7]


def test_segment_score_counts_everything_up_to_the_next_reply():
    rewards = torch.tensor([0.0, 0, 0.5, 0, 0, 0.1, 0, 2.0, 0, 0])
    assert segment_scores(rewards, turn_segments(MASK)) == pytest.approx([0.6, 2.0])


def test_advantages_are_group_relative_discounted_returns_on_reply_tokens_only():
    mask = torch.tensor([MASK, MASK])
    rewards = torch.zeros(2, 10)
    rewards[0, 2], rewards[0, 7] = 0.0, 1.0  # wrong, then right
    rewards[1, 2], rewards[1, 7] = 1.0, 0.0  # right, then wrong
    adv, ret = turn_level_advantages(rewards, mask, ["t", "t"], gamma=0.4)
    returns = [0.4, 1.0, 1.0, 0.0]  # G_0 = s_0 + 0.4 s_1, G_1 = s_1
    mean = sum(returns) / 4
    std = (sum((g - mean) ** 2 for g in returns) / 3) ** 0.5
    expected = [(g - mean) / (std + 1e-6) for g in returns]
    assert adv[0, 0].item() == pytest.approx(expected[0], abs=1e-5)
    assert adv[0, 6].item() == pytest.approx(expected[1], abs=1e-5)
    assert adv[1, 0].item() == pytest.approx(expected[2], abs=1e-5)
    assert adv[1, 7].item() == pytest.approx(expected[3], abs=1e-5)
    assert ret[0, 0].item() == pytest.approx(0.4) and ret[0, 7].item() == pytest.approx(1.0)
    assert adv[:, 3:6].abs().sum().item() == 0 and adv[:, 8:].abs().sum().item() == 0


def test_groups_do_not_share_statistics():
    mask = torch.tensor([[1, 0], [1, 0]])
    rewards = torch.tensor([[1.0, 0], [0.0, 0]])
    adv, _ = turn_level_advantages(rewards, mask, ["a", "b"], gamma=0.4)
    assert adv[0, 0].item() == pytest.approx(1.0, abs=1e-5) and adv[1, 0].item() == 0.0  # mean 0, std 1


def test_no_std_division_when_asked():
    mask = torch.tensor([[1, 0, 1], [1, 0, 1]])
    rewards = torch.tensor([[0.0, 0, 1.0], [0.0, 0, 0.0]])
    adv, _ = turn_level_advantages(rewards, mask, ["t", "t"], gamma=0.5, norm_by_std=False)
    assert adv[0].tolist() == pytest.approx([0.5 - 0.375, 0.0, 1.0 - 0.375])


def test_importing_the_adapter_package_does_not_import_verl():
    code = ("import sys, cudaperf.train.verl_adapter, cudaperf.train.verl_adapter.reward, "
            "cudaperf.train.verl_adapter.data, cudaperf.train.verl_adapter.evaluators; "
            "print('verl' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
