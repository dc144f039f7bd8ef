"""Development figures of session 15: leave-one-split-group-out over the train and val families only.

The test families' rows are dropped before training, so nothing here sees or reports them (the protocol in
README.md). Prints accuracy on >= 1.5x pairs per family beside "longer source wins", the macro and pooled
figures, and with `--explain FAMILY` the held-out pairs of that family the ranker orders wrongly, with the
features whose contributions differ most (TreeSHAP, `FeatureRanker.explain_pair`).

Run from the repository root: `python3 benchmarks/results/2026-12-04-s15/ranker/dev_lofo.py [--explain F]`.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys

import numpy as np

from cudaperf.ranker import metrics
from cudaperf.ranker.feature_ranker import FeatureRanker
from cudaperf.ranker.features import FEATURE_NAMES
from cudaperf.ranker.pairs import at_least, lofo_folds, make_pairs
from cudaperf.ranker.table import build_table


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--explain", default="", help="comma-separated families whose wrong pairs to explain")
    ap.add_argument("--show", type=int, default=6, help="wrong pairs to print")
    ap.add_argument("--json", default="", help="write per-family figures here")
    args = ap.parse_args()
    full = build_table(compute_missing=False)
    table = full.subset(np.asarray(full.split) != "test")
    scores = np.full(len(table), np.nan)
    models = {}
    for group, held in lofo_folds(table):
        fams = set(np.asarray(table.family)[held])
        model = FeatureRanker.fit(table.subset(~held), calibration_folds=0)
        scores[held] = model.score_rows(table.x[held])
        for f in fams:
            models[f] = model
    pairs = make_pairs(table)
    pairs = pairs.select(at_least(pairs, 1.5))
    acc = metrics.accuracy(scores, pairs)
    base = metrics.accuracy(table.source_chars.astype(float), pairs)
    for f in sorted(acc.per_family):
        n, a, b = acc.pairs_per_family[f], acc.per_family[f], base.per_family[f]
        print(f"{f:18s} {n:5d} {a:6.1%}  longer {b:6.1%}")
    print(f"macro {acc.macro:.1%} pooled {acc.pooled:.1%}  (longer: {base.macro:.1%} / {base.pooled:.1%})")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"per_family": acc.per_family, "macro": acc.macro, "pooled": acc.pooled}, fh, indent=1)
    swaps(table, pairs, scores)
    for family in filter(None, args.explain.split(",")):
        explain(table, pairs, scores, models[family], family, args.show)
    return 0


def swaps(table, pairs, scores):
    """Pairs of the same two implementations whose winner changes between configurations of a task: the
    ranker's accuracy on them, and how often the features and the cost model change between configs."""
    from cudaperf.ranker.features import FEATURE_NAMES

    est = table.x[:, FEATURE_NAMES.index("c_log_est")] if "c_log_est" in FEATURE_NAMES else None
    winners = collections.defaultdict(set)
    for i in range(len(pairs)):
        fa, sa = (pairs.a[i], pairs.b[i]) if pairs.a_faster[i] else (pairs.b[i], pairs.a[i])
        key = (table.keys[fa][0], *sorted((table.keys[fa][2], table.keys[sa][2])))
        winners[key].add(table.keys[fa][2])
    swap = np.asarray([
        len(winners[(table.keys[a][0], *sorted((table.keys[a][2], table.keys[b][2])))]) > 1
        for a, b in zip(pairs.a, pairs.b, strict=True)
    ])
    ok = metrics.correct(scores, pairs)
    print(f"\nswapping pairs: {swap.sum()} of {len(pairs)} ({swap.mean():.1%}); ranker right on "
          f"{ok[swap].mean():.1%} of them, {ok[~swap].mean():.1%} of the others")
    if est is not None:
        e = metrics.correct(-np.nan_to_num(est, nan=0.0), pairs)
        print(f"cost model alone right on {e[swap].mean():.1%} of swapping pairs, "
              f"{e[~swap].mean():.1%} of the others")
    by_impl = collections.defaultdict(list)
    for i, (task, _, impl) in enumerate(table.keys):
        by_impl[impl].append(i)
    rows = [r for r in by_impl.values() if len(r) > 1]
    varies = np.mean([
        np.any(np.nan_to_num(table.x[r], nan=-1e9) != np.nan_to_num(table.x[r[0]], nan=-1e9), axis=0)
        for r in rows
    ], axis=0)
    names = [n for n, v in zip(FEATURE_NAMES, varies, strict=True) if v > 0.5]
    print(f"features that differ between an implementation's configurations in most implementations: "
          f"{len(names)} of {len(FEATURE_NAMES)}: {', '.join(names)}")


def explain(table, pairs, scores, model, family, show):
    sel = pairs.select(pairs.family == family)
    right = metrics.correct(scores, sel)
    wrong = sel.select(right < 1.0)
    print(f"\n{family}: {len(wrong)} of {len(sel)} pairs wrong")
    kinds = collections.Counter()
    for i in range(len(wrong)):
        fa, sa = (wrong.a[i], wrong.b[i]) if wrong.a_faster[i] else (wrong.b[i], wrong.a[i])
        kinds[(table.keys[fa][2].split("/")[-1], table.keys[sa][2].split("/")[-1], table.keys[fa][1])] += 1
    for k, n in kinds.most_common(12):
        print(f"  faster {k[0]} slower {k[1]} config {k[2]}: {n}")
    rng = np.random.default_rng(0)
    for i in rng.permutation(len(wrong))[:show]:
        fa, sa = (wrong.a[i], wrong.b[i]) if wrong.a_faster[i] else (wrong.b[i], wrong.a[i])
        print(f"\n faster {table.keys[fa]} vs slower {table.keys[sa]}, ratio {wrong.ratio[i]:.2f}")
        print(f"  scores {scores[fa]:.3f} vs {scores[sa]:.3f}")
        for name, d in model.explain_pair(table.x[fa], table.x[sa], top=10):
            j = FEATURE_NAMES.index(name) if name in FEATURE_NAMES else FEATURE_NAMES.index("c_log_est")
            print(f"   {name:28s} {d:+.3f}   {table.x[fa, j]:.3g} vs {table.x[sa, j]:.3g}")


if __name__ == "__main__":
    sys.exit(main())
