"""Contrastive pairs from the measured table, and the splits that evaluate them honestly.

A pair is two rows of the same task and configuration, both correct, whose median times differ beyond
measurement noise: the slower's median exceeds the faster's by at least `NOISE_FLOOR` (the run-to-run
drift of medians measured on the H200 is a few percent) and the two medians' notches do not overlap
(McGill's box-plot notch, median +- 1.57 IQR / sqrt(n): an approximate 95% interval of a median).
Orientation is balanced: a seeded coin decides which row is `a`, so "a is faster" holds for half the
pairs and a model cannot win by predicting one side.

Splits, both by whole split groups (`Table.group`, the unit `cudaperf.datasets.splits` holds out):
`lofo_folds` leaves one group out at a time (families that share a group, such as the C reductions,
are held out together), `dataset_split` uses the dataset's own train / val / test assignment.
`length_controlled` keeps pairs whose sources differ in length by under 10%: there the dataset's
artefact (the naive template is always the shortest) cannot decide.

Not covered: model-written pairs (they need the agent's kernels measured on the H200).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from cudaperf.ranker.table import Table

NOISE_FLOOR = 1.05  # below a 5% gap the median of a single run is not a reliable winner on the H200
NOTCH = 1.57
GAP_BUCKETS = (1.2, 1.5, 2.0)
LENGTH_TOLERANCE = 0.10


@dataclass(frozen=True)
class Pairs:
    """Aligned arrays: `a`, `b` row indices into the table, `a_faster` the label, `ratio` slower/faster."""

    a: np.ndarray
    b: np.ndarray
    a_faster: np.ndarray  # bool
    ratio: np.ndarray
    group: np.ndarray  # object array of split groups
    family: np.ndarray  # object array of families

    def __len__(self) -> int:
        return len(self.a)

    def select(self, mask: np.ndarray) -> Pairs:
        return Pairs(
            self.a[mask],
            self.b[mask],
            self.a_faster[mask],
            self.ratio[mask],
            self.group[mask],
            self.family[mask],
        )


def make_pairs(table: Table, *, min_ratio: float = NOISE_FLOOR, seed: int = 0) -> Pairs:
    """Every pair of rows of one (task, configuration) whose gap is at least `min_ratio` and beyond noise."""
    rng = np.random.default_rng(seed)
    groups: dict[tuple[str, str], list[int]] = {}
    for i, (task, config, _) in enumerate(table.keys):
        groups.setdefault((task, config), []).append(i)
    a, b, ratio = [], [], []
    for rows in groups.values():
        idx = np.asarray(rows)
        t = table.time_ms[idx]
        noise = NOTCH * table.rel_iqr[idx] / np.sqrt(table.n_samples[idx])
        for p in range(len(idx)):
            for q in range(p + 1, len(idx)):
                fast, slow = (p, q) if t[p] <= t[q] else (q, p)
                r = t[slow] / t[fast]
                if r >= min_ratio and r > 1.0 + noise[fast] + noise[slow]:
                    a.append(idx[fast])
                    b.append(idx[slow])
                    ratio.append(r)
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    flip = rng.random(len(a)) < 0.5
    a2, b2 = np.where(flip, b, a), np.where(flip, a, b)
    fam = np.asarray(table.family, dtype=object)
    grp = np.asarray(table.group, dtype=object)
    return Pairs(
        a2, b2, ~flip, np.asarray(ratio), grp[a2] if len(a2) else grp[:0], fam[a2] if len(a2) else fam[:0]
    )


def lofo_folds(table: Table) -> Iterator[tuple[str, np.ndarray]]:
    """(held-out group, boolean mask of its rows) for every split group of the table."""
    groups = np.asarray(table.group, dtype=object)
    for g in sorted(set(table.group)):
        yield g, groups == g


def dataset_split(table: Table) -> tuple[np.ndarray, np.ndarray]:
    """(train rows, test rows): train and val tasks train; test tasks (held-out families) test."""
    split = np.asarray(table.split, dtype=object)
    return split != "test", split == "test"


def length_controlled(table: Table, pairs: Pairs, tolerance: float = LENGTH_TOLERANCE) -> np.ndarray:
    """Mask of pairs whose sources' lengths differ by under `tolerance` of the longer."""
    la, lb = table.source_chars[pairs.a], table.source_chars[pairs.b]
    return np.abs(la - lb) < tolerance * np.maximum(la, lb)


def at_least(pairs: Pairs, gap: float) -> np.ndarray:
    return pairs.ratio >= gap
