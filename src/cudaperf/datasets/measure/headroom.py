"""How much faster than its baseline a task can be made, as far as the dataset's own implementations
show: per family, the speedup of each task's fastest correct implementation over the baseline a policy
is judged against (the naive CUDA port for C tasks, PyTorch eager for PyTorch tasks).

A family whose baseline is already (nearly) the fastest implementation gives RL correctness to learn but
no speed: a correct answer there measures at about 1.0x whatever it does, so the reward's speedup term
and fast_1 see only timing noise. Choosing RL's families by this table and by where the warm-started
policy is correct puts it where both are to be had.

Per task (`TaskSummary.speedups`, `stats.summarize_task`): on each configuration, the fastest correct
implementation's time against the baseline's, the geometric mean over configurations. The fastest may
differ between configurations, so this is an upper bound on what one kernel shows; for C tasks the naive
port is among the implementations, so it is at least 1.0. Per family: tasks, the median and 90th
percentile, the share of tasks at 1.1x or more, the share whose baseline was the fastest implementation
on every configuration, and the family's split (RL trains on the train split's families).

`task_headroom` gives each task's, which `train.heldout.headroom_ids` thresholds (`RlConfig.min_headroom`).

Not covered: reading measurements (`stats.load_current`), the per-task ratios between implementations
(`stats`).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol


class TaskSummary(Protocol):
    """What this module reads of a task's measurement (`stats.TaskSummary` has it; `stats` imports this
    module, so it is named here by shape)."""

    task_id: str
    kind: str
    family: str
    best_strategy: dict[str, str]  # configuration -> fastest correct strategy
    speedups: dict[str, float | None]  # baseline -> the fastest implementation's speedup over it


BASELINE = {"c": "naive", "pytorch": "eager"}
"""The baseline of each task kind: the speedup key of `TaskSummary.speedups` a policy is judged by."""

ROOM = 1.1
"""A task has room when its fastest implementation is at least this much faster than the baseline."""


@dataclass(frozen=True)
class FamilyHeadroom:
    """One family's headroom over its baseline (see the module docstring)."""

    kind: str
    family: str
    split: str  # the family's split (train, val, test; several joined by "/"; "-" unknown)
    tasks: int  # tasks with a measured speedup over the baseline
    median: float
    p90: float
    with_room: float  # share of tasks at ROOM or more
    baseline_fastest: float  # share of tasks whose baseline implementation was fastest everywhere


def family_headroom(summaries: Sequence[TaskSummary],
                    split_of: Mapping[str, str] | None = None) -> list[FamilyHeadroom]:
    """Per (kind, family), sorted, for the tasks with a speedup over their kind's baseline; `split_of`:
    task id -> its split (`datasets.splits.split_tasks`), naming each family's."""
    room = task_headroom(summaries)
    groups: dict[tuple[str, str], list[TaskSummary]] = {}
    for s in summaries:
        if s.task_id in room:
            groups.setdefault((s.kind, s.family), []).append(s)
    out = []
    for (kind, family), tasks in sorted(groups.items()):
        speedups = sorted(room[s.task_id] for s in tasks)
        splits = sorted({(split_of or {}).get(s.task_id, "-") for s in tasks})
        out.append(FamilyHeadroom(
            kind, family, "/".join(splits), len(tasks), statistics.median(speedups), _p90(speedups),
            sum(v >= ROOM for v in speedups) / len(speedups),
            sum(_baseline_fastest(s) for s in tasks) / len(tasks)))
    return out


def task_headroom(summaries: Sequence[TaskSummary]) -> dict[str, float]:
    """task id -> its speedup over its kind's baseline, for the tasks that have one."""
    return {s.task_id: s.speedups[BASELINE[s.kind]] for s in summaries
            if s.speedups.get(BASELINE.get(s.kind, ""))}


def _p90(ordered: list[float]) -> float:
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


def _baseline_fastest(summary: TaskSummary) -> bool:
    """Whether the baseline implementation (C: the `naive` strategy) was fastest on every configuration;
    PyTorch's eager is not among the implementations, so never."""
    strategies = set(summary.best_strategy.values())
    return summary.kind == "c" and strategies == {"naive"}


def headroom_markdown(rows: Sequence[FamilyHeadroom]) -> list[str]:
    """The table as markdown lines ([] without rows)."""
    if not rows:
        return []
    lines = [f"| kind | family | split | tasks | fastest / baseline p50 | p90 | tasks >= {ROOM}x "
             "| baseline fastest |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.kind} | {r.family} | {r.split} | {r.tasks} | {r.median:.2f} | {r.p90:.2f} | "
                     f"{r.with_room:.0%} | {r.baseline_fastest:.0%} |")
    return lines
