"""Held-out tasks of the training families: the tasks no training run sees, so that the before/after
evaluation can ask whether a model learned its training families (not only memorised their tasks).

The dataset's split (`cudaperf.datasets.splits`) holds out whole families (val, test); inside the train
families every task is trainable. `heldout_ids` sets aside, in every train family of each kind, the same
small share of its tasks in every run: the ones whose hash of (dataset seed, task id) sorts first, at
least one per family of two or more tasks. SFT (`sft_data.split_tasks`) and RL (`resolve_tasks`) leave
them out whenever `holdout_fraction` > 0, and the evaluation (`compare.py`) names them with the task spec
`heldout:train`.

`resolve_tasks` is `cudaperf.agent.taskset.resolve` with the held-out tasks removed before the limit is
applied (so `limit_tasks` still gives that many training tasks), plus the `heldout:train` spec.

Not covered: the family split itself (`cudaperf.datasets.splits`), loading task files
(`cudaperf.agent.taskset`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Sequence
from typing import Any

HELDOUT_SPEC = "heldout:train"


def heldout_ids(tasks: Iterable[Any], assigned: dict[str, str], fraction: float,
                dataset_seed: int = 0) -> frozenset[str]:
    """Ids of the held-out tasks among `tasks` (index records with task_id, kind, family) whose split in
    `assigned` is 'train': per (kind, family), round(fraction * n) tasks, at least one when n >= 2."""
    if fraction <= 0:
        return frozenset()
    families: dict[tuple[str, str], list[str]] = {}
    for t in tasks:
        if assigned.get(t.task_id) == "train":
            families.setdefault((t.kind.value, t.family or ""), []).append(t.task_id)
    out: set[str] = set()
    for ids in families.values():
        if len(ids) < 2:
            continue  # a family of one task would not be a training family without it
        count = min(len(ids) - 1, max(1, round(fraction * len(ids))))
        out.update(sorted(ids, key=lambda i: _hash(dataset_seed, i))[:count])
    return frozenset(out)


def _hash(seed: int, task_id: str) -> str:
    return hashlib.sha256(f"{seed}/{task_id}".encode()).hexdigest()


def index_heldout(fraction: float, dataset_seed: int = 0) -> tuple[list[Any], dict[str, str], frozenset[str]]:
    """(the task index, task_id -> split, the held-out ids) at `dataset_seed`."""
    from cudaperf.datasets import registry, splits

    index = registry.build_index(dataset_seed)
    assigned = splits.split_tasks(index, dataset_seed)
    return index, assigned, heldout_ids(index, assigned, fraction, dataset_seed)


def resolve_tasks(specs: Sequence[str], *, kinds: Sequence[str] = (), families: Sequence[str] = (),
                  limit: int = 0, holdout_fraction: float = 0.0, only: Collection[str] | None = None) -> Any:
    """The `TaskSet` of `specs` as `agent.taskset.resolve` gives it, without the held-out tasks (when
    `holdout_fraction` > 0); `heldout:train` gives exactly the held-out tasks, and `split:NAME` (no
    directory) is read from the index with the held-out tasks removed before `limit` is applied. `only`:
    these task ids and no others (None: all), also before `limit`."""
    from cudaperf.agent.taskset import TaskSet, TaskSpecError, resolve, select, tasks_from_generated

    needs_index = any(s == HELDOUT_SPEC or (s.startswith("split:") and s.count(":") == 1) for s in specs)
    if HELDOUT_SPEC in specs and holdout_fraction <= 0:
        raise TaskSpecError(f"{HELDOUT_SPEC} needs holdout_fraction > 0 (no task is held out otherwise)")
    index, assigned, held = index_heldout(holdout_fraction) if needs_index else ([], {}, frozenset())
    tasks: list[Any] = []
    errors: list[str] = []
    for spec in specs:
        if spec == HELDOUT_SPEC or (spec.startswith("split:") and spec.count(":") == 1):
            name = spec.split(":", 1)[1]
            chosen = [g for g in index if (g.task_id in held if spec == HELDOUT_SPEC
                                           else assigned[g.task_id] == name and g.task_id not in held)
                      and (only is None or g.task_id in only)]
            found, bad = tasks_from_generated(select(chosen, kinds=kinds, families=families, limit=limit))
        else:
            other = resolve([spec], kinds=kinds, families=families)
            found, bad = [t for t in other.tasks if t.task_id not in held
                          and (only is None or t.task_id in only)], list(other.errors)
        tasks.extend(found)
        errors.extend(bad)
    unique = list({t.task_id: t for t in reversed(tasks)}.values())[::-1]
    return TaskSet(tuple(select(unique, kinds=kinds, families=families, limit=limit)), tuple(errors))


def headroom_ids(min_headroom: float, measurements: str) -> frozenset[str] | None:
    """The task ids the measurements in `measurements` show `min_headroom` or more of room over the
    baseline on (`datasets.measure.headroom`), for `resolve_tasks`' `only`; None when `min_headroom` is 0."""
    if not min_headroom:
        return None
    from pathlib import Path

    from cudaperf.datasets.measure import stats
    from cudaperf.datasets.measure.headroom import task_headroom
    from cudaperf.train.config import ConfigError

    if not stats.measurement_files(Path(measurements)):
        raise ConfigError(f"measurements={measurements!r}: no measurements*.jsonl[.gz] there; name the "
                          "directory `cudaperf dataset measure` wrote")
    found = task_headroom(stats.task_summaries(stats.load_current(Path(measurements))))
    return frozenset(task_id for task_id, room in found.items() if room >= min_headroom)


__all__ = ["HELDOUT_SPEC", "headroom_ids", "heldout_ids", "index_heldout", "resolve_tasks"]
