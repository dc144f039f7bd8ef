"""The feature ranker: gradient-boosted trees (LightGBM) over `features.FEATURE_NAMES`.

What it learns: for each row (a solution on a configuration), its log time relative to the mean log time
of the solutions of the same task and configuration, negated, so a higher score means faster and the
difference of two scores estimates the log of their time ratio. `compare` turns that difference into
P(a faster) with one logistic scale (calibration; no offset, so compare(a, b) = 1 - compare(b, a)
exactly). The scale is fitted on out-of-family scores, never on the model's own training predictions
(which are overconfident): `fit` trains `calibration_folds` extra models, each without a share of the
split groups, and fits the scale on their scores of the groups they did not see.

The trees are a seed ensemble (`FeatureRankerConfig.ensemble`, 5 by default): boosters trained on the same
rows with consecutive LightGBM seeds, their predictions averaged (`SeedEnsemble`). One booster's held-out
accuracy moved by up to 8 points per family with its seed alone (dev/LOG.md, session 19).

Fixed hyper-parameters (`FeatureRankerConfig`): they were set before any held-out figure was seen and
are not tuned per fold, so leave-one-family-out figures are not tuned on the family they report. One
quantity is chosen by the data, from the training rows only: `tree_weight`, below.
Rows are weighted so each family weighs in proportion to the square root of its row count: the large
families (C maps, stencils) do not drown the small ones, nor do the small ones dominate.

A cost-model prior (`FeatureRankerConfig.cost_prior`): the score is `w * -ln(2) * c_log_est` (the
roofline estimate of `features.cost_values`, in natural-log time) plus the trees, which learn what the
estimate misses. `w` is a weighted least-squares fit of the target on the estimate within each task and
configuration of the training rows, and the trees start from that prior (LightGBM's `init_score`). A
family no training family resembles then falls back to the roofline's ordering instead of to whatever
the trees learned on unrelated families. Rows without an estimate get the training rows' median.

How far the trees may move the score from the prior (`tree_weight`, the score is `prior + tree_weight *
trees`) is chosen inside `fit` by nested cross-validation over the training table's split groups
(`choose_tree_weight`): models trained without a fold of whole groups score that fold, each weight of
`tree_weight_grid` is scored by its accuracy on the fold's >= 1.5x pairs macro-averaged over families,
and the best is kept (ties to the smaller weight: the prior is the simpler model). The standard error of
that accuracy over families is recorded beside it, to read how far the grid's differences stand above
the spread between families. A caller's held-out family never enters its own choice, because the choice
sees only the table `fit` is given. The choice and its curve are saved with the model (store.py).

A per-row gate on the trees (off by default, `gate_power` 0): score = prior + tree_weight * g(x) * trees,
`g(x) = c_k(x) ** gate_power`, where `c_k(x)`, the row's coverage, is the share of the trees whose leaf
for x holds training rows of at least k = `gate_min_groups` effective split groups (`N_eff = 1 / sum_g
p_g^2`, p_g a group's share of the leaf's training weight, over all the model's training rows, bagging
ignored). A leaf fed by one or two groups encodes a family-specific rule; a row that lands mostly in such
leaves gets less of the trees and more of the prior. The per-leaf `N_eff` table is saved with the model.
`gate_inner_folds` > 0 chooses (k, gate_power) by nested group folds on the training rows (`choose_gate`,
argmax of the inner >= 1.5x macro accuracy, ties to the smaller power, then the smaller k). An exploratory
dev-only mechanism: benchmarks/results/cpu-2026-12-04-s17-ranker-gate/ holds its protocol and figures.

`explain(x)` reports which features drove a decision (the prior as `cost_model_prior`): LightGBM's exact
per-prediction contributions (TreeSHAP, `pred_contrib`) of each feature to each score, and for a
comparison their difference.

Not covered: features (features.py), pairs and metrics (pairs.py, metrics.py), saving (store.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

import numpy as np

from cudaperf.ranker.features import FEATURE_NAMES
from cudaperf.ranker.table import Table

PRIOR_FEATURE = "c_log_est"
CHOICE_GAP = 1.5  # the headline pairs (>= 1.5x), the figure the weight is chosen to serve


@dataclass(frozen=True)
class FeatureRankerConfig:
    """LightGBM settings for the regression on relative log time."""

    num_boost_round: int = 400
    """Trees; with the learning rate below, enough to fit without a validation split to stop early."""
    learning_rate: float = 0.05
    num_leaves: int = 31
    min_data_in_leaf: int = 40
    """Large leaves: a leaf must hold many rows, so rare per-task quirks are not memorised."""
    feature_fraction: float = 0.8
    bagging_fraction: float = 0.8
    lambda_l2: float = 1.0
    seed: int = 0
    num_threads: int = 2
    """The CPU machine has 2 cores."""
    ensemble: int = 5
    """LightGBM boosters trained on the same rows with seeds `seed` .. `seed + ensemble - 1` and averaged
    (`SeedEnsemble`): one booster's held-out accuracy moves by up to 8 points per family with its seed
    (dev/LOG.md, session 19); the average narrows that."""
    cost_prior: bool = True
    """Start the trees from the fitted cost-model prior (module docstring); False: trees alone."""
    tree_weight: float = 1.0
    """The trees' share of the score, prior + tree_weight * trees, in [0, 1]. `fit` overwrites it with its
    nested choice when `inner_folds` > 0; a model file saved without it scores with 1."""
    inner_folds: int = 0
    """Folds of whole split groups for the nested choice of `tree_weight`; 0 (the default): keep
    `tree_weight`. The choice is off by default: with 5 folds it scored below weight 1 (LOFO macro 90.5%
    vs 92.3%, test families 84.3% vs 87.0%; benchmarks/results/cpu-2026-12-04-s17-ranker/)."""
    tree_weight_grid: tuple[float, ...] = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
    """The weights the nested choice compares."""
    gate_power: float = 0.0
    """The per-row gate's exponent (module docstring); 0 (the default): no gate, g(x) = 1."""
    gate_min_groups: float = 2.0
    """k: a leaf covers a row when its training rows span at least k effective split groups."""
    gate_inner_folds: int = 0
    """Folds of whole split groups for the nested choice of (gate_min_groups, gate_power); 0: keep them."""
    gate_grid_min_groups: tuple[float, ...] = (2.0, 3.0, 4.0)
    gate_grid_power: tuple[float, ...] = (0.0, 1.0, 2.0)

    def __post_init__(self):
        # a model file stores the grid as a JSON list
        for name in ("tree_weight_grid", "gate_grid_min_groups", "gate_grid_power"):
            object.__setattr__(self, name, tuple(float(w) for w in getattr(self, name)))
        weights = (self.tree_weight, *self.tree_weight_grid)
        if not self.tree_weight_grid or any(not 0.0 <= w <= 1.0 for w in weights):
            raise ValueError(
                f"tree_weight {self.tree_weight} and tree_weight_grid {self.tree_weight_grid} must lie in "
                "[0, 1] (the grid non-empty): 0 is the cost-model prior alone, 1 the full trees"
            )
        if self.ensemble < 1:
            raise ValueError(f"ensemble {self.ensemble}: at least one booster")
        if self.inner_folds < 0 or self.inner_folds == 1:
            raise ValueError(f"inner_folds {self.inner_folds}: use 0 (no nested choice) or at least 2")
        if self.gate_inner_folds < 0 or self.gate_inner_folds == 1:
            raise ValueError(f"gate_inner_folds {self.gate_inner_folds}: use 0 (no choice) or at least 2")
        powers = (self.gate_power, *self.gate_grid_power)
        if any(p < 0 for p in powers) or not self.gate_grid_power or not self.gate_grid_min_groups:
            raise ValueError(f"gate powers {powers} must be >= 0 (0: no gate), the grids non-empty")

    def lgb_params(self) -> dict:
        return {
            "objective": "regression",
            "learning_rate": self.learning_rate,
            "num_leaves": self.num_leaves,
            "min_data_in_leaf": self.min_data_in_leaf,
            "feature_fraction": self.feature_fraction,
            "bagging_fraction": self.bagging_fraction,
            "bagging_freq": 1,
            "lambda_l2": self.lambda_l2,
            "seed": self.seed,
            "num_threads": self.num_threads,
            "verbose": -1,
            "deterministic": True,
        }


def relative_log_speed(table: Table) -> np.ndarray:
    """-(log time - mean log time of its task and configuration): the regression target."""
    logs = np.log(table.time_ms)
    groups: dict[tuple[str, str], list[int]] = {}
    for i, (task, config, _) in enumerate(table.keys):
        groups.setdefault((task, config), []).append(i)
    y = np.empty_like(logs)
    for rows in groups.values():
        y[rows] = -(logs[rows] - logs[rows].mean())
    return y


def family_weights(table: Table) -> np.ndarray:
    fam = np.asarray(table.family, dtype=object)
    names, counts = np.unique(fam, return_counts=True)
    per = {n: 1.0 / np.sqrt(c) for n, c in zip(names, counts, strict=True)}
    w = np.asarray([per[f] for f in fam])
    return w * len(w) / w.sum()


def _group_centred(v: np.ndarray, table: Table) -> np.ndarray:
    groups: dict[tuple[str, str], list[int]] = {}
    for i, (task, config, _) in enumerate(table.keys):
        groups.setdefault((task, config), []).append(i)
    out = np.empty_like(v)
    for rows in groups.values():
        out[rows] = v[rows] - v[rows].mean()
    return out


@dataclass(frozen=True)
class Prior:
    """score += weight * -ln(2) * c_log_est (NaN read as `fill`)."""

    weight: float = 0.0
    fill: float = 0.0

    def of(self, x: np.ndarray, feature_names=FEATURE_NAMES) -> np.ndarray:
        if not self.weight or PRIOR_FEATURE not in feature_names:
            return np.zeros(len(x))
        est = x[:, list(feature_names).index(PRIOR_FEATURE)]
        return self.weight * -np.log(2.0) * np.where(np.isfinite(est), est, self.fill)


def fit_prior(table: Table, y: np.ndarray, w: np.ndarray) -> Prior:
    """Weighted least squares of the target on the estimate, both centred per task and configuration."""
    est = table.x[:, FEATURE_NAMES.index(PRIOR_FEATURE)]
    finite = np.isfinite(est)
    if not finite.any():
        return Prior()
    fill = float(np.median(est[finite]))
    c = _group_centred(-np.log(2.0) * np.where(finite, est, fill), table)
    den = float(np.sum(w * c * c))
    return Prior(float(np.sum(w * c * y) / den), fill) if den > 0 else Prior()


@dataclass(frozen=True)
class TreeWeightChoice:
    """The nested choice of `tree_weight`: the inner held-out accuracy (>= 1.5x pairs, macro over
    families) of each grid weight, the standard error of the best one over families, the choice."""

    weights: tuple[float, ...]
    macro: tuple[float, ...]
    standard_error: float
    chosen: float
    families: int
    pairs: int
    inner_folds: int

    def __post_init__(self):
        # a model file stores the curve as JSON lists
        object.__setattr__(self, "weights", tuple(float(w) for w in self.weights))
        object.__setattr__(self, "macro", tuple(float(m) for m in self.macro))


@dataclass(frozen=True)
class GateChoice:
    """The nested choice of the gate: inner held-out accuracy (>= 1.5x pairs, macro over families) of
    each (min_groups, power) of the grid, row-major in `min_groups`, and the choice."""

    min_groups: tuple[float, ...]
    powers: tuple[float, ...]
    macro: tuple[tuple[float, ...], ...]
    chosen_min_groups: float
    chosen_power: float
    families: int
    pairs: int
    inner_folds: int

    def __post_init__(self):
        # a model file stores these as JSON lists
        object.__setattr__(self, "min_groups", tuple(float(v) for v in self.min_groups))
        object.__setattr__(self, "powers", tuple(float(v) for v in self.powers))
        object.__setattr__(self, "macro", tuple(tuple(float(m) for m in row) for row in self.macro))


class SeedEnsemble:
    """Boosters of one configuration and training table that differ only in their random seed (bagging,
    feature sampling), answering `predict` as one booster does: predictions and TreeSHAP contributions
    averaged (both are linear in the members), leaves side by side (each member's trees in turn, so a
    leaf table covers every tree)."""

    def __init__(self, boosters) -> None:
        self.boosters = tuple(boosters)

    def predict(self, x: np.ndarray, *, pred_leaf: bool = False, pred_contrib: bool = False,
                num_threads: int = 0) -> np.ndarray:
        outs = [b.predict(x, pred_leaf=pred_leaf, pred_contrib=pred_contrib, num_threads=num_threads)
                for b in self.boosters]
        if pred_leaf:
            return np.hstack([np.asarray(o).reshape(len(x), -1) for o in outs])
        return np.mean(outs, axis=0)

    def model_strings(self) -> list[str]:
        return [b.model_to_string() for b in self.boosters]


class FeatureRanker:
    """A trained model: `score_rows(x)` for feature rows, `compare_scores` for P(a faster)."""

    def __init__(
        self,
        booster,
        scale: float,
        config: FeatureRankerConfig,
        feature_names=FEATURE_NAMES,
        prior: Prior | None = None,
        choice: TreeWeightChoice | None = None,
        leaf_groups: np.ndarray | None = None,
        gate_choice: GateChoice | None = None,
    ):
        self.booster = booster
        self.scale = float(scale)  # logistic slope on score differences (calibration)
        self.config = config
        self.feature_names = tuple(feature_names)
        self.prior = prior or Prior()
        self.choice = choice  # how config.tree_weight was chosen (None: given, not chosen)
        # effective split groups per (tree, leaf) of the training rows; needed only when the gate is on
        self.leaf_groups = None if leaf_groups is None else np.asarray(leaf_groups, dtype=np.float64)
        self.gate_choice = gate_choice

    @classmethod
    def fit(
        cls, table: Table, config: FeatureRankerConfig | None = None, calibration_folds: int = 4
    ) -> FeatureRanker:
        """Train on every row of `table`; calibrate on group-held-out scores (`calibration_folds` = 0:
        scale 1, for callers that calibrate themselves, such as leave-one-group-out evaluation; a table of
        one split group is calibrated on its own, overconfident, training scores)."""
        config = config or FeatureRankerConfig()
        choice = choose_tree_weight(table, config) if config.inner_folds else None
        if choice is not None:
            config = replace(config, tree_weight=choice.chosen)
        gate = choose_gate(table, config) if config.gate_inner_folds else None
        if gate is not None:
            config = replace(config, gate_min_groups=gate.chosen_min_groups, gate_power=gate.chosen_power)
        model = _train(table, config, leaf_table=config.gate_inner_folds > 0)
        model.choice, model.gate_choice = choice, gate
        if calibration_folds <= 0:
            return model
        if len(set(table.group)) < 2:  # nothing to hold out: in-sample (overconfident) scores it is
            model.scale = fit_scale(model.score_rows(table.x), table)
        else:
            model.scale = fit_scale(out_of_group_scores(table, config, calibration_folds), table)
        return model

    def score_rows(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64).reshape(-1, len(self.feature_names))
        return self.tree_part(x) + self.prior.of(x, self.feature_names)

    def tree_part(self, x: np.ndarray) -> np.ndarray:
        """The trees' share of the score, weighted by `config.tree_weight` and the row's gate."""
        if self.config.tree_weight == 0.0:
            return np.zeros(len(x))
        trees = self.booster.predict(x, num_threads=self.config.num_threads)
        return self.config.tree_weight * self.gate(x) * trees

    def coverage(self, x: np.ndarray, min_groups: float) -> np.ndarray:
        """Per row, the share of the trees whose leaf for it spans >= `min_groups` effective split groups
        of the training rows (needs the leaf table: a model trained with the gate on or chosen)."""
        if self.leaf_groups is None:
            raise ValueError("this model has no leaf table (trained without the gate)")
        return leaf_coverage(self.leaf_groups, self._leaves(x), min_groups)

    def gate(self, x: np.ndarray) -> np.ndarray:
        """g(x) = coverage ** gate_power; 1 with the gate off."""
        if self.config.gate_power == 0.0:
            return np.ones(len(x))
        return self.coverage(x, self.config.gate_min_groups) ** self.config.gate_power

    def _leaves(self, x: np.ndarray) -> np.ndarray:
        leaves = self.booster.predict(x, pred_leaf=True, num_threads=self.config.num_threads)
        return np.asarray(leaves, dtype=np.int64).reshape(len(x), -1)

    def compare_scores(self, score_a: np.ndarray | float, score_b: np.ndarray | float) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-self.scale * (np.asarray(score_a) - np.asarray(score_b))))

    def _contributions(self, x: np.ndarray) -> tuple[np.ndarray, tuple[str, ...]]:
        """Per row, each feature's TreeSHAP contribution and the prior's, with their names."""
        x = np.asarray(x, dtype=np.float64).reshape(-1, len(self.feature_names))
        # the last column is the expected value; the trees count with their weight
        share = self.config.tree_weight * self.gate(x)[:, None]
        contrib = share * self.booster.predict(x, pred_contrib=True)[:, :-1]
        prior = self.prior.of(x, self.feature_names)[:, None]
        return np.hstack([contrib, prior]), (*self.feature_names, "cost_model_prior")

    def explain(self, x: np.ndarray, top: int = 5) -> list[list[tuple[str, float]]]:
        """Per row: the `top` features by absolute contribution to its score (TreeSHAP, and the prior)."""
        contrib, names = self._contributions(x)
        out = []
        for row in contrib:
            order = np.argsort(-np.abs(row))[:top]
            out.append([(names[i], float(row[i])) for i in order])
        return out

    def explain_pair(self, xa: np.ndarray, xb: np.ndarray, top: int = 5) -> list[tuple[str, float]]:
        """The features whose contributions differ most between a and b (positive: favours a)."""
        c, names = self._contributions(np.vstack([xa, xb]))
        diff = c[0] - c[1]
        order = np.argsort(-np.abs(diff))[:top]
        return [(names[i], float(diff[i])) for i in order]

    def config_dict(self) -> dict:
        return asdict(self.config)


def _train(table: Table, config: FeatureRankerConfig, leaf_table: bool = False) -> FeatureRanker:
    """Trees (and the prior they start from) on every row of `table`; calibration scale 1; the leaf
    table of the gate when the gate is on or `leaf_table`."""
    import lightgbm as lgb

    y, w = relative_log_speed(table), family_weights(table)
    prior = fit_prior(table, y, w) if config.cost_prior else Prior()
    data = lgb.Dataset(
        table.x,
        y,
        weight=w,
        init_score=_group_centred(prior.of(table.x), table),
        feature_name=list(FEATURE_NAMES),
        free_raw_data=False,
    )
    boosters = [lgb.train({**config.lgb_params(), "seed": config.seed + k}, data,
                          num_boost_round=config.num_boost_round) for k in range(config.ensemble)]
    booster = boosters[0] if len(boosters) == 1 else SeedEnsemble(boosters)
    model = FeatureRanker(booster, 1.0, config, FEATURE_NAMES, prior)
    if leaf_table or config.gate_power > 0:
        model.leaf_groups = leaf_group_table(model._leaves(table.x), table, w)
    return model


def leaf_group_table(leaves: np.ndarray, table: Table, w: np.ndarray) -> np.ndarray:
    """(trees, max leaves) effective number of split groups, 1 / sum_g p_g^2, of the rows in each leaf
    (p_g: group g's share of the leaf's weight `w`); 0 for a leaf no row reaches."""
    g = np.unique(np.asarray(table.group, dtype=object), return_inverse=True)[1].ravel()
    n_groups, n_leaves = int(g.max()) + 1, int(leaves.max()) + 1
    out = np.zeros((leaves.shape[1], n_leaves))
    for t in range(leaves.shape[1]):  # one tree at a time: a (rows, trees) key array would be ~100 MB
        mass = np.bincount(leaves[:, t] * n_groups + g, weights=w, minlength=n_leaves * n_groups)
        mass = mass.reshape(n_leaves, n_groups)
        total, sq = mass.sum(axis=1), (mass * mass).sum(axis=1)
        out[t] = np.divide(total * total, sq, out=np.zeros_like(total), where=sq > 0)
    return out


def leaf_coverage(neff_table: np.ndarray, leaves: np.ndarray, min_groups: float) -> np.ndarray:
    """Share of each row's trees whose leaf spans >= `min_groups` effective groups (a leaf index past the
    table, which the training rows never reached, counts as not covered)."""
    n_trees, n_leaves = neff_table.shape
    inside = leaves < n_leaves
    neff = np.where(inside, neff_table[np.arange(n_trees)[None, :], np.minimum(leaves, n_leaves - 1)], 0.0)
    return (neff >= min_groups).mean(axis=1)


def out_of_group_scores(table: Table, config: FeatureRankerConfig, folds: int) -> np.ndarray:
    """Each row scored by a model trained without its split group: the groups are dealt round-robin
    (largest first) into `folds` folds."""
    scores = np.full(len(table), np.nan)
    for held in group_folds(table, folds):
        scores[held] = _train(table.subset(~held), config).score_rows(table.x[held])
    return scores


def group_folds(table: Table, folds: int) -> list[np.ndarray]:
    """Row masks of `folds` folds of whole split groups, dealt round-robin, largest group first (fewer
    folds when there are fewer groups)."""
    groups = sorted(set(table.group), key=lambda g: (-table.group.count(g), g))
    fold_of = {g: i % folds for i, g in enumerate(groups)}
    fold = np.asarray([fold_of[g] for g in table.group])
    return [fold == k for k in range(min(folds, len(groups)))]


def _held_out_parts(table: Table, config: FeatureRankerConfig, folds: list[np.ndarray],
                    on_fold: Callable[[FeatureRanker, np.ndarray], None] | None = None):
    """What a nested choice scores: every row's prior and tree parts from the model trained on the other
    folds (`on_fold(inner, held)` sees each such model, trained with the gate's leaf table then), and the
    >= `CHOICE_GAP` pairs; None where there is no such pair (nothing is trained then)."""
    from cudaperf.ranker.pairs import at_least, make_pairs

    pairs = make_pairs(table)
    pairs = pairs.select(at_least(pairs, CHOICE_GAP))
    if not len(pairs):
        return None
    prior_part, tree_part = np.zeros(len(table)), np.zeros(len(table))
    for held in folds:
        inner = _train(table.subset(~held), config, leaf_table=on_fold is not None)
        x = table.x[held]
        prior_part[held], tree_part[held] = inner.prior.of(x), inner.tree_part(x)
        if on_fold is not None:
            on_fold(inner, held)
    return prior_part, tree_part, pairs


def choose_tree_weight(table: Table, config: FeatureRankerConfig) -> TreeWeightChoice | None:
    """The nested choice of `tree_weight` on `table` alone (module docstring); None where it cannot be
    made (one split group, or no >= 1.5x pair among the held-out rows): the configured weight stays."""
    from cudaperf.ranker import metrics

    folds = group_folds(table, config.inner_folds)
    parts = _held_out_parts(table, replace(config, tree_weight=1.0), folds) if len(folds) >= 2 else None
    if parts is None:
        return None
    prior_part, tree_part, pairs = parts
    grid = tuple(sorted(config.tree_weight_grid))
    accs = [metrics.accuracy(prior_part + w * tree_part, pairs) for w in grid]
    best = int(np.argmax([a.macro for a in accs]))  # the first maximum: ties go to the smaller weight
    per = np.asarray(list(accs[best].per_family.values()))
    se = float(per.std(ddof=1) / np.sqrt(len(per))) if len(per) > 1 else 0.0
    return TreeWeightChoice(
        grid, tuple(a.macro for a in accs), se, float(grid[best]), len(per), len(pairs), len(folds)
    )


def choose_gate(table: Table, config: FeatureRankerConfig) -> GateChoice | None:
    """The nested choice of (gate_min_groups, gate_power) on `table` alone (module docstring); None where it
    cannot be made (one split group, or no >= 1.5x pair among the held-out rows): the configured gate
    stays."""
    from cudaperf.ranker import metrics

    folds = group_folds(table, config.gate_inner_folds)
    ks, powers = tuple(sorted(config.gate_grid_min_groups)), tuple(sorted(config.gate_grid_power))
    cover = np.zeros((len(ks), len(table)))

    def coverage(inner: FeatureRanker, held: np.ndarray) -> None:
        leaves = inner._leaves(table.x[held])
        for i, k in enumerate(ks):
            cover[i, held] = leaf_coverage(inner.leaf_groups, leaves, k)

    parts = (_held_out_parts(table, replace(config, gate_power=0.0), folds, coverage)
             if len(folds) >= 2 else None)
    if parts is None:
        return None
    prior_part, tree_part, pairs = parts
    macro = [
        [metrics.accuracy(prior_part + cover[i] ** p * tree_part, pairs).macro for p in powers]
        for i in range(len(ks))
    ]
    # ties to the smaller power (0 first: no gate), then the smaller k
    order = [(p, i) for p in range(len(powers)) for i in range(len(ks))]
    best_p, best_k = max(order, key=lambda pi: (macro[pi[1]][pi[0]], -pi[0], -pi[1]))
    families = len(metrics.accuracy(prior_part + tree_part, pairs).per_family)
    return GateChoice(
        ks, powers, tuple(map(tuple, macro)), ks[best_k], powers[best_p], families, len(pairs), len(folds)
    )


def fit_scale(scores: np.ndarray, table: Table, max_pairs: int = 200_000, seed: int = 0, pairs=None) -> float:
    """Logistic slope s maximising the likelihood of sigmoid(s * (score_a - score_b)) on the table's
    pairs (>= the noise floor) whose rows both have finite scores; 1-D, solved by a bounded scalar
    minimisation (scipy)."""
    from scipy.optimize import minimize_scalar

    from cudaperf.ranker.pairs import make_pairs

    pairs = make_pairs(table, seed=seed) if pairs is None else pairs
    pairs = pairs.select(np.isfinite(scores[pairs.a]) & np.isfinite(scores[pairs.b]))
    if len(pairs) == 0:
        return 1.0
    if len(pairs) > max_pairs:
        pairs = pairs.select(np.random.default_rng(seed).permutation(len(pairs))[:max_pairs])
    d = scores[pairs.a] - scores[pairs.b]
    y = np.where(pairs.a_faster, 1.0, -1.0)

    def nll(s: float) -> float:
        return float(np.logaddexp(0.0, -y * s * d).mean())

    return float(minimize_scalar(nll, bounds=(0.01, 50.0), method="bounded").x)


class FeatureBackend:
    """The feature ranker behind the `Ranker` contract (contract.py): computes a candidate's features
    (trace, analysis, one cached compile per source) and scores them. Caches the task views and the
    compiler facts per source; not thread-safe (one per thread).

    `pool`: a CPU-mode `cudaperf.execute.WorkerPool`; when given, candidates' host code is traced inside
    its sandboxed worker (`trace.trace_isolated`) instead of in this process: use it for model-written
    candidates."""

    name = "feature"

    def __init__(self, model: FeatureRanker, *, compile: bool = True, max_cached: int = 4096, pool=None):
        self.model = model
        self.compile = compile
        self.pool = pool
        self._problems: dict[str, object] = {}
        self._facts: dict[str, object] = {}
        self._max_cached = max_cached

    def problem(self, task):
        from cudaperf.ranker.problem import Problem

        key = getattr(task, "task_id", None) or id(task)
        if key not in self._problems:
            if len(self._problems) >= self._max_cached:
                self._problems.clear()
            self._problems[key] = Problem.of(task)
        return self._problems[key]

    def facts(self, candidate: str):
        import hashlib

        from cudaperf.ranker.features import compiler_facts

        if not self.compile:
            return None
        key = hashlib.sha256(candidate.encode()).hexdigest()
        if key not in self._facts:
            if len(self._facts) >= self._max_cached:
                self._facts.clear()
            self._facts[key] = compiler_facts(candidate)
        return self._facts[key]

    def features(self, candidate: str, task, config: str):
        from cudaperf.ranker.features import config_features
        from cudaperf.ranker.trace import trace_isolated, trace_solution

        tracer = trace_solution if self.pool is None else (lambda s, p, c: trace_isolated(s, p, c, self.pool))
        return config_features(
            candidate, self.problem(task), config, facts=self.facts(candidate), compile=False, tracer=tracer
        )

    def score(self, candidate: str, task, config: str) -> float:
        return float(self.model.score_rows(np.asarray(self.features(candidate, task, config).values))[0])

    def score_many(self, candidates, task, config: str) -> list[float]:
        x = np.asarray([self.features(c, task, config).values for c in candidates], dtype=np.float64)
        return [float(s) for s in self.model.score_rows(x)] if len(x) else []

    def compare(self, a: str, b: str, task, config: str) -> float:
        sa, sb = self.score_many([a, b], task, config)
        return float(self.model.compare_scores(sa, sb))

    def probability_of_score(self, score: float) -> float:
        return float(self.model.compare_scores(score, 0.0))

    def explain(self, candidate: str, task, config: str, top: int = 5) -> list[tuple[str, float]]:
        """The features that moved this candidate's score most (TreeSHAP contributions)."""
        return self.model.explain(np.asarray(self.features(candidate, task, config).values), top)[0]

    def explain_compare(self, a: str, b: str, task, config: str, top: int = 5) -> list[tuple[str, float]]:
        xa = np.asarray(self.features(a, task, config).values)
        xb = np.asarray(self.features(b, task, config).values)
        return self.model.explain_pair(xa, xb, top)
