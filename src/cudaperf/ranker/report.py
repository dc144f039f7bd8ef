"""Every figure of issue 20 in one run, as JSON and as markdown: what `cudaperf rank eval` writes.

`evaluate_all(options)` runs the recipe: the measured table (features cached), pairs, leave-one-group-out
scores of the feature ranker, its scores on the dataset's test families, the baselines, optionally the
LM ranker trained on the train families (a tiny model from a config on the CPU, or any Hugging Face model
directory), the pre-filter replay and the scoring speed. `render_markdown(results)` writes the tables.

`evaluate_fresh(...)` scores a saved model, as it is, on the fresh families (held out of the dataset:
`datasets.registry.fresh_families()`) beside the same baselines: no model is trained and nothing is
fitted on their rows, so the figure is blind when the model was saved before their first measurement
(the model file's hash is recorded to show which model it was); `render_fresh_markdown` writes it.

Not covered: the models themselves (feature_ranker.py, lm_ranker.py), the numbers' definitions
(metrics.py, prefilter.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from cudaperf.ranker import evaluation, prefilter
from cudaperf.ranker.feature_ranker import FeatureRankerConfig
from cudaperf.ranker.lm_ranker import LMRankerConfig
from cudaperf.ranker.pairs import make_pairs
from cudaperf.ranker.table import DEFAULT_CACHE_DIR, DEFAULT_MEASURE_DIR, build_table

# The feature ranker and the baselines that score every held-out row, in the tables' column order
HELD_OUT_COLUMNS = ["feature_ranker", "longer_source", "structural", "cost_model", "random"]


@dataclass(frozen=True)
class EvalOptions:
    """What `rank eval` runs."""

    measure_dirs: tuple[Path, ...] = (DEFAULT_MEASURE_DIR,)
    """Shards of the measured dataset."""
    cache_dir: Path = DEFAULT_CACHE_DIR
    """Where computed features are kept between runs."""
    workers: int = 2
    """Processes that compute missing features."""
    lm: str = "tiny"
    """"tiny" (a ~1 M-parameter model from a config), "none", or a Hugging Face model directory."""
    lm_scores: Path | None = None
    """Test-row scores of an LM ranker trained elsewhere (`scripts/ranker_lm_h200.py`'s lm_scores.json),
    shown as "lm_file" beside the others."""
    lm_config: LMRankerConfig = field(default_factory=LMRankerConfig)
    feature_config: FeatureRankerConfig = field(default_factory=FeatureRankerConfig)
    speed_rows: int = 20_000
    """Rows scored for the throughput figure."""
    speed_sources: int = 40
    """Fresh sources scored end to end (trace, analysis, compile, model)."""
    families: tuple[str, ...] = ()
    """Only these families (a quick run); empty: all."""


def evaluate_all(options: EvalOptions, progress: Callable[[str], None] = print) -> dict:
    t0 = time.time()
    table = build_table(
        options.measure_dirs,
        cache_dir=options.cache_dir,
        workers=options.workers,
        progress=True,
        families=options.families or None,
    )
    pairs = make_pairs(table)
    progress(f"table: {len(table)} rows, {len(pairs)} pairs ({time.time() - t0:.0f} s)")
    base = evaluation.baseline_scores(table)
    lofo = evaluation.lofo_scores(table, options.feature_config, progress)
    split = evaluation.split_scores(table, options.feature_config)
    out: dict = {
        "options": _jsonable(asdict(options)),
        "rows": len(table),
        "pairs": len(pairs),
        "lofo": evaluation.figures(table, pairs, {"feature_ranker": lofo.scores, **base}, lofo),
    }
    test_scorers = {"feature_ranker": split.scores, **base}
    if options.lm != "none":
        lm = evaluation.lm_split_scores(table, _lm_factory(options), pairs, progress=progress)
        test_scorers["lm_ranker"] = lm.scores
        out["lm"] = {
            "model": options.lm,
            "config": asdict(options.lm_config),
            "scale": float(np.nanmax(lm.scale)),
            "loss_first_100": float(np.mean(lm.losses[:100])),
            "loss_last_100": float(np.mean(lm.losses[-100:])),
        }
    if options.lm_scores is not None:
        test_scorers["lm_file"] = _scores_from_file(table, options.lm_scores)
    out["test_split"] = evaluation.figures(table, pairs, test_scorers, split)
    out["prefilter"] = prefilter.benchmark(table, lofo.scores)
    out["speed"] = speed(table, options)
    out["seconds"] = time.time() - t0
    return out


def evaluate_fresh(
    measure_dirs: tuple[Path, ...],
    model_path: Path | None = None,
    cache_dir: Path = DEFAULT_CACHE_DIR,
    workers: int = 2,
) -> dict:
    """The saved model (default: the shipped one) on every correct measured row of the fresh families in
    `measure_dirs`, beside the baselines; an "error" entry when there is nothing to score."""
    import hashlib

    from cudaperf.ranker.store import default_model_path, load_model

    path = Path(model_path) if model_path is not None else default_model_path()
    loaded = load_model(path, compile=False)
    if loaded.backend is None:
        return {"error": loaded.error}
    table = build_table(measure_dirs, cache_dir=cache_dir, workers=workers, progress=True, fresh=True)
    table = table.subset(np.asarray([s == "fresh" for s in table.split], dtype=bool))
    if not len(table):
        return {"error": f"no correct measured row of a fresh family in {', '.join(map(str, measure_dirs))}"}
    out = fresh_figures(table, loaded.backend.model)
    out["model"] = {
        "path": str(path),
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        **_jsonable(loaded.meta),
    }
    out["measure_dirs"] = [str(d) for d in measure_dirs]
    return out


def fresh_figures(table, model) -> dict:
    """`evaluation.figures` of `model` as it is (no training, its own calibration slope) and the
    baselines on every row of `table`."""
    scores = model.score_rows(table.x)
    held = evaluation.HeldOut(scores, np.full(len(table), model.scale))
    scorers = {"feature_ranker": scores, **evaluation.baseline_scores(table)}
    out = evaluation.figures(table, make_pairs(table), scorers, held)
    out["rows"] = len(table)
    out["tasks"] = len({k[0] for k in table.keys})
    return out


def render_fresh_markdown(r: dict) -> str:
    if "error" in r:
        return f"# Fresh held-out families\n\n{r['error']}\n"
    return "\n".join([
        "# The shipped ranker on fresh held-out families (issue 20)",
        "",
        f"{r['rows']} correct measured rows of {r['tasks']} tasks, {r['pairs']} pairs beyond noise, "
        f"families: {', '.join(r['families'])}. Model: `{r['model']['path']}` (sha256 "
        f"{r['model']['sha256'][:16]}), scored as saved: nothing trained or fitted on these rows.",
        "",
        *_held_out_sections(r, HELD_OUT_COLUMNS, "the model's own slope"),
    ])


def _scores_from_file(table, path: Path) -> np.ndarray:
    """Per-row scores from an lm_scores.json; NaN for rows it does not score (the figures then use only
    pairs every scorer scored)."""
    import json

    scores = json.loads(Path(path).read_text())["scores"]
    return np.asarray([scores.get("|".join(k), np.nan) for k in table.keys], dtype=np.float64)


def _lm_factory(options: EvalOptions):
    from cudaperf.ranker.lm_ranker import LMRanker, load_pretrained, tiny_model

    cfg = options.lm_config

    def make(texts: list[str]) -> LMRanker:
        if options.lm == "tiny":
            model, tok = tiny_model(texts, max_tokens=cfg.max_tokens, seed=cfg.seed)
        else:
            model, tok = load_pretrained(options.lm)
        return LMRanker(model.to(cfg.device), tok, cfg)

    return make


def speed(table, options: EvalOptions) -> dict:
    """Candidates scored per second with features computed, and source-to-score seconds per candidate."""
    from cudaperf.ranker.feature_ranker import FeatureRanker
    from cudaperf.ranker.table import row_sources

    sample = np.random.default_rng(0).permutation(len(table))[:5000]
    model = FeatureRanker.fit(
        table.subset(np.isin(np.arange(len(table)), sample)), options.feature_config, calibration_folds=0
    )
    rows = table.x[np.resize(np.arange(len(table)), options.speed_rows)]
    t = time.perf_counter()
    model.score_rows(rows)
    batch_s = time.perf_counter() - t
    t = time.perf_counter()
    for r in rows[:500]:
        model.score_rows(r)
    one_s = (time.perf_counter() - t) / 500
    return {
        "rows": len(rows),
        "batch_candidates_per_s": len(rows) / batch_s,
        "single_call_ms": one_s * 1e3,
        **_end_to_end(table, model, row_sources(table), options.speed_sources),
    }


def _end_to_end(table, model, sources: dict[str, str], n: int) -> dict:
    """Fresh backends on `n` sources: the first score (trace + analysis + NVRTC/ptxas build, its disk
    cache cleared by a unique comment) and the second configuration's score (build cached in memory)."""
    from cudaperf.datasets import registry
    from cudaperf.ranker.feature_ranker import FeatureBackend

    index = {t.task_id: t for t in registry.build_index(0)}
    picks = np.random.default_rng(1).permutation(len(table))[:n]
    first, second = [], []
    for k, i in enumerate(picks):
        task_id, config, impl = table.keys[i]
        backend = FeatureBackend(model)
        source = sources[impl] + f"\n# end-to-end timing probe {time.time_ns()} {k}\n"
        source = source.replace('extern "C"', f'// probe {time.time_ns()}\nextern "C"', 1)
        t = time.perf_counter()
        backend.score(source, index[task_id], config)
        first.append(time.perf_counter() - t)
        other = next(c for c in backend.problem(index[task_id]).config_names if c != config)
        t = time.perf_counter()
        backend.score(source, index[task_id], other)
        second.append(time.perf_counter() - t)
    return {
        "end_to_end_sources": n,
        "end_to_end_first_s_median": float(np.median(first)),
        "end_to_end_first_s_p90": float(np.quantile(first, 0.9)),
        "end_to_end_cached_build_s_median": float(np.median(second)),
    }


def _jsonable(value):
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return str(value) if isinstance(value, Path) else value


# --------------------------------------------------------------------------------------------------
# Markdown


def _pct(v) -> str:
    return "n/a" if v is None else f"{100 * v:.1f}%"


def _bucket_table(fig: dict, bucket: str, names: list[str], which: str = "all") -> list[str]:
    b = fig["buckets"][bucket]
    fams = sorted({f for n in names for f in b[n][which]["per_family"]})
    lines = ["| family | pairs | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for f in fams:
        n_pairs = b[names[0]][which]["pairs_per_family"].get(f, 0)
        lines.append(
            f"| {f} | {n_pairs} | " + " | ".join(_pct(b[n][which]["per_family"].get(f)) for n in names) + " |"
        )
    lines.append(
        "| **macro (families)** | | " + " | ".join(f"**{_pct(b[n][which]['macro'])}**" for n in names) + " |"
    )
    lines.append(
        f"| **pooled (pairs)** | {b[names[0]][which]['pairs']} | "
        + " | ".join(_pct(b[n][which]["pooled"]) for n in names)
        + " |"
    )
    return lines


def _summary(fig: dict, names: list[str]) -> list[str]:
    lines = [
        "| gap | pairs | " + " | ".join(f"{n} macro / pooled" for n in names) + " |",
        "|---|---|" + "---|" * len(names),
    ]
    for bucket, per in sorted(fig["buckets"].items(), key=lambda kv: float(kv[0][2:-1])):
        for which in ("all", "length_controlled"):
            label = bucket + (" length-controlled" if which != "all" else "")
            cells = [f"{_pct(per[n][which]['macro'])} / {_pct(per[n][which]['pooled'])}" for n in names]
            lines.append(f"| {label} | {per[names[0]][which]['pairs']} | " + " | ".join(cells) + " |")
    return lines


def render_markdown(r: dict) -> str:
    lofo_names = HELD_OUT_COLUMNS
    test_names = [
        n
        for n in (
            "feature_ranker", "lm_ranker", "lm_file", "longer_source", "structural", "cost_model", "random"
        )
        if n in r["test_split"]["buckets"][">=1.5x"]
    ]
    parts = [
        "# Offline pairwise ranker (issue 20)",
        "",
        (
            f"{r['rows']} correct measured rows, {r['pairs']} pairs beyond noise "
            "(>= 1.05x and notches apart). "
            f"Regenerate: `cudaperf rank eval --out DIR` ({r['seconds']:.0f} s here)."
        ),
        "",
        "## Leave one split group out (feature ranker vs baselines)",
        "",
        *_held_out_sections(r["lofo"], lofo_names, "all held-out pairs"),
        "## Dataset split: train + val families -> test families",
        "",
        *_summary(r["test_split"], test_names),
        "",
        "### Per family, >= 1.5x pairs",
        "",
        *_bucket_table(r["test_split"], ">=1.5x", test_names),
        "",
        "## Pre-filter (top-k by held-out ranker score vs random k vs all)",
        "",
        *_prefilter(r["prefilter"]),
        "",
        "## Speed",
        "",
        *_speed(r["speed"]),
        "",
    ]
    return "\n".join(parts)


def _held_out_sections(fig: dict, names: list[str], calibration_note: str) -> list[str]:
    """Summary, per-family tables (all and length-controlled >= 1.5x pairs), Kendall tau, calibration."""
    return [
        *_summary(fig, names),
        "",
        "### Per family, >= 1.5x pairs",
        "",
        *_bucket_table(fig, ">=1.5x", names),
        "",
        "### Per family, >= 1.5x length-controlled pairs (sources within 10% in length)",
        "",
        *_bucket_table(fig, ">=1.5x", names, "length_controlled"),
        "",
        "### Kendall tau per family (mean over tasks)",
        "",
        *_tau_table(fig, names),
        "",
        f"### Calibration of P(a faster), {calibration_note}",
        "",
        *_calibration(fig),
        "",
    ]


def _tau_table(fig: dict, names: list[str]) -> list[str]:
    taus = fig["kendall_tau"]
    lines = ["| family | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for f in sorted(taus[names[0]]):
        lines.append(f"| {f} | " + " | ".join(f"{taus[n].get(f, float('nan')):.2f}" for n in names) + " |")
    return lines


def _calibration(fig: dict) -> list[str]:
    c = fig.get("calibration")
    if not c:
        return ["(no calibration)"]
    lines = [
        f"ECE {c['ece']:.3f}, Brier {c['brier']:.3f}",
        "",
        "| bin from | mean P | observed | pairs |",
        "|---|---|---|---|",
    ]
    lines += [f"| {lo:.1f} | {p:.3f} | {o:.3f} | {n} |" for lo, p, o, n in c["bins"]]
    return lines


def _prefilter(p: dict) -> list[str]:
    lines = [
        (
            f"{p['tasks']} tasks with >= {p['min_candidates']} correct implementations "
            f"({p['candidates_mean']:.1f} on average). Quality: geomean of best time / best-found time."
        ),
        "",
        (
            "| policy | evaluations | ranker: quality | ranker: best found | random: quality "
            "| random: best found |"
        ),
        "|---|---|---|---|---|---|",
    ]
    for name, v in sorted(p["policies"].items(), key=lambda kv: (kv[0] == "all", kv[0])):
        if name == "all":
            lines.append("| all | 100% | 1.000 | 100% | 1.000 | 100% |")
            continue
        lines.append(
            f"| {name} | {_pct(v['evaluations_share'])} | {v['ranker']['speed_vs_best_geomean']:.3f} | "
            f"{_pct(v['ranker']['best_found_share'])} | {v['random']['speed_vs_best_geomean']:.3f} | "
            f"{_pct(v['random']['best_found_share'])} |"
        )
    return lines


def _speed(s: dict) -> list[str]:
    return [
        (
            f"- features computed: {s['batch_candidates_per_s']:,.0f} candidates/s in one batch of "
            f"{s['rows']}; "
            f"{s['single_call_ms']:.2f} ms per single-candidate call"
        ),
        (
            f"- source to score ({s['end_to_end_sources']} fresh sources: trace, analysis, NVRTC + ptxas): "
            "median "
            f"{s['end_to_end_first_s_median']:.3f} s, p90 {s['end_to_end_first_s_p90']:.3f} s; another "
            f"configuration of the same source (build cached): {s['end_to_end_cached_build_s_median']:.3f} s"
        ),
    ]
