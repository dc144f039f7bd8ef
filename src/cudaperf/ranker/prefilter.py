"""The ranker as a pre-filter: evaluate on the GPU only the top-k of N candidates, and what that costs.

`top_k(ranker, candidates, task, k)` picks the k candidates with the best mean score over the task's
configurations (the agent's use: spend GPU evaluations on the promising ones only).

`benchmark(table, scores, ks)` replays that offline on the measured dataset. For every task with at least
`min_candidates` implementations correct on all its configurations, a candidate's speed is the geometric
mean of its times over the configurations; the policies evaluate
- all N (the best is always found; N evaluations),
- the top k by the given per-row scores (held-out scores, so the ranker never saw the task's family),
- k drawn at random (the exact expectation over all k-subsets, not a sample),
and report evaluations spent against the quality of the best one found: the geometric mean over tasks of
best-found time / best time (1.0 = the best was found), and the share of tasks where the best was found.
An evaluation's GPU cost is close to constant (a fixed timing budget per configuration), so evaluations
spent is the GPU time spent.

Not covered: candidates that fail to compile or are wrong (the dataset's rows are correct ones; a real
agent also spends evaluations on those, which the ranker cannot see).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from cudaperf.ranker.contract import Ranker, config_names
from cudaperf.ranker.table import Table


def top_k(ranker: Ranker, candidates: Sequence[str], task: Any, k: int) -> list[int]:
    """Indices of the k candidates with the highest mean score over the task's configurations."""
    configs = config_names(task)
    scores = np.zeros(len(candidates))
    for c in configs:
        scores += np.asarray(ranker.score_many(list(candidates), task, c), dtype=np.float64)
    return [int(i) for i in np.argsort(-scores, kind="stable")[:k]]


def _task_speeds(table: Table, scores: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray, str]]:
    """task -> (geomean time per implementation, mean score per implementation, family), over the
    implementations timed on every configuration of the task."""
    by_task: dict[str, dict[str, list[int]]] = {}
    configs: dict[str, set[str]] = {}
    for i, (task, config, impl) in enumerate(table.keys):
        by_task.setdefault(task, {}).setdefault(impl, []).append(i)
        configs.setdefault(task, set()).add(config)
    out = {}
    for task, impls in by_task.items():
        full = [rows for rows in impls.values() if len(rows) == len(configs[task])]
        if not full:
            continue
        t = np.asarray([math.exp(np.mean(np.log(table.time_ms[r]))) for r in full])
        s = np.asarray([np.mean(scores[r]) for r in full])
        out[task] = (t, s, table.family[full[0][0]])
    return out


def _expected_best_random(times: np.ndarray, k: int) -> tuple[float, float]:
    """E[best time of a uniform k-subset] and P(the best is in it), exactly: sorted ascending, the i-th
    fastest is the subset's best with probability C(n-1-i, k-1) / C(n, k)."""
    t = np.sort(times)
    n = len(t)
    total = math.comb(n, k)
    expected = sum(t[i] * math.comb(n - 1 - i, k - 1) for i in range(n - k + 1)) / total
    return float(expected), k / n


def benchmark(
    table: Table, scores: np.ndarray, ks: Sequence[int] = (1, 2, 3), min_candidates: int = 4
) -> dict[str, Any]:
    tasks = {
        t: v
        for t, v in _task_speeds(table, scores).items()
        if len(v[0]) >= min_candidates and np.all(np.isfinite(v[1]))
    }
    out: dict[str, Any] = {
        "tasks": len(tasks),
        "min_candidates": min_candidates,
        "candidates_mean": float(np.mean([len(v[0]) for v in tasks.values()])) if tasks else 0,
        "policies": {},
    }
    for k in ks:
        ranked, rand, hit_r, hit_x = [], [], [], []
        for t, s, _ in tasks.values():
            best = t.min()
            pick = np.argsort(-s, kind="stable")[:k]
            ranked.append(best / t[pick].min())
            hit_r.append(float(t[pick].min() == best))
            e, p = _expected_best_random(t, min(k, len(t)))
            rand.append(best / e)
            hit_x.append(p)
        evals = float(np.mean([min(k, len(v[0])) / len(v[0]) for v in tasks.values()])) if tasks else 0.0
        out["policies"][f"top{k}"] = {
            "evaluations_share": evals,
            "ranker": {"speed_vs_best_geomean": _geomean(ranked), "best_found_share": float(np.mean(hit_r))},
            "random": {"speed_vs_best_geomean": _geomean(rand), "best_found_share": float(np.mean(hit_x))},
        }
    out["policies"]["all"] = {"evaluations_share": 1.0, "speed_vs_best_geomean": 1.0, "best_found_share": 1.0}
    return out


def _geomean(values: list[float]) -> float | None:
    return float(math.exp(np.mean(np.log(values)))) if values else None
