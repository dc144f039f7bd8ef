"""Diagnostic of the gate experiment (README.md, addendum): does a row's leaf coverage tell where the cost
model alone beats the trees on held-out dev families?

Leave-one-split-group-out over train and val families only (test-family rows dropped first). Per fold the
model with the gate off and its leaf table; over the held-out >= 1.5x pairs where the ranker and the cost
model disagree, the mean pair coverage (c_2, mean of the two rows) when the cost model is right against
when the ranker is right, per family, and the pooled AUC of low coverage for "cost model right".

Run from the repository root: `python3 benchmarks/results/cpu-2026-12-04-s17-ranker-gate/
coverage_diagnostic.py`. Reads the cached features, computes none.
"""

from __future__ import annotations

import sys

import numpy as np

from cudaperf.ranker.evaluation import baseline_scores
from cudaperf.ranker.feature_ranker import FeatureRanker, FeatureRankerConfig, _train
from cudaperf.ranker.pairs import at_least, lofo_folds, make_pairs
from cudaperf.ranker.table import build_table


def main() -> int:
    full = build_table(compute_missing=False)
    table = full.subset(np.asarray(full.split) != "test")
    config = FeatureRankerConfig()
    ranker, cover = np.full(len(table), np.nan), np.full(len(table), np.nan)
    for _, held in lofo_folds(table):
        model: FeatureRanker = _train(table.subset(~held), config, leaf_table=True)
        ranker[held] = model.score_rows(table.x[held])
        cover[held] = model.coverage(table.x[held], 2.0)
    pairs = make_pairs(table)
    pairs = pairs.select(at_least(pairs, 1.5))
    cost = baseline_scores(table)["cost_model"]
    sign = np.where(pairs.a_faster, 1.0, -1.0)
    r_right = sign * (ranker[pairs.a] - ranker[pairs.b]) > 0
    c_right = sign * (cost[pairs.a] - cost[pairs.b]) > 0
    split = r_right != c_right
    pc = (cover[pairs.a] + cover[pairs.b]) / 2
    fam = np.asarray(table.family, dtype=object)[pairs.a]
    print(f"{'family':18s} {'disagree':>8s} {'cost right':>10s} {'cov|cost ok':>11s} {'cov|ranker ok':>13s}")
    for f in sorted(set(fam[split])):
        m = split & (fam == f)
        cr, rr = pc[m & c_right], pc[m & r_right]
        mc = f"{cr.mean():.3f}" if len(cr) else "-"
        mr = f"{rr.mean():.3f}" if len(rr) else "-"
        print(f"{f:18s} {m.sum():8d} {len(cr):10d} {mc:>11s} {mr:>13s}")
    lo, hi = pc[split & c_right], pc[split & r_right]
    auc = (np.mean(lo[:, None] < hi[None, :]) + 0.5 * np.mean(lo[:, None] == hi[None, :])) if len(lo) else 0.5
    print(
        f"pooled: {split.sum()} disagreeing pairs, cost right in {len(lo)}; "
        f"AUC of low coverage for 'cost right' {auc:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
