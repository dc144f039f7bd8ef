"""Diagnostic (no choice made here): one family held out of the full table (every other split group
trains), its >= 1.5x pairs by (strategy a, strategy b, configuration): how many the ranker, the cost model
alone and "longer source wins" order right, and for the wrongly ordered ones the prior's and the trees'
share of the score difference.

    python3 benchmarks/results/cpu-2026-12-04-s18-ranker/diagnose_family.py GROUP   (e.g. pytorch:pooling)
"""

from __future__ import annotations

import sys
from collections import defaultdict

import numpy as np

from cudaperf.ranker.evaluation import baseline_scores
from cudaperf.ranker.feature_ranker import FeatureRanker
from cudaperf.ranker.pairs import at_least, make_pairs
from cudaperf.ranker.table import build_table


def main(group: str) -> int:
    table = build_table(compute_missing=False)
    held = np.asarray([g == group for g in table.group])
    model = FeatureRanker.fit(table.subset(~held), calibration_folds=0)
    scores = np.full(len(table), np.nan)
    scores[held] = model.score_rows(table.x[held])
    base = baseline_scores(table)
    pairs = make_pairs(table)
    pairs = pairs.select(at_least(pairs, 1.5) & held[pairs.a])
    cells = defaultdict(lambda: np.zeros(4, dtype=int))
    for a, b, fa in zip(pairs.a, pairs.b, pairs.a_faster):
        fast, slow = (a, b) if fa else (b, a)
        key = (table.keys[fast][2].split("/")[-1], table.keys[slow][2].split("/")[-1], table.keys[a][1])
        c = cells[key]
        c[0] += 1
        c[1] += scores[fast] > scores[slow]
        c[2] += base["cost_model"][fast] > base["cost_model"][slow]
        c[3] += base["longer_source"][fast] > base["longer_source"][slow]
    print(f"{group}: {len(pairs)} pairs >= 1.5x; columns: faster strategy, slower, config, pairs, "
          "ranker right, cost model right, longer right")
    for key, c in sorted(cells.items(), key=lambda kv: -kv[1][0]):
        print(f"  {key[0]:>16s} > {key[1]:<16s} {key[2]:6s} {c[0]:4d} {c[1]:4d} {c[2]:4d} {c[3]:4d}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
