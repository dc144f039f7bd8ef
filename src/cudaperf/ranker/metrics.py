"""How well a ranker orders pairs, in figures the dataset's artefact cannot inflate.

Every figure is computed from per-row scores (higher = faster) on held-out pairs: pairwise accuracy
(ties count half), macro-averaged over families (each family one vote) and pooled over pairs, per
runtime-gap bucket (>= 1.2x, >= 1.5x, >= 2x), on length-controlled pairs; Kendall's tau between scores
and speed within each (task, configuration), averaged per task then per family; and the calibration of
P(a faster) (expected calibration error over 10 bins, Brier score, the reliability table).

Baselines are scorers too: `random` (a seeded coin per pair: 50% in expectation), `longer_source`
(score = source length: the dataset's artefact), `structural` (the reward's structural score), and any
other backend's scores given by the caller.

Not covered: training (feature_ranker.py, lm_ranker.py), the choice of pairs (pairs.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from cudaperf.ranker.pairs import Pairs
from cudaperf.ranker.table import Table


@dataclass(frozen=True)
class Accuracy:
    """Pairwise accuracy: macro over families and pooled, with pair counts."""

    macro: float | None
    pooled: float | None
    pairs: int
    per_family: dict[str, float] = field(default_factory=dict)
    pairs_per_family: dict[str, int] = field(default_factory=dict)

    @property
    def worst_family(self) -> tuple[str, float] | None:
        if not self.per_family:
            return None
        name = min(self.per_family, key=self.per_family.get)
        return name, self.per_family[name]


def correct(scores: np.ndarray, pairs: Pairs) -> np.ndarray:
    """Per pair: 1 if the scores order it right, 0 if wrong, 0.5 on a tie."""
    d = scores[pairs.a] - scores[pairs.b]
    sign = np.where(pairs.a_faster, 1.0, -1.0) * d
    return np.where(sign > 0, 1.0, np.where(sign < 0, 0.0, 0.5))


def accuracy(scores: np.ndarray, pairs: Pairs) -> Accuracy:
    if len(pairs) == 0:
        return Accuracy(None, None, 0)
    ok = correct(scores, pairs)
    per, counts = {}, {}
    for fam in sorted(set(pairs.family)):
        m = pairs.family == fam
        per[fam] = float(ok[m].mean())
        counts[fam] = int(m.sum())
    return Accuracy(float(np.mean(list(per.values()))), float(ok.mean()), len(pairs), per, counts)


def random_scores(n_rows: int, seed: int = 0) -> np.ndarray:
    """Scores that order every pair by a coin: independent uniform draws per row."""
    return np.random.default_rng(seed).random(n_rows)


def kendall_tau(scores: np.ndarray, table: Table) -> dict[str, float]:
    """Family -> mean over its tasks of the mean over configurations of Kendall's tau between the scores
    and speed (-time) of the task's solutions (configurations with >= 3 solutions)."""
    from scipy.stats import kendalltau

    groups: dict[tuple[str, str], list[int]] = {}
    for i, (task, config, _) in enumerate(table.keys):
        groups.setdefault((task, config), []).append(i)
    per_task: dict[str, list[float]] = {}
    family_of: dict[str, str] = {}
    for (task, _), rows in groups.items():
        if len(rows) < 3:
            continue
        tau = kendalltau(scores[rows], -table.time_ms[rows]).statistic
        if not np.isnan(tau):  # NaN when every score ties
            per_task.setdefault(task, []).append(float(tau))
            family_of[task] = table.family[rows[0]]
    per_family: dict[str, list[float]] = {}
    for task, taus in per_task.items():
        per_family.setdefault(family_of[task], []).append(float(np.mean(taus)))
    return {f: float(np.mean(v)) for f, v in sorted(per_family.items())}


@dataclass(frozen=True)
class Calibration:
    ece: float
    brier: float
    bins: tuple[tuple[float, float, float, int], ...]  # (low, mean predicted, observed share, pairs)


def calibration(prob_a_faster: np.ndarray, pairs: Pairs, n_bins: int = 10) -> Calibration:
    """Expected calibration error and Brier score of P(a faster) on the pairs."""
    p = np.clip(np.asarray(prob_a_faster, dtype=np.float64), 0.0, 1.0)
    y = pairs.a_faster.astype(np.float64)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    which = np.clip(np.digitize(p, edges[1:-1]), 0, n_bins - 1)
    bins, ece = [], 0.0
    for k in range(n_bins):
        m = which == k
        if not m.any():
            continue
        mean_p, observed = float(p[m].mean()), float(y[m].mean())
        ece += m.mean() * abs(mean_p - observed)
        bins.append((float(edges[k]), mean_p, observed, int(m.sum())))
    return Calibration(float(ece), float(np.mean((p - y) ** 2)), tuple(bins))
