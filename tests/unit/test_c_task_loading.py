"""C→CUDA tasks as shared `Task` records: `ctask.to_task` / `from_task`, `load_task` on `.ctask.json`
files, and where the naive CUDA port (the GPU baseline) is found."""

from __future__ import annotations

import json

import pytest

from cudaperf.datasets import export, registry
from cudaperf.tasks import TaskError, load_task, load_tasks
from cudaperf.tasks.ctask import (
    NAIVE_CUDA,
    ArrayGen,
    CConfig,
    CParam,
    CTask,
    CTaskError,
    ParamKind,
    baseline_source,
    from_task,
    naive_port_path,
    to_json,
    to_task,
)
from cudaperf.types import Task, TaskKind, Tolerance, from_dict, to_dict

SQUARE = CTask(
    task_id="c_square_test", family="test", entry="square",
    source="void square(const float* x, float* out, int n) {\n"
           "    for (int i = 0; i < n; ++i) out[i] = x[i] * x[i];\n}\n",
    params=(CParam("x", "float", ParamKind.IN, "n"), CParam("out", "float", ParamKind.OUT, "n"),
            CParam("n", "int", ParamKind.SCALAR)),
    inputs={"x": ArrayGen("normal", 0, 1)},
    configs=(CConfig("small", {"n": 16}), CConfig("mid", {"n": 100}), CConfig("odd", {"n": 33})),
    tolerance=Tolerance(1e-5, 1e-5))


def _generated(family: str = "reduce_all"):
    """The first task of a (small) generated family at seed 0, and its baseline implementation."""
    task = registry.build_index(0, kinds=(TaskKind.C,), families=(family,))[0]
    naive = next(i for i in registry.implementations(task) if i.baseline)
    return task, naive


def test_to_task_puts_the_declaration_in_spec():
    task = to_task(SQUARE)
    assert task.kind is TaskKind.C and from_task(task) == SQUARE


def test_to_task_keeps_the_naive_port_beside_the_declaration():
    task = to_task(SQUARE, naive_cuda="def square(x, out, n): ...")
    assert baseline_source(task, NAIVE_CUDA) == "def square(x, out, n): ..." and from_task(task) == SQUARE


def test_spec_survives_the_task_record_round_trip():
    task = to_task(SQUARE, naive_cuda="text")
    again = from_dict(Task, json.loads(json.dumps(to_dict(task))))
    assert from_task(again) == SQUARE and baseline_source(again) == "text"


def test_from_task_rejects_a_record_without_a_declaration():
    with pytest.raises(CTaskError):
        from_task(Task("t", TaskKind.C, "void f() {}", ()))


def test_load_task_reads_a_ctask_json_file(tmp_path):
    path = tmp_path / f"{SQUARE.task_id}.ctask.json"
    path.write_text(to_json(SQUARE))
    task = load_task(path)
    assert task.task_id == SQUARE.task_id and task.path == str(path) and from_task(task) == SQUARE


def test_load_task_takes_the_naive_port_shipped_with_the_task(tmp_path):
    (tmp_path / f"{SQUARE.task_id}.ctask.json").write_text(to_json(SQUARE))
    (tmp_path / "naive").mkdir()
    (tmp_path / "naive" / f"{SQUARE.task_id}.py").write_text("# the port\n")
    assert baseline_source(load_task(tmp_path / f"{SQUARE.task_id}.ctask.json")) == "# the port\n"


def test_load_task_without_a_known_port_has_none(tmp_path):
    path = tmp_path / f"{SQUARE.task_id}.ctask.json"
    path.write_text(to_json(SQUARE))
    assert baseline_source(load_task(path)) is None


def test_a_malformed_ctask_file_is_a_task_error(tmp_path):
    path = tmp_path / "bad.ctask.json"
    path.write_text(json.dumps({"task_id": "bad", "entry": "f"}))
    with pytest.raises(TaskError):
        load_task(path)


def test_a_ctask_failing_validation_is_a_task_error_naming_the_problem(tmp_path):
    path = tmp_path / "x.ctask.json"
    path.write_text(to_json(SQUARE).replace('"n": 100', '"m": 100'))
    with pytest.raises(TaskError, match="scalars"):
        load_task(path)


def test_a_task_written_by_the_dataset_export_loads_with_its_naive_port(tmp_path):
    generated, naive = _generated()
    export.write_task(tmp_path, generated, registry.implementations(generated))
    assert baseline_source(load_task(export.task_path(tmp_path, generated))) == naive.source


def test_the_naive_port_lives_in_a_subdirectory_of_the_task_file(tmp_path):
    assert naive_port_path(tmp_path / "c_x_1.ctask.json") == tmp_path / "naive" / "c_x_1.py"


def test_a_directory_of_built_c_tasks_loads_without_taking_the_ports_for_tasks(tmp_path):
    generated, _ = _generated()
    export.write_task(tmp_path, generated, registry.implementations(generated))
    errors: list = []
    tasks = load_tasks(export.task_path(tmp_path, generated).parent, errors)
    assert [t.task_id for t in tasks] == [generated.task_id] and errors == []
