"""The index of every generated task: all families of both kinds, variants drawn from one seed,
task ids from the normalised source hash, duplicates dropped.

Fresh families (`fresh_families()`: written after the dataset, held out of it) are indexed only when
asked for, by name or with `fresh=True`: the dataset's tasks and splits never depend on them.

`build_index(seed)` is cheap (string templates only: no compiler, no torch), so the full index of
thousands of tasks can be listed, counted and split anywhere; implementations are generated on demand.

Not covered: writing files (export.py), checking tasks (filters/, `cudaperf dataset validate`).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import Counter
from collections.abc import Iterable

import numpy as np

from cudaperf.datasets.generate.c_dependent_families import DEP_FAMILIES
from cudaperf.datasets.generate.c_parallel_families import LOOP_FAMILIES
from cudaperf.datasets.generate.fresh_c_families import FRESH_C_FAMILIES
from cudaperf.datasets.generate.fresh_torch_families import FRESH_TORCH_FAMILIES
from cudaperf.datasets.generate.torch_families import torch_families
from cudaperf.datasets.records import Family, GeneratedTask, Implementation, normalise, source_hash
from cudaperf.tasks.ctask import CTask, to_json
from cudaperf.types import TaskKind


def all_families() -> tuple[Family, ...]:
    """The dataset's families."""
    return (*torch_families(), *LOOP_FAMILIES, *DEP_FAMILIES)


def fresh_families() -> tuple[Family, ...]:
    """Families held out of the dataset (the ranker's fresh held-out set)."""
    return (*FRESH_TORCH_FAMILIES, *FRESH_C_FAMILIES)


def is_fresh(family_name: str) -> bool:
    return any(f.name == family_name for f in fresh_families())


def family(name: str) -> Family:
    return next(f for f in (*all_families(), *fresh_families()) if f.name == name)


def _family_rng(seed: int, name: str) -> np.random.Generator:
    """One generator per (seed, family): adding a family never changes the tasks of the others."""
    digest = hashlib.sha256(name.encode()).digest()
    return np.random.default_rng([int(seed) & 0xFFFFFFFF, int.from_bytes(digest[:8], "little")])


def _generate(fam: Family, variant: dict) -> tuple[str, str, str]:
    """(task id, file text, dedupe key) of one variant."""
    made = fam.make(variant)
    if isinstance(made, CTask):
        key = normalise(made.source + made.signature())
        task_id = f"c_{fam.name}_{source_hash(key, 12)}"
        return task_id, to_json(dataclasses.replace(made, task_id=task_id)), key
    key = normalise(made)
    return f"pt_{fam.name}_{source_hash(key, 12)}", made, key


def build_index(seed: int = 0, kinds: Iterable[TaskKind] = (TaskKind.PYTORCH, TaskKind.C),
                families: Iterable[str] | None = None, fresh: bool = False) -> list[GeneratedTask]:
    """Every task of the selected families, in a deterministic order, without duplicates. Fresh families
    take part when named in `families` or, with `fresh`, all of them beside the dataset's."""
    wanted_kinds, wanted = set(kinds), set(families) if families else None
    seen: set[str] = set()
    out: list[GeneratedTask] = []
    named_fresh = wanted is not None and any(f.name in wanted for f in fresh_families())
    for fam in (*all_families(), *(fresh_families() if fresh or named_fresh else ())):
        if fam.kind not in wanted_kinds or (wanted is not None and fam.name not in wanted):
            continue
        for variant in fam.variants(_family_rng(seed, fam.name)):
            task_id, text, key = _generate(fam, variant)
            if key in seen:  # the same normalised source from another variant: one task only
                continue
            seen.add(key)
            out.append(GeneratedTask(task_id, fam.kind, fam.name, _plain(variant), text, key))
    return out


def implementations(task: GeneratedTask) -> list[Implementation]:
    return family(task.family).implementations(task.variant, task.task_id)


def group_of(task: GeneratedTask) -> str:
    fam = family(task.family)
    return fam.group or fam.name


def counts(tasks: Iterable[GeneratedTask]) -> dict[str, Counter]:
    by_kind: dict[str, Counter] = {}
    for t in tasks:
        by_kind.setdefault(t.kind.value, Counter())[t.family] += 1
    return by_kind


def _plain(value: object) -> object:
    """JSON-plain copy of a variant (tuples become lists) so it round-trips through the manifest."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value
