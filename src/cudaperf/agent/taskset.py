"""Which tasks a refinement run (or a model benchmark) covers, from a list of specs.

Specs, each giving one or more tasks:
  FILE.py | FILE.ctask.json          one task file
  DIR                                every task file of a directory; a built dataset (a directory with
                                     manifest.json, `cudaperf dataset build`) gives every task it lists
  examples                           the bundled example tasks
  split:NAME[:DIR]                   the dataset's train / val / test split: from the task index at seed 0
                                     (`cudaperf.datasets.registry`, nothing on disk needed), or from the
                                     built dataset in DIR (its manifest's splits, without the tasks its
                                     filters left out)
  kernelbench:PATH[:LEVELS]          KernelBench problems from a local checkout (PATH/KernelBench/levelN or
                                     PATH/levelN), levels as a comma list (default 1,2,3); ids `levelN_<stem>`
`select` then keeps the task kinds and families asked for and, with a limit, takes tasks round-robin across
families (so a small run still covers every family), in a deterministic order.

Broken task files are values: they are listed in `TaskSet.errors`, the rest is used.
Not covered: generating the dataset (`cudaperf.datasets`), evaluating anything.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from cudaperf.types import Task, TaskKind

T = TypeVar("T")

SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class TaskSet:
    tasks: tuple[Task, ...]
    errors: tuple[str, ...] = ()  # "<where>: <why>" for every task that could not be loaded


class TaskSpecError(ValueError):
    """A spec that names nothing usable (a typo, a missing path): a usage error, reported before any work."""


def resolve(specs: Sequence[str], *, kinds: Iterable[str] = (), families: Iterable[str] = (),
            limit: int = 0) -> TaskSet:
    """The tasks of every spec (duplicates by task id dropped, first one wins), then `select`ed."""
    tasks: list[Task] = []
    errors: list[str] = []
    wanted = _Selection(tuple(kinds), tuple(families), limit)
    for spec in specs:
        found, bad = _one_spec(spec, wanted)
        tasks.extend(found)
        errors.extend(bad)
    unique = list({t.task_id: t for t in reversed(tasks)}.values())[::-1]
    return TaskSet(tuple(select(unique, kinds=wanted.kinds, families=wanted.families, limit=limit)),
                   tuple(errors))


@dataclass(frozen=True)
class _Selection:
    kinds: tuple[str, ...]
    families: tuple[str, ...]
    limit: int


def select(tasks: Sequence[T], *, kinds: Iterable[str] = (), families: Iterable[str] = (),
           limit: int = 0) -> list[T]:
    """Tasks of the given kinds and families (empty: all), at most `limit` (0: all) taken round-robin
    across families in task-id order. Any records with `task_id`, `kind` and `family` do (`Task`, or the
    index's `GeneratedTask`)."""
    kinds, families = set(kinds), set(families)
    kept = [t for t in tasks if (not kinds or t.kind.value in kinds)
            and (not families or (t.family or "") in families)]
    if not limit or len(kept) <= limit:
        return kept
    by_family: dict[str, list[T]] = {}
    for t in sorted(kept, key=lambda t: t.task_id):
        by_family.setdefault(t.family or "", []).append(t)
    queues = [by_family[f] for f in sorted(by_family)]
    chosen: list[T] = []
    while len(chosen) < limit:
        for q in queues:
            if q and len(chosen) < limit:
                chosen.append(q.pop(0))
    return chosen


def _one_spec(spec: str, wanted: _Selection) -> tuple[list[Task], list[str]]:
    if spec == "examples":
        from cudaperf.tasks.examples import example_tasks_dir

        return _directory(example_tasks_dir())
    if spec.startswith("split:"):
        name, _, root = spec[len("split:"):].partition(":")
        if name not in SPLITS:
            raise TaskSpecError(f"{spec!r}: the split must be one of {SPLITS}")
        return _built_split(Path(root), name) if root else _index_split(name, wanted)
    if spec.startswith("kernelbench:"):
        return _kernelbench(spec[len("kernelbench:"):])
    path = Path(spec).expanduser()
    if path.is_dir():
        return _built_split(path, None) if (path / "manifest.json").is_file() else _directory(path)
    if path.is_file():
        return _file(path)
    raise TaskSpecError(f"{spec!r} is neither a task file, a directory, 'examples', 'split:NAME[:DIR]' "
                        "nor 'kernelbench:PATH[:LEVELS]'")


def _file(path: Path) -> tuple[list[Task], list[str]]:
    from cudaperf.tasks import TaskError, load_task

    try:
        return [load_task(path)], []
    except TaskError as exc:
        return [], [str(exc)]


def _directory(path: Path) -> tuple[list[Task], list[str]]:
    from cudaperf.tasks import TaskError, load_tasks

    errors: list[TaskError] = []
    tasks = load_tasks(path, errors=errors)
    return tasks, [str(e) for e in errors]


def _built_split(root: Path, split: str | None) -> tuple[list[Task], list[str]]:
    """The tasks a built dataset's manifest lists (of one split, or all), loaded from their files."""
    manifest = root / "manifest.json"
    if not manifest.is_file():
        raise TaskSpecError(f"{root}: no manifest.json (`cudaperf dataset build --out {root}` writes one)")
    entries = json.loads(manifest.read_text()).get("tasks", [])
    tasks, errors = [], []
    for e in entries:
        if split is not None and e.get("split") != split:
            continue
        suffix = ".py" if e["kind"] == TaskKind.PYTORCH.value else ".ctask.json"
        found, bad = _file(root / "tasks" / e["kind"] / e["family"] / f"{e['task_id']}{suffix}")
        tasks.extend(found)
        errors.extend(bad)
    return tasks, errors


def _index_split(split: str, wanted: _Selection) -> tuple[list[Task], list[str]]:
    """The split's tasks from the task index at seed 0 (the default build), as `Task` records. The
    selection is applied to the index first: only the tasks kept are loaded (a PyTorch task runs its
    module to load)."""
    from cudaperf.datasets import registry, splits

    index = registry.build_index(0)
    assigned = splits.split_tasks(index, 0)
    chosen = select([g for g in index if assigned[g.task_id] == split], kinds=wanted.kinds,
                    families=wanted.families, limit=wanted.limit)
    return tasks_from_generated(chosen)


def tasks_from_generated(generated: Iterable[Any]) -> tuple[list[Task], list[str]]:
    """The `Task` of each index entry (`task_from_generated`), and for each that fails to load, a line
    naming it and why."""
    tasks, errors = [], []
    for g in generated:
        try:
            tasks.append(task_from_generated(g))
        except Exception as exc:  # noqa: BLE001 - a generator fault names its task and the run goes on
            errors.append(f"{g.task_id}: {type(exc).__name__}: {exc}")
    return tasks, errors


def task_from_generated(generated: Any) -> Task:
    """The `Task` of a task-index entry: a PyTorch task runs its module; a C task gets its naive port."""
    from cudaperf.tasks import task_from_source

    if generated.kind is TaskKind.PYTORCH:
        return task_from_source(generated.text, generated.task_id)
    from cudaperf.datasets import registry
    from cudaperf.tasks.ctask import from_json, to_task

    naive = next((i.source for i in registry.implementations(generated) if i.baseline), None)
    return to_task(from_json(generated.text), naive_cuda=naive)


def _kernelbench(rest: str) -> tuple[list[Task], list[str]]:
    from cudaperf.tasks import TaskError, task_from_source

    head, _, tail = rest.rpartition(":")
    path_text, levels_text = (head, tail) if head and _is_levels(tail) else (rest, "")
    levels = [int(x) for x in levels_text.split(",")] if levels_text else [1, 2, 3]
    root = Path(path_text).expanduser()
    base = root / "KernelBench" if (root / "KernelBench").is_dir() else root
    missing = [lv for lv in levels if not (base / f"level{lv}").is_dir()]
    if missing:
        raise TaskSpecError(f"kernelbench:{rest}: no level{missing[0]} folder under {base}")
    tasks, errors = [], []
    for lv in levels:
        for path in sorted((base / f"level{lv}").glob("*.py")):
            try:
                tasks.append(task_from_source(path.read_text(), f"level{lv}_{path.stem}", str(path)))
            except (TaskError, OSError, UnicodeDecodeError) as exc:
                errors.append(str(exc))
    return tasks, errors


def _is_levels(text: str) -> bool:
    return bool(text) and all(part.isdigit() for part in text.split(","))
