"""Development figures (session 18): leave-one-split-group-out over every dataset family (the test
families are development data from this session on: benchmarks/fresh_measure/PROTOCOL.md), the committed
model ("before") against a variant of the cost model's estimate computed in numpy from the cached
columns ("after"); nothing is recomputed and nothing is promoted from here without the fresh reading.

Variants (`--variant`):
  mlp   memory-level parallelism (Little's law): the DRAM term divided by the share of the bandwidth the
        bytes a resident thread requests can keep in flight, min(1, occupancy * 2048 * bytes per thread
        / (bandwidth * latency / SMs)), bytes per thread = requested bytes over launched threads (an upper
        bound of the bytes in flight: loops issue theirs one iteration at a time); `--latency-ns`.
  mlp_atomic  mlp, plus atomics as one more term of the max: global atomics at GLOBAL_ATOMICS_PER_S over
        distinct addresses, the hottest address's updates (threads per target x atomic sites) at
        SAME_ADDRESS_PER_S; shared atomics at a 32-bank rate per SM, times the threads of a block per
        target (at most a warp's 32: same-address updates of a warp serialise). Executed atomics =
        launched threads x atomic sites (atomics inside loops are undercounted). Constants fixed before
        the run: spec-level orders of magnitude, not fitted.

    python3 benchmarks/results/cpu-2026-12-04-s18-ranker/lofo_variant.py --variant mlp [--json FILE]
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
from cudaperf.ranker.features import FEATURE_NAMES as F
from cudaperf.ranker.pairs import at_least, lofo_folds, make_pairs
from cudaperf.ranker.table import build_table

BANDWIDTH = 4.8e12
SMS = 132
LAUNCH_S = 2.5e-6
GLOBAL_ATOMICS_PER_S = 1.5e11  # L2 atomic units, distinct addresses: ~one per clock per L2 slice
SAME_ADDRESS_PER_S = 2.0e9  # updates of one address serialise at its L2 slice: ~one per clock
SHARED_ATOMICS_PER_S = SMS * 32 * 1.98e9 / 2  # 32 banks per SM, an atomic a read and a write


def ideal_s(x: np.ndarray) -> np.ndarray:
    col = {n: x[:, F.index(n)] for n in ("p_log_in_elems", "p_log_out_elems", "p_elem_bytes")}
    elems = 2 ** col["p_log_in_elems"] + 2 ** col["p_log_out_elems"]  # stored as log2(1 + n): +-2 elements
    return elems * col["p_elem_bytes"] / BANDWIDTH + LAUNCH_S


def term(x: np.ndarray, name: str, ideal: np.ndarray) -> np.ndarray:
    return np.maximum(2 ** x[:, F.index(name)] * ideal - 1e-9, 0.0)


def atomic_s(x: np.ndarray) -> np.ndarray:
    col = {n: np.nan_to_num(x[:, F.index(n)], nan=0.0) for n in (
        "l_log_threads", "a_global_atomics", "a_shared_atomics", "a_log_atomic_contention",
        "a_log_shared_atomic_contention")}
    threads = 2 ** col["l_log_threads"] - 1
    n_global = threads * col["a_global_atomics"]
    hottest = 2 ** col["a_log_atomic_contention"] * col["a_global_atomics"]
    t_global = np.maximum(n_global / GLOBAL_ATOMICS_PER_S, np.where(n_global > 0, hottest, 0) / SAME_ADDRESS_PER_S)
    conflict = np.clip(2 ** col["a_log_shared_atomic_contention"], 1, 32)
    t_shared = threads * col["a_shared_atomics"] * conflict / SHARED_ATOMICS_PER_S
    return np.maximum(t_global, t_shared)


def mlp_est(x: np.ndarray, latency_ns: float, atomics: bool = False) -> np.ndarray:
    ideal = ideal_s(x)
    dram, l1, sm, comp = (term(x, f"c_log_{n}", ideal) for n in ("dram", "l1", "sm", "compute"))
    launch, barrier = term(x, "c_log_launch", ideal), term(x, "c_log_barrier", ideal)
    elems_per_thread = 2 ** (x[:, F.index("a_log_requested_per_out")] - x[:, F.index("l_log_threads_per_out")])
    bytes_per_thread = elems_per_thread * x[:, F.index("p_elem_bytes")]
    occ = np.nan_to_num(x[:, F.index("a_occupancy")], nan=1.0)
    needed = BANDWIDTH * latency_ns * 1e-9 / SMS
    share = np.clip(occ * 2048 * bytes_per_thread / needed, 1e-3, 1.0)
    share = np.where(np.isfinite(share), share, 1.0)
    body = [dram / share, l1, sm, comp] + ([atomic_s(x)] if atomics else [])
    est = launch + np.maximum.reduce(body) + barrier
    out = np.log2(est / ideal)
    old = x[:, F.index("c_log_est")]
    return np.where(np.isfinite(old), out, old)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", default="mlp", choices=["mlp", "mlp_atomic"])
    ap.add_argument("--latency-ns", type=float, default=800.0)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    table = build_table(compute_missing=False)
    x2 = table.x.copy()
    x2[:, F.index("c_log_est")] = mlp_est(table.x, args.latency_ns, args.variant == "mlp_atomic")
    variant = dataclasses.replace(table, x=x2)
    cfg = FeatureRankerConfig(inner_folds=0, tree_weight=1.0)
    before, after = np.full(len(table), np.nan), np.full(len(table), np.nan)
    t0 = time.time()
    for group, held in lofo_folds(table):
        before[held] = FeatureRanker.fit(table.subset(~held), cfg, calibration_folds=0).score_rows(table.x[held])
        after[held] = FeatureRanker.fit(variant.subset(~held), cfg, calibration_folds=0).score_rows(x2[held])
        print(f"{group:26s} ({time.time() - t0:.0f} s)", flush=True)
    pairs = make_pairs(table)
    pairs = pairs.select(at_least(pairs, 1.5))
    scorers = {"before": before, "after": after, "longer": baseline_scores(table)["longer_source"],
               "cost": baseline_scores(table)["cost_model"], "cost_after": baseline_scores(variant)["cost_model"]}
    acc = {k: metrics.accuracy(s, pairs) for k, s in scorers.items()}
    print(f"\n{'family':18s} {'pairs':>5s} " + " ".join(f"{k:>10s}" for k in scorers))
    for f in sorted(acc["after"].per_family):
        row = " ".join(f"{acc[k].per_family[f]:10.1%}" for k in scorers)
        print(f"{f:18s} {acc['after'].pairs_per_family[f]:5d} {row}")
    for k, a in acc.items():
        print(f"{k:10s} macro {a.macro:.1%} pooled {a.pooled:.1%} lowest {a.worst_family[0]} {a.worst_family[1]:.1%}")
    if args.json:
        out = {k: {"macro": a.macro, "pooled": a.pooled, "per_family": a.per_family} for k, a in acc.items()}
        out["pairs_per_family"] = acc["after"].pairs_per_family
        out["args"] = vars(args)
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
