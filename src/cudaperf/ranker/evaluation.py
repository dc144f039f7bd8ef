"""The ranker's evaluation recipe: held-out scores, then every figure of issue 20 beside the baselines.

`lofo_scores` trains one feature ranker per split group on every other group and scores the held-out
group's rows with it, so each row's score comes from a model that never saw its family (nor any family of
its split group). The calibration slope used for a group's P(a faster) is fitted on the held-out scores
of all the other groups: nothing of the group's own labels enters its probabilities. `split_scores`
trains on the dataset's train and val families and scores the test families; `lm_split_scores` does the
same for an LM ranker. `figures` turns per-row scores of any number of scorers (the ranker, baselines,
the LM backend) into one JSON-ready dictionary: accuracy per gap bucket (macro over families and pooled),
on length-controlled pairs, Kendall's tau, calibration of the ranker's P(a faster).

Not covered: rendering (report.py writes markdown from `figures`), the LM backend itself (lm_ranker.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass

import numpy as np

from cudaperf.ranker import metrics
from cudaperf.ranker.feature_ranker import FeatureRanker, FeatureRankerConfig, fit_scale
from cudaperf.ranker.lm_ranker import LMRanker
from cudaperf.ranker.pairs import (
    GAP_BUCKETS,
    Pairs,
    at_least,
    dataset_split,
    length_controlled,
    lofo_folds,
    make_pairs,
)
from cudaperf.ranker.table import Table


@dataclass(frozen=True)
class HeldOut:
    """Per-row held-out scores (NaN where a row was not held out) and the calibration slope of the model
    that scored each row."""

    scores: np.ndarray
    scale: np.ndarray
    losses: tuple[float, ...] = ()  # the LM backend's training losses


def lofo_scores(
    table: Table, config: FeatureRankerConfig | None = None, progress: Callable[[str], None] | None = None
) -> HeldOut:
    scores = np.full(len(table), np.nan)
    folds = list(lofo_folds(table))
    for group, held in folds:
        model = FeatureRanker.fit(table.subset(~held), config, calibration_folds=0)
        scores[held] = model.score_rows(table.x[held])
        if progress:
            progress(
                f"lofo: {group} ({int(held.sum())} rows held out; tree_weight {model.config.tree_weight:g})"
            )
    scale = np.full(len(table), np.nan)
    pairs = make_pairs(table)
    for _, held in folds:
        others = scores.copy()
        others[held] = np.nan
        scale[held] = fit_scale(others, table, pairs=pairs)
    return HeldOut(scores, scale)


def split_scores(table: Table, config: FeatureRankerConfig | None = None) -> HeldOut:
    train, test = dataset_split(table)
    model = FeatureRanker.fit(table.subset(train), config)
    scores = np.full(len(table), np.nan)
    scores[test] = model.score_rows(table.x[test])
    return HeldOut(scores, np.where(test, model.scale, np.nan))


def baseline_scores(table: Table, seed: int = 0) -> dict[str, np.ndarray]:
    """Random, "the longer source wins", the reward's structural score, and the roofline cost model alone
    (faster = lower estimated time; rows without an estimate tie at the median)."""
    from cudaperf.ranker.features import FEATURE_NAMES

    est = table.x[:, FEATURE_NAMES.index("c_log_est")] if len(table) else np.zeros(0)
    fill = float(np.nanmedian(est)) if np.isfinite(est).any() else 0.0
    return {
        "random": metrics.random_scores(len(table), seed),
        "longer_source": table.source_chars.astype(float),
        "structural": np.nan_to_num(table.structural, nan=0.0),
        "cost_model": -np.where(np.isfinite(est), est, fill),
    }


def _acc(scores: np.ndarray, pairs: Pairs) -> dict:
    a = metrics.accuracy(scores, pairs)
    return {
        "macro": a.macro,
        "pooled": a.pooled,
        "pairs": a.pairs,
        "per_family": a.per_family,
        "pairs_per_family": a.pairs_per_family,
    }


def figures(
    table: Table,
    pairs: Pairs,
    scorers: Mapping[str, np.ndarray],
    held: HeldOut | None = None,
    ranker_name: str = "feature_ranker",
) -> dict:
    """Every figure for the pairs whose rows all scorers scored (finite scores)."""
    finite = np.all([np.isfinite(s) for s in scorers.values()], axis=0)
    pairs = pairs.select(finite[pairs.a] & finite[pairs.b])
    out: dict = {"pairs": len(pairs), "families": sorted(set(pairs.family)), "buckets": {}}
    for gap in (1.0, *GAP_BUCKETS):
        sel = pairs.select(at_least(pairs, gap))
        ctl = sel.select(length_controlled(table, sel))
        out["buckets"][f">={gap:g}x"] = {
            name: {"all": _acc(s, sel), "length_controlled": _acc(s, ctl)} for name, s in scorers.items()
        }
    out["kendall_tau"] = {name: metrics.kendall_tau(s, table) for name, s in scorers.items()}
    if held is not None and ranker_name in scorers:
        s = scorers[ranker_name]
        prob = 1.0 / (1.0 + np.exp(-held.scale[pairs.a] * (s[pairs.a] - s[pairs.b])))
        out["calibration"] = asdict(metrics.calibration(prob, pairs))
    return out


def lm_split_scores(
    table: Table,
    make_ranker: Callable[[list[str]], LMRanker],
    pairs: Pairs,
    *,
    max_train_pairs: int = 50_000,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> HeldOut:
    """Train an LM ranker (`make_ranker(training texts)`) on the pairs of the dataset's train and val
    families, score every row of the test families. Training pairs are all pairs beyond noise (a sample of
    `max_train_pairs` at most); the calibration slope is fitted on a sample of them."""
    from cudaperf.ranker.table import row_sources

    train_rows, test_rows = dataset_split(table)
    texts = _row_texts(table, row_sources(table, seed))
    tr = pairs.select(train_rows[pairs.a] & train_rows[pairs.b])
    if len(tr) > max_train_pairs:
        tr = tr.select(np.random.default_rng(seed).permutation(len(tr))[:max_train_pairs])
    faster = np.where(tr.a_faster, tr.a, tr.b)
    slower = np.where(tr.a_faster, tr.b, tr.a)
    ranker = make_ranker([texts[i] for i in np.unique(np.concatenate([faster, slower]))[:5000]])
    losses = ranker.train(
        [texts[i] for i in faster],
        [texts[i] for i in slower],
        (lambda step, loss: progress(f"lm step {step}: loss {loss:.4f}")) if progress else None,
    )
    calib = np.random.default_rng(seed + 1).permutation(len(faster))[:2000]
    rf = ranker.rewards([texts[i] for i in faster[calib]])
    rs = ranker.rewards([texts[i] for i in slower[calib]])
    ranker.fit_scale(rf, rs)
    scores = np.full(len(table), np.nan)
    idx = np.flatnonzero(test_rows)
    scores[idx] = ranker.rewards([texts[i] for i in idx])
    return HeldOut(scores, np.where(test_rows, ranker.scale, np.nan), tuple(losses))


def _row_texts(table: Table, sources: dict[str, str]) -> list[str]:
    from cudaperf.datasets import registry
    from cudaperf.ranker.lm_ranker import solution_text
    from cudaperf.ranker.problem import Problem

    index = {t.task_id: t for t in registry.build_index(0)}
    problems: dict[str, Problem] = {}
    out = []
    for task, config, impl in table.keys:
        p = problems.setdefault(task, Problem.of(index[task]))
        out.append(solution_text(sources[impl], p.sizes(config)))
    return out
