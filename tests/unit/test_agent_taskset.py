"""Task sets from specs: files, directories, the bundled examples, dataset splits, KernelBench checkouts."""

from __future__ import annotations

import json
import shutil

import pytest

from cudaperf.agent.taskset import TaskSpecError, resolve, select
from cudaperf.datasets import registry, splits
from cudaperf.tasks.examples import EXAMPLE_TASK_IDS, example_tasks_dir
from cudaperf.types import InputConfig, Task, TaskKind


def _task(task_id: str, family: str, kind: TaskKind = TaskKind.PYTORCH) -> Task:
    return Task(task_id, kind, "", (InputConfig("default"),), family=family)


def test_examples_spec_gives_the_bundled_tasks():
    assert sorted(t.task_id for t in resolve(["examples"]).tasks) == sorted(EXAMPLE_TASK_IDS)


def test_a_task_file_and_a_directory_are_read():
    one = resolve([str(example_tasks_dir() / "relu.py")])
    both = resolve([str(example_tasks_dir() / "relu.py"), str(example_tasks_dir())])
    assert [t.task_id for t in one.tasks] == ["relu"] and len(both.tasks) == len(EXAMPLE_TASK_IDS)


def test_limit_takes_tasks_round_robin_across_families():
    tasks = [_task(f"a{i}", "a") for i in range(5)] + [_task("b0", "b"), _task("c0", "c"), _task("c1", "c")]
    assert [t.task_id for t in select(tasks, limit=5)] == ["a0", "b0", "c0", "a1", "c1"]


def test_kind_and_family_filters_apply():
    tasks = [_task("p", "x"), _task("c", "x", TaskKind.C), _task("q", "y")]
    assert [t.task_id for t in select(tasks, kinds=["pytorch"], families=["x"])] == ["p"]


def test_test_split_from_the_index_holds_only_test_tasks():
    chosen = resolve(["split:test"], limit=6)
    index = {g.task_id: g for g in registry.build_index(0)}
    assigned = splits.split_tasks(index.values(), 0)
    assert len(chosen.tasks) == 6 and chosen.errors == ()
    assert {assigned[t.task_id] for t in chosen.tasks} == {"test"}
    assert len({t.family for t in chosen.tasks}) == 6  # one per family before any family repeats
    c_task = next(t for t in chosen.tasks if t.kind is TaskKind.C)
    assert c_task.spec["entry"] and c_task.spec.get("baseline_sources", {}).get("naive_cuda")


def test_built_dataset_split_reads_its_manifest(tmp_path):
    for task_id, split in (("relu", "test"), ("softmax", "train")):
        target = tmp_path / "tasks" / "pytorch" / "fam" / f"{task_id}.py"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(example_tasks_dir() / f"{task_id}.py", target)
    entries = [{"task_id": "relu", "kind": "pytorch", "family": "fam", "split": "test"},
               {"task_id": "softmax", "kind": "pytorch", "family": "fam", "split": "train"}]
    (tmp_path / "manifest.json").write_text(json.dumps({"tasks": entries}))
    assert [t.task_id for t in resolve([f"split:test:{tmp_path}"]).tasks] == ["relu"]
    assert sorted(t.task_id for t in resolve([str(tmp_path)]).tasks) == ["relu", "softmax"]


def test_kernelbench_checkout_levels(tmp_path):
    for level in (1, 2):
        folder = tmp_path / "KernelBench" / f"level{level}"
        folder.mkdir(parents=True)
        shutil.copy(example_tasks_dir() / "relu.py", folder / f"{level}_ReLU.py")
    only_two = resolve([f"kernelbench:{tmp_path}:2"])
    assert [t.task_id for t in only_two.tasks] == ["level2_2_ReLU"]
    assert len(resolve([f"kernelbench:{tmp_path}:1,2"]).tasks) == 2


def test_missing_kernelbench_level_is_a_spec_error(tmp_path):
    with pytest.raises(TaskSpecError, match="level3"):
        resolve([f"kernelbench:{tmp_path}:3"])


def test_unknown_spec_is_a_spec_error():
    with pytest.raises(TaskSpecError):
        resolve(["no/such/place.py"])
    with pytest.raises(TaskSpecError, match="split"):
        resolve(["split:holdout"])


def test_broken_task_file_is_listed_not_raised(tmp_path):
    shutil.copy(example_tasks_dir() / "relu.py", tmp_path / "relu.py")
    (tmp_path / "broken.py").write_text("raise RuntimeError('no')\n")
    found = resolve([str(tmp_path)])
    assert [t.task_id for t in found.tasks] == ["relu"] and "broken.py" in found.errors[0]
