"""The measured dataset as the ranker's table: one row per (task, configuration, implementation) that ran
correctly, with its median time, the task's family and split group, and its features (`features.py`).

Features are computed once per implementation source and cached on disk, one JSON file per task under
`cache_dir` (default `.cache/ranker/` in the working directory), keyed by the source hash and the feature
schema: a rerun reads them back in seconds; a changed generator or schema recomputes only what changed.
`build_table(..., workers=2)` computes missing features in a spawn-based process pool.

Not covered: pairs and splits (`pairs.py`), models (`feature_ranker.py`).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cudaperf.ranker.features import FEATURE_NAMES, SCHEMA_VERSION, config_features

DEFAULT_MEASURE_DIR = Path("benchmarks/dataset_measure")
DEFAULT_CACHE_DIR = Path(".cache/ranker")


@dataclass(frozen=True)
class Table:
    """Rows of correct measured runs; arrays are aligned (row i of `x` is `keys[i]`)."""

    keys: tuple[tuple[str, str, str], ...]  # (task_id, config, impl_id)
    family: tuple[str, ...]
    group: tuple[str, ...]  # split group ("kind:group"): the unit held out by splits and LOFO
    split: tuple[str, ...]  # the task's split: train / val / test, or fresh (held out of the dataset)
    time_ms: np.ndarray  # median time
    rel_iqr: np.ndarray  # IQR / median: the spread of the row's timed calls
    n_samples: np.ndarray  # timed calls behind the median
    x: np.ndarray  # (rows, len(FEATURE_NAMES)) float64, NaN = unknown
    source_chars: np.ndarray  # for the length baseline only
    structural: np.ndarray  # the reward's structural score

    def __len__(self) -> int:
        return len(self.keys)

    def subset(self, mask: np.ndarray) -> Table:
        idx = np.flatnonzero(mask)

        def pick(seq):
            return tuple(seq[i] for i in idx)

        return Table(
            pick(self.keys),
            pick(self.family),
            pick(self.group),
            pick(self.split),
            self.time_ms[idx],
            self.rel_iqr[idx],
            self.n_samples[idx],
            self.x[idx],
            self.source_chars[idx],
            self.structural[idx],
        )


def _cache_file(cache_dir: Path, task_id: str) -> Path:
    return cache_dir / f"features-s{SCHEMA_VERSION}" / f"{task_id}.json"


def static_facts(measure_dirs: Iterable[Path]) -> dict[str, tuple[str | None, dict[str, Any]]]:
    """impl id -> (source hash, committed static features) from the measurement's `features*` shards."""
    from cudaperf.datasets.jsonl import read_records

    rows, _ = read_records(list(measure_dirs), "features")
    return {r["impl_id"]: (r.get("source_hash"), r.get("features") or {}) for r in rows if "impl_id" in r}


def task_features(
    task: Any,
    impls: list[Any],
    cache_dir: Path,
    statics: dict[str, tuple[str | None, dict[str, Any]]] | None = None,
) -> dict[str, Any]:
    """impl id -> {"hash", "configs": {config: [values, chars, structural, notes]}} for one dataset task,
    read from the cache where the source hash matches, computed (and written back) otherwise. Compiler
    facts come from `statics` (the committed static features) where their source hash matches."""
    from cudaperf.datasets.measure.runner import impl_hash
    from cudaperf.ranker.features import facts_from_static
    from cudaperf.ranker.problem import Problem

    path = _cache_file(cache_dir, task.task_id)
    cached = json.loads(path.read_text()) if path.exists() else {}
    problem, changed = None, False
    for impl in impls:
        h = impl_hash(impl.source)
        if cached.get(impl.impl_id, {}).get("hash") == h:
            continue
        problem = problem or Problem.of(task)
        known_hash, static = (statics or {}).get(impl.impl_id, (None, {}))
        facts = facts_from_static(static) if known_hash == h else None
        configs = {}
        for c in problem.config_names:
            f = config_features(impl.source, problem, c, facts=facts)
            configs[c] = [
                [_json_float(v) for v in f.values],
                f.source_chars,
                _json_float(f.structural_score),
                list(f.notes),
            ]
        cached[impl.impl_id] = {"hash": h, "configs": configs}
        changed = True
    if changed:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(cached))
        tmp.replace(path)
    return cached


def _json_float(v: float) -> float | None:
    return None if math.isnan(v) else v  # JSON has no NaN


_INDEX: dict[str, Any] = {}
_STATICS: dict[str, tuple[str | None, dict[str, Any]]] = {}


def _worker_task(args: tuple[str, int, str, tuple[str, ...]]) -> str:
    task_id, seed, cache_dir, measure_dirs = args
    from cudaperf.datasets import registry

    if not _INDEX:  # fresh families too: a lookup by id, whichever table asked for the task
        _INDEX.update({t.task_id: t for t in registry.build_index(seed, fresh=True)})
        _STATICS.update(static_facts(Path(d) for d in measure_dirs))
    task = _INDEX[task_id]
    task_features(task, registry.implementations(task), Path(cache_dir), _STATICS)
    return task_id


def fill_cache(
    task_ids: Iterable[str],
    *,
    seed: int = 0,
    cache_dir: Path = DEFAULT_CACHE_DIR,
    workers: int = 2,
    progress: bool = False,
    measure_dirs: Iterable[Path] = (DEFAULT_MEASURE_DIR,),
) -> int:
    """Compute the features of every task not yet cached (a pool of `workers` processes); how many ran."""
    todo = [t for t in task_ids if not _cache_file(cache_dir, t).exists()]
    if not todo:
        return 0
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        dirs = tuple(str(d) for d in measure_dirs)
        jobs = [(t, seed, str(cache_dir), dirs) for t in todo]
        for i, _ in enumerate(pool.map(_worker_task, jobs, chunksize=8)):
            if progress and (i + 1) % 200 == 0:
                print(f"features: {i + 1}/{len(todo)} tasks", flush=True)
    return len(todo)


def build_table(
    measure_dirs: tuple[Path, ...] = (DEFAULT_MEASURE_DIR,),
    *,
    seed: int = 0,
    cache_dir: Path = DEFAULT_CACHE_DIR,
    workers: int = 2,
    progress: bool = False,
    families: Iterable[str] | None = None,
    compute_missing: bool = True,
    features: bool = True,
    fresh: bool = False,
) -> Table:
    """The table of every correct measured row (current sources only), features from the cache (rows of
    tasks not cached are computed first, or left out when not `compute_missing`). `features=False`: no
    features at all (NaN), source lengths from the regenerated sources: for the LM backend on a machine
    without the analysis' dependencies. Rows of fresh families (held out of the dataset, split "fresh")
    are kept only with `fresh`: a dataset table never holds them, whatever shards it reads."""
    from cudaperf.datasets import registry, splits
    from cudaperf.datasets.measure.stats import load_current

    m = load_current(*measure_dirs)
    wanted = set(families) if families else None
    rows = [
        r
        for r in m.rows
        if r.get("correct")
        and r.get("status") == "ok"
        and r.get("median_ms")
        and (wanted is None or r.get("family") in wanted)
    ]
    index = {t.task_id: t for t in registry.build_index(seed, fresh=fresh)}
    task_ids = sorted({r["task_id"] for r in rows if r["task_id"] in index})
    split_of = splits.split_tasks(index.values(), seed)
    if not features:
        return _without_features(rows, index, split_of, seed)
    if compute_missing:
        fill_cache(
            task_ids,
            seed=seed,
            cache_dir=cache_dir,
            workers=workers,
            progress=progress,
            measure_dirs=measure_dirs,
        )
    return _assemble(rows, index, split_of, cache_dir)


def _without_features(
    rows: list[dict[str, Any]], index: dict[str, Any], split_of: dict[str, str], seed: int
) -> Table:
    from cudaperf.datasets import registry

    chars = {
        i.impl_id: len(i.source)
        for tid in {r["task_id"] for r in rows}
        if tid in index
        for i in registry.implementations(index[tid])
    }
    entries: dict[str, Any] = {}
    for r in rows:
        if r["impl_id"] in chars:
            configs = entries.setdefault(r["task_id"], {}).setdefault(r["impl_id"], {"configs": {}})[
                "configs"
            ]
            configs[r["config"]] = [[None] * len(FEATURE_NAMES), chars[r["impl_id"]], None, []]
    return _assemble(rows, index, split_of, None, entries)


def _assemble(
    rows: list[dict[str, Any]],
    index: dict[str, Any],
    split_of: dict[str, str],
    cache_dir: Path | None,
    entries: dict[str, Any] | None = None,
) -> Table:
    from cudaperf.datasets import registry

    cache: dict[str, dict[str, Any]] = dict(entries or {})
    keys, fam, grp, spl, t, iqr, ns, xs, chars, struct = [], [], [], [], [], [], [], [], [], []
    for r in sorted(rows, key=lambda r: (r["task_id"], r["config"], r["impl_id"])):
        task = index.get(r["task_id"])
        if task is None:
            continue
        if r["task_id"] not in cache and cache_dir is not None:
            path = _cache_file(cache_dir, r["task_id"])
            cache[r["task_id"]] = json.loads(path.read_text()) if path.exists() else {}
        entry = cache.get(r["task_id"], {}).get(r["impl_id"], {}).get("configs", {}).get(r["config"])
        if entry is None:
            continue
        keys.append((r["task_id"], r["config"], r["impl_id"]))
        fam.append(task.family)
        grp.append(f"{task.kind.value}:{registry.group_of(task)}")
        spl.append(split_of.get(task.task_id, "train"))
        t.append(r["median_ms"])
        iqr.append((r.get("iqr_ms") or 0.0) / r["median_ms"])
        ns.append(max(1, int(r.get("n_samples") or 1)))
        xs.append([np.nan if v is None else v for v in entry[0]])
        chars.append(entry[1])
        struct.append(np.nan if entry[2] is None else entry[2])
    x = np.asarray(xs, dtype=np.float64).reshape(len(xs), len(FEATURE_NAMES))
    return Table(
        tuple(keys),
        tuple(fam),
        tuple(grp),
        tuple(spl),
        np.asarray(t, dtype=np.float64),
        np.asarray(iqr, dtype=np.float64),
        np.asarray(ns, dtype=np.float64),
        x,
        np.asarray(chars, dtype=np.float64),
        np.asarray(struct, dtype=np.float64),
    )


def row_sources(table: Table, seed: int = 0) -> dict[str, str]:
    """impl id -> its source, regenerated from the dataset index (deterministic in the seed)."""
    from cudaperf.datasets import registry

    wanted = {t for t, _, _ in table.keys}
    out: dict[str, str] = {}
    for task in registry.build_index(seed, fresh=True):
        if task.task_id in wanted:
            out.update({impl.impl_id: impl.source for impl in registry.implementations(task)})
    return out
