"""The ranker on fresh held-out families: a dataset table never holds their rows, a fresh table holds
only theirs (split "fresh"), and a saved model is scored on them as it is, beside the baselines."""

from __future__ import annotations

import dataclasses
import gzip
import json
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("lightgbm")

from cudaperf.datasets import registry
from cudaperf.datasets.measure import stats
from cudaperf.datasets.measure.stats import impl_hash
from cudaperf.ranker import table as tables
from cudaperf.ranker.feature_ranker import FeatureRanker
from cudaperf.ranker.report import fresh_figures, render_fresh_markdown

sys.path.insert(0, str(Path(__file__).parent))
from test_ranker_model import FAST, synthetic_table

FAMILY = "fresh_reduce_copy"


@pytest.fixture
def fresh_family(monkeypatch):
    """A stand-in fresh family: the dataset's reduce_all under a new name, one unused declaration added to
    its serial code so that its tasks are not duplicates of the dataset's (real tasks, real sources)."""
    base = registry.family("reduce_all")

    def make(variant):
        task = base.make(variant)
        return dataclasses.replace(task, source=task.source + "\nstatic const int fresh_copy_marker = 1;\n")

    fam = dataclasses.replace(base, name=FAMILY, group="", make=make)
    monkeypatch.setattr(registry, "FRESH_TORCH_FAMILIES", (fam,))
    monkeypatch.setattr(registry, "FRESH_C_FAMILIES", ())
    stats._index_hashes.cache_clear()
    yield fam
    stats._index_hashes.cache_clear()


@pytest.fixture
def measured(fresh_family, tmp_path):
    """One fresh task measured (made-up medians, one row per implementation and configuration) and its
    features cached, computed in this process (the monkeypatched family is not seen by spawned workers)."""
    task = registry.build_index(0, families=[FAMILY])[0]
    impls = registry.implementations(task)
    rows = [{"record": "row", "v": 2, "task_id": task.task_id, "family": FAMILY, "kind": "c",
             "impl_id": i.impl_id, "source_hash": impl_hash(i.source), "config": c, "correct": True,
             "status": "ok", "median_ms": 1.0 + k, "iqr_ms": 0.001, "n_samples": 100}
            for k, i in enumerate(impls) for c in ("small", "large", "odd")]
    shards = tmp_path / "fresh_measure"
    shards.mkdir()
    with gzip.open(shards / "measurements-20260101T000000Z.jsonl.gz", "wt") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
    cache = tmp_path / "cache"
    tables.task_features(task, impls, cache)
    return shards, cache, len(rows)


def test_a_dataset_table_holds_no_fresh_row(measured):
    shards, cache, _ = measured
    assert len(tables.build_table((shards,), cache_dir=cache, compute_missing=False)) == 0


def test_a_fresh_table_holds_every_fresh_row_with_the_fresh_split(measured):
    shards, cache, n = measured
    table = tables.build_table((shards,), cache_dir=cache, compute_missing=False, fresh=True)
    assert len(table) == n and set(table.split) == {"fresh"} and set(table.family) == {FAMILY}


@pytest.fixture(scope="module")
def scored():
    model = FeatureRanker.fit(synthetic_table(), FAST)
    held_out = synthetic_table(tasks=30, seed=7)
    return fresh_figures(dataclasses.replace(held_out, split=("fresh",) * len(held_out)), model)


def test_the_saved_model_orders_fresh_pairs_it_never_saw(scored):
    assert scored["buckets"][">=1.5x"]["feature_ranker"]["all"]["pooled"] > 0.9


def test_fresh_figures_put_every_baseline_beside_the_model(scored):
    names = set(scored["buckets"][">=1.5x"])
    assert names == {"feature_ranker", "random", "longer_source", "structural", "cost_model"}


def test_fresh_figures_use_the_model_s_own_calibration(scored):
    assert scored["calibration"]["brier"] < 0.25


def test_the_fresh_report_renders_every_family(scored):
    text = render_fresh_markdown({**scored, "model": {"path": "m.json.gz", "sha256": "0" * 64}})
    assert all(f"| {f} |" in text for f in scored["families"])


def test_rank_eval_fresh_without_fresh_rows_says_so(tmp_path, capsys):
    from cudaperf.cli import main

    code = main(["rank", "eval", "--fresh", str(tmp_path), "--out", str(tmp_path / "out")])
    assert code == 2 and "no correct measured row of a fresh family" in capsys.readouterr().err
    assert np.isfinite(code)
