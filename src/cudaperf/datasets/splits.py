"""Train / validation / test splits by whole task families (split groups), so that generalisation to
unseen kinds of problems is measurable: no group has tasks in two splits.

Each task kind is split on its own (both kinds get held-out groups). Groups are shuffled by the seed,
then test and validation take whole groups until they hold about their share of tasks (never more
than twice it), and train keeps the rest.

Tasks of a fresh family (`registry.fresh_families()`, held out of the dataset) get the split "fresh" and
take no part in the shuffle, so listing them never moves a dataset task to another split.

Not covered: splits within a family (by shape or dtype): not wanted here, they leak.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import numpy as np

from cudaperf.datasets.records import GeneratedTask
from cudaperf.datasets.registry import group_of, is_fresh

SPLITS = ("train", "val", "test")
FRESH_SPLIT = "fresh"


def assign_groups(sizes: dict[str, int], seed: int = 0, val_frac: float = 0.1,
                  test_frac: float = 0.15) -> dict[str, str]:
    """group -> split. Deterministic in (sizes, seed); train always keeps at least one group."""
    groups = sorted(sizes)
    order = [groups[i] for i in np.random.default_rng(seed).permutation(len(groups))]
    total = sum(sizes.values())
    targets = {"test": test_frac * total, "val": val_frac * total}
    filled = Counter()
    out: dict[str, str] = {}
    for g in order:
        out[g] = "train"
        for split in ("test", "val"):
            fits = filled[split] + sizes[g] <= 2 * targets[split]
            if filled[split] < targets[split] and fits:
                out[g] = split
                filled[split] += sizes[g]
                break
    if "train" not in out.values() and out:  # everything held out: give the largest group back to train
        out[max(sizes, key=sizes.get)] = "train"
    return out


def split_tasks(tasks: Iterable[GeneratedTask], seed: int = 0, val_frac: float = 0.1,
                test_frac: float = 0.15) -> dict[str, str]:
    """task_id -> split, each kind split by its own groups."""
    tasks = list(tasks)
    out: dict[str, str] = {t.task_id: FRESH_SPLIT for t in tasks if is_fresh(t.family)}
    tasks = [t for t in tasks if t.task_id not in out]
    for kind in {t.kind for t in tasks}:
        mine = [t for t in tasks if t.kind is kind]
        sizes = Counter(group_of(t) for t in mine)
        by_group = assign_groups(dict(sizes), seed, val_frac, test_frac)
        out.update({t.task_id: by_group[group_of(t)] for t in mine})
    return out
