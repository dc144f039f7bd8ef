"""Development figures of session 17: leave-one-split-group-out over the train and val families only.

The test families' rows are dropped before anything is trained, so nothing here sees or reports them (the
protocol in README.md). Each outer fold trains twice on the other groups: "before", the session-15 model
(`tree_weight` fixed at 1, no nested choice), and "after", `FeatureRanker.fit` with its nested choice of
`tree_weight` (made on the outer fold's training groups only). Prints accuracy on >= 1.5x pairs per
family for both beside "longer source wins" and the cost model alone, macro, pooled and the lowest
family, and the weight each outer fold chose with its inner curve.

Run from the repository root: `python3 benchmarks/results/cpu-2026-12-04-s17-ranker/dev_lofo.py
[--json FILE]`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

import numpy as np

from cudaperf.ranker import metrics
from cudaperf.ranker.evaluation import baseline_scores
from cudaperf.ranker.feature_ranker import FeatureRanker, FeatureRankerConfig
from cudaperf.ranker.pairs import at_least, lofo_folds, make_pairs
from cudaperf.ranker.table import build_table


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default="", help="write per-family figures and choices here")
    args = ap.parse_args()
    full = build_table(compute_missing=False)
    table = full.subset(np.asarray(full.split) != "test")
    before_cfg = FeatureRankerConfig(inner_folds=0, tree_weight=1.0)
    after_cfg = FeatureRankerConfig()
    before, after = np.full(len(table), np.nan), np.full(len(table), np.nan)
    choices = {}
    t0 = time.time()
    for group, held in lofo_folds(table):
        train = table.subset(~held)
        before[held] = FeatureRanker.fit(train, before_cfg, calibration_folds=0).score_rows(table.x[held])
        model = FeatureRanker.fit(train, after_cfg, calibration_folds=0)
        after[held] = model.score_rows(table.x[held])
        choices[group] = dataclasses.asdict(model.choice)
        curve = " ".join(f"{m:.3f}" for m in model.choice.macro)
        print(f"{group:26s} tree_weight {model.choice.chosen:.1f}  se {model.choice.standard_error:.3f}"
              f"  inner macro per weight: {curve}  ({time.time() - t0:.0f} s)", flush=True)
    pairs = make_pairs(table)
    pairs = pairs.select(at_least(pairs, 1.5))
    base = baseline_scores(table)
    scorers = {"before": before, "after": after, "longer": base["longer_source"], "cost": base["cost_model"]}
    acc = {k: metrics.accuracy(s, pairs) for k, s in scorers.items()}
    print(f"\n{'family':18s} {'pairs':>5s} " + " ".join(f"{k:>7s}" for k in scorers))
    for f in sorted(acc["after"].per_family):
        row = " ".join(f"{acc[k].per_family[f]:7.1%}" for k in scorers)
        print(f"{f:18s} {acc['after'].pairs_per_family[f]:5d} {row}")
    for k, a in acc.items():
        worst = a.worst_family
        print(f"{k:7s} macro {a.macro:.1%} pooled {a.pooled:.1%} lowest {worst[0]} {worst[1]:.1%}")
    if args.json:
        out = {k: {"macro": a.macro, "pooled": a.pooled, "per_family": a.per_family} for k, a in acc.items()}
        out["pairs_per_family"] = acc["after"].pairs_per_family
        out["choices"] = choices
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
