"""The order of SFT's training examples as a function of the seed and the epoch alone.

transformers' own samplers draw each epoch's order from the global random generator when the epoch's
iteration starts. A run resumed inside an epoch restores that generator only after the resumed epoch's
order is drawn, so it draws another order than the run that never stopped, and its skipped batches are
not the ones it trained on (found with a checkpoint one batch into an epoch: the resumed run trained on
the first epoch's order again). Here each epoch's order comes from a generator seeded with the run's seed
and the epoch (`set_epoch`, which the trainer calls at every epoch's start), so a resumed run, on this
machine or another, takes up the same order. Length grouping (batches of similar lengths, less padding)
uses transformers' grouping of those indices.

Covers: the sampler. Not covered: the trainer's skipping of the batches already trained on (transformers).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch.utils.data import Sampler

EPOCH_STRIDE = 1_000_003  # seed x stride + epoch: distinct generator seeds for every (seed, epoch) in use


class EpochOrderSampler(Sampler[int]):
    """Indices of `lengths`' examples in an order fixed by (`seed`, epoch): grouped by length in
    mega-batches of `batch_size` (transformers' grouping) when `group_by_length`, else a permutation."""

    def __init__(self, lengths: Sequence[int], batch_size: int, seed: int, group_by_length: bool) -> None:
        self.lengths, self.batch_size, self.seed = list(lengths), batch_size, seed
        self.group_by_length, self.epoch = group_by_length, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def order(self, epoch: int) -> list[int]:
        generator = torch.Generator().manual_seed(self.seed * EPOCH_STRIDE + epoch)
        if self.group_by_length:
            from transformers.trainer_pt_utils import get_length_grouped_indices

            return list(get_length_grouped_indices(self.lengths, self.batch_size, generator=generator))
        return torch.randperm(len(self.lengths), generator=generator).tolist()

    def __iter__(self) -> Iterator[int]:
        return iter(self.order(self.epoch))

    def __len__(self) -> int:
        return len(self.lengths)


__all__ = ["EpochOrderSampler"]
