"""Each family's headroom over its baseline (`datasets.measure.headroom`) and the RL / comparison tasks
chosen by it (`RlConfig.min_headroom`, `CompareConfig.min_headroom`), on the committed measurements."""

from __future__ import annotations

import pytest

from cudaperf.datasets.measure.headroom import family_headroom, headroom_markdown, task_headroom
from cudaperf.datasets.measure.stats import TaskSummary
from cudaperf.train.compare import CompareConfig
from cudaperf.train.config import ConfigError, RlConfig

MEASUREMENTS = "benchmarks/dataset_measure"


def _summary(task_id: str, kind: str, speedup: float, fastest: str = "vectorized") -> TaskSummary:
    baseline = "naive" if kind == "c" else "eager"
    return TaskSummary(task_id, kind, "fam", 2, 3, 3, 2.0, best_strategy={"small": fastest, "large": fastest},
                       speedups={baseline: speedup})


def test_a_family_reports_its_median_and_the_share_of_tasks_with_room():
    rows = family_headroom([_summary("a", "c", 1.0, fastest="naive"), _summary("b", "c", 1.05),
                            _summary("c", "c", 3.0)])
    (row,) = rows
    assert (row.tasks, row.median, row.with_room) == (3, 1.05, pytest.approx(1 / 3))
    assert row.baseline_fastest == pytest.approx(1 / 3)


def test_pytorch_tasks_are_measured_against_eager_and_never_count_the_baseline_as_fastest():
    (row,) = family_headroom([_summary("p", "pytorch", 0.8, fastest="naive")])
    assert (row.kind, row.median, row.baseline_fastest) == ("pytorch", 0.8, 0.0)


def test_a_task_without_its_baselines_speedup_is_left_out():
    no_baseline = TaskSummary("x", "c", "fam", 1, 1, 1, None, speedups={"eager": 2.0})
    assert family_headroom([no_baseline]) == [] and task_headroom([no_baseline]) == {}
    assert headroom_markdown([]) == []


def test_the_table_has_a_row_a_family():
    lines = headroom_markdown(family_headroom([_summary("a", "c", 2.0)]))
    assert len(lines) == 3 and lines[2].startswith("| c | fam | - | 1 | 2.00 |")


def test_a_family_is_named_with_its_split():
    (row,) = family_headroom([_summary("a", "c", 2.0), _summary("b", "c", 1.0)], {"a": "train", "b": "train"})
    assert row.split == "train"


def test_rl_draws_only_tasks_with_the_headroom_asked_for():
    from cudaperf.train.heldout import headroom_ids
    from cudaperf.train.rl import load_tasks

    config = RlConfig(kinds=("c",), families=("conv2d", "map"), min_headroom=1.1, measurements=MEASUREMENTS,
                      limit_tasks=8, eval_device="cuda")
    tasks = load_tasks(config)
    room = headroom_ids(1.1, MEASUREMENTS)
    assert len(tasks) == 8 and all(t.task_id in room for t in tasks)
    assert {t.family for t in tasks} == {"map"}  # no conv2d task has 1.1x of room in these measurements


def test_headroom_without_measurements_is_refused_with_the_fix():
    with pytest.raises(ConfigError, match="measurements=DIR"):
        RlConfig(min_headroom=1.1, eval_device="cuda")
    with pytest.raises(ConfigError, match="measurements=DIR"):
        CompareConfig(models=("sft=x",), min_headroom=1.1)


def test_a_directory_without_measurements_is_refused_when_tasks_are_chosen(tmp_path):
    from cudaperf.train.rl import load_tasks

    with pytest.raises(ConfigError, match="no measurements"):
        load_tasks(RlConfig(min_headroom=1.1, measurements=str(tmp_path), eval_device="cuda"))
