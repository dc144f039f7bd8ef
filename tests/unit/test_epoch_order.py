"""SFT's example order (`train.epoch_order`): a function of the seed and the epoch alone, whatever the
global random generator holds, so a run resumed inside an epoch takes up the order it stopped in (the
resumed run itself: tests/unit/test_carried_state.py)."""

from __future__ import annotations

import pytest
import torch

from cudaperf.train.epoch_order import EpochOrderSampler

LENGTHS = [5, 90, 12, 40, 7, 66, 3, 25, 80, 18, 33, 61]


@pytest.mark.parametrize("grouped", [True, False])
def test_an_epochs_order_ignores_the_global_generator(grouped):
    sampler = EpochOrderSampler(LENGTHS, 2, seed=3, group_by_length=grouped)
    sampler.set_epoch(1)
    torch.manual_seed(0)
    first = list(sampler)
    torch.manual_seed(12345)
    assert list(sampler) == first


@pytest.mark.parametrize("grouped", [True, False])
def test_each_epoch_is_a_permutation_of_every_example(grouped):
    sampler = EpochOrderSampler(LENGTHS, 2, seed=3, group_by_length=grouped)
    assert sorted(sampler.order(4)) == list(range(len(LENGTHS)))


def test_epochs_and_seeds_draw_different_orders():
    orders = {tuple(EpochOrderSampler(LENGTHS, 2, seed, True).order(epoch))
              for seed in (0, 1) for epoch in (0, 1)}
    assert len(orders) == 4
