"""Saving and loading a trained feature ranker with its feature schema and library versions.

A model file is gzipped JSON: `format` ("cudaperf-ranker/2"; "/1" files, one booster, still load),
`backend` ("feature"), `schema_version` and `feature_names` (what `features.py` computed when it was
trained), `versions` (cudaperf, lightgbm, numpy and Python at training time), the calibration `scale`, the
cost-model `prior` (weight and fill), the training configuration (with the trees' weight `tree_weight`
and, when `fit` chose it, `tree_weight_choice`: the nested choice's curve), when the per-row gate is on or
was chosen its per-leaf table `leaf_groups` and `gate_choice`, a free `trained_on` description (data,
rows, pairs), and the LightGBM model as text (LightGBM's own portable format): `model`, or `models` for a
seed ensemble (one text per member). A file saved before `tree_weight` existed loads with weight 1, one
saved before the gate existed with the gate off, one saved before `ensemble` existed as one booster.

`load_model(path)` returns a `Loaded` record: the backend, or `None` with a message that says what is wrong
and how to fix it — a model computed on another feature schema is refused (its trees would read the wrong
columns), never silently used. A different LightGBM version is only a warning: its text format is stable.

`default_model_path()` is the small model shipped with the package (`ranker/models/feature_ranker.json.gz`),
so `cudaperf rank score` works out of the box.

Not covered: the LM backend's checkpoints (a Hugging Face directory, see lm_ranker.py).
"""

from __future__ import annotations

import gzip
import json
import platform
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from cudaperf.ranker.feature_ranker import (
    FeatureBackend,
    FeatureRanker,
    FeatureRankerConfig,
    GateChoice,
    Prior,
    SeedEnsemble,
    TreeWeightChoice,
)
from cudaperf.ranker.features import FEATURE_NAMES, SCHEMA_VERSION

FORMAT = "cudaperf-ranker/2"  # /2: a seed ensemble may be stored (`models`); /1 files load too
READABLE_FORMATS = ("cudaperf-ranker/1", FORMAT)


@dataclass(frozen=True)
class Loaded:
    """A loaded backend, or None and why not; warnings that did not stop the load."""

    backend: FeatureBackend | None
    error: str = ""
    warnings: tuple[str, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)


def versions() -> dict[str, str]:
    import lightgbm
    import numpy

    from cudaperf import __version__ as cudaperf_version

    return {
        "cudaperf": str(cudaperf_version),
        "lightgbm": lightgbm.__version__,
        "numpy": numpy.__version__,
        "python": platform.python_version(),
    }


def save_model(model: FeatureRanker, path: Path, trained_on: dict[str, Any] | None = None) -> Path:
    doc = {
        "format": FORMAT,
        "backend": "feature",
        "schema_version": SCHEMA_VERSION,
        "feature_names": list(model.feature_names),
        "versions": versions(),
        "scale": model.scale,
        "prior": {"weight": model.prior.weight, "fill": model.prior.fill},
        "config": model.config_dict(),
        "tree_weight_choice": asdict(model.choice) if model.choice is not None else None,
        "gate_choice": asdict(model.gate_choice) if model.gate_choice is not None else None,
        # full precision: a rounded N_eff can cross a coverage threshold and change a saved model's scores
        "leaf_groups": None if model.leaf_groups is None else model.leaf_groups.tolist(),
        "trained_on": trained_on or {},
        **_booster_fields(model.booster),
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=9) as f:
        json.dump(doc, f)
    return path


def _booster_fields(booster) -> dict[str, Any]:
    """One booster as `model` (its LightGBM text), a seed ensemble as `models` (one text per member)."""
    if isinstance(booster, SeedEnsemble):
        return {"models": booster.model_strings()}
    return {"model": booster.model_to_string()}


def _booster(doc: dict[str, Any]):
    import lightgbm as lgb

    if doc.get("models"):
        return SeedEnsemble([lgb.Booster(model_str=m) for m in doc["models"]])
    return lgb.Booster(model_str=doc["model"])


def load_model(path: Path | str | None = None, *, compile: bool = True, pool=None) -> Loaded:
    """The backend stored at `path` (default: the shipped model); see the module docstring. `pool`: trace
    candidates in that sandboxed worker pool (`FeatureBackend`)."""
    path = Path(path) if path is not None else default_model_path()
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as exc:
        return Loaded(None, f"cannot read ranker model {path}: {type(exc).__name__}: {exc}")
    problem = _schema_problem(doc, path)
    if problem:
        return Loaded(None, problem)
    try:
        # a file from before the seed ensemble holds one booster, whatever today's default
        config = FeatureRankerConfig(**{"ensemble": 1, **doc.get("config", {})})
        prior = Prior(**doc.get("prior", {}))
        choice = TreeWeightChoice(**doc["tree_weight_choice"]) if doc.get("tree_weight_choice") else None
        gate_choice = GateChoice(**doc["gate_choice"]) if doc.get("gate_choice") else None
        leaf_groups = np.asarray(doc["leaf_groups"], dtype=np.float64) if doc.get("leaf_groups") else None
        if config.gate_power > 0 and leaf_groups is None:
            raise ValueError("the gate is on but the file holds no leaf_groups table")
    except (TypeError, ValueError) as exc:  # a field this cudaperf does not know, or a value out of range
        return Loaded(
            None,
            f"{path}: its configuration does not fit this cudaperf ({exc}); retrain it with "
            "`cudaperf rank train --out PATH`",
        )
    booster = _booster(doc)
    model = FeatureRanker(
        booster, doc["scale"], config, tuple(doc["feature_names"]), prior, choice, leaf_groups, gate_choice
    )
    keys = ("schema_version", "versions", "trained_on", "scale", "tree_weight_choice", "gate_choice")
    meta = {k: doc.get(k) for k in keys}
    return Loaded(FeatureBackend(model, compile=compile, pool=pool), "", _version_warnings(doc), meta)


def _schema_problem(doc: dict[str, Any], path: Path) -> str:
    if doc.get("format") not in READABLE_FORMATS or doc.get("backend") != "feature":
        return f"{path} is not a cudaperf feature-ranker model (format {doc.get('format')!r})"
    theirs, names = doc.get("schema_version"), tuple(doc.get("feature_names") or ())
    if theirs != SCHEMA_VERSION or names != FEATURE_NAMES:
        missing = sorted(set(FEATURE_NAMES) - set(names))[:5]
        extra = sorted(set(names) - set(FEATURE_NAMES))[:5]
        return (
            f"{path} was trained on feature schema {theirs} ({len(names)} features) but this cudaperf "
            f"computes schema {SCHEMA_VERSION} ({len(FEATURE_NAMES)} features; missing there: {missing}, "
            f"unknown here: {extra}): its trees would read the wrong columns. Retrain it with "
            "`cudaperf rank train --out PATH`."
        )
    return ""


def _version_warnings(doc: dict[str, Any]) -> tuple[str, ...]:
    import lightgbm

    theirs = (doc.get("versions") or {}).get("lightgbm")
    if theirs and theirs.split(".")[0] != lightgbm.__version__.split(".")[0]:
        return (f"model saved with lightgbm {theirs}, loaded with {lightgbm.__version__}",)
    return ()


def default_model_path() -> Path:
    return Path(str(resources.files("cudaperf.ranker") / "models" / "feature_ranker.json.gz"))
