"""Development figures of the per-row gate experiment: leave-one-split-group-out over train and val only.

The test families' rows are dropped before anything is trained, so nothing here sees or reports them (the
protocol in README.md). Each outer fold fits one model on the other groups with the nested choice of the
gate (`gate_inner_folds` 5, made on the outer fold's training groups only). "before" is that model's
booster and prior with the gate off (the session-15 model, tree_weight 1), "after" the model as chosen.
Prints accuracy on >= 1.5x pairs per family beside "longer source wins" and the cost model alone, macro,
pooled and the lowest family, each fold's (k, power) with its inner curve, and the mean coverage of the
held-out rows at each k.

Run from the repository root: `python3 benchmarks/results/cpu-2026-12-04-s17-ranker-gate/dev_lofo.py
[--json FILE]`. Reads the cached features (`.cache/ranker/features-s6/`), computes none.
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
    config = FeatureRankerConfig(inner_folds=0, tree_weight=1.0, gate_inner_folds=5)
    before, after = np.full(len(table), np.nan), np.full(len(table), np.nan)
    choices, coverage = {}, {}
    t0 = time.time()
    for group, held in lofo_folds(table):
        model = FeatureRanker.fit(table.subset(~held), config, calibration_folds=0)
        x = table.x[held]
        before[held] = model.prior.of(x) + model.booster.predict(x, num_threads=config.num_threads)
        after[held] = model.score_rows(x)
        c = model.gate_choice
        choices[group] = dataclasses.asdict(c)
        coverage[group] = {k: float(model.coverage(x, k).mean()) for k in c.min_groups}
        curve = "  ".join(
            f"k{k:g}:" + ",".join(f"{m:.3f}" for m in row) for k, row in zip(c.min_groups, c.macro)
        )
        cov = " ".join(f"{v:.2f}" for v in coverage[group].values())
        print(
            f"{group:24s} k {c.chosen_min_groups:g} power {c.chosen_power:g}  inner macro (power "
            f"{','.join(f'{p:g}' for p in c.powers)}) {curve}  coverage {cov}  ({time.time() - t0:.0f} s)",
            flush=True,
        )
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
        out["choices"], out["coverage"] = choices, coverage
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
