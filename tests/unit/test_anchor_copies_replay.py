"""benchmarks/anchor_copies_replay.py on made-up evaluation records of a real dataset task: a repeat is left
to sharing, the first copy of a task is timed, a later one is given the port's timings."""

from __future__ import annotations

import sys
from pathlib import Path

from cudaperf.datasets import registry
from cudaperf.types import TaskKind

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from anchor_copies_replay import replay  # noqa: E402


def _rows() -> list[dict]:
    task = next(g for g in registry.build_index(0, kinds=(TaskKind.C,), families=("map",)))
    naive = next(i.source for i in registry.implementations(task) if i.baseline)
    copy = '"""another docstring."""' + naive.split('"""', 2)[2]
    durations = {"timing_prep": 1.0, "timing": 2.0}
    return [{"task_id": task.task_id, "solution_id": f"s{k}", "outcome": "correct", "at_s": float(k),
             "source": source, "stage_durations_s": durations}
            for k, source in enumerate((naive, copy, copy))]


def test_the_first_copy_is_timed_a_later_one_served_and_a_repeat_shared():
    out = replay(_rows())
    assert (out.correct, out.repeats, out.copies, out.copies_timed, out.copies_served) == (3, 1, 2, 1, 1)
    assert out.seconds["served"] == {"timing_prep": 1.0, "timing": 2.0}
