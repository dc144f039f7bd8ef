"""A missing entry point is found from the text, before anything is built or run."""

from __future__ import annotations

from cudaperf.anticheat.entry_point import entry_point_problem
from cudaperf.tasks import load_task
from cudaperf.tasks.examples import example_solutions_dir, example_tasks_dir
from cudaperf.types import InputConfig, Task, TaskKind

RELU = load_task(example_tasks_dir() / "relu.py")
C_TASK = Task(task_id="saxpy", kind=TaskKind.C, source="void saxpy(...) {}", configs=(InputConfig("small"),),
              spec={"entry": "saxpy"})


def test_the_shipped_solutions_define_their_entry_point():
    for fmt in ("fast", "inline"):
        assert entry_point_problem((example_solutions_dir(fmt) / "relu.py").read_text(), RELU) == ""


def test_an_empty_file_has_no_entry_point():
    assert "empty" in entry_point_problem("", RELU)


def test_a_file_of_comments_and_a_docstring_has_no_entry_point():
    assert "empty" in entry_point_problem('"""A docstring."""\n# a comment\n', RELU)


def test_a_module_without_modelnew_is_named():
    assert "class ModelNew" in entry_point_problem("import torch\nclass Model(torch.nn.Module):\n    pass\n",
                                                   RELU)


def test_modelnew_bound_by_assignment_counts():
    assert entry_point_problem("import torch\nclass Impl(torch.nn.Module):\n    pass\nModelNew = Impl\n",
                               RELU) == ""


def test_a_c_task_solution_needs_the_c_entry_point():
    assert "`saxpy`" in entry_point_problem("def other(x):\n    pass\n", C_TASK)
    assert entry_point_problem("def saxpy(x, y, n, a):\n    pass\n", C_TASK) == ""


def test_a_syntax_error_is_left_to_the_static_checker():
    assert entry_point_problem("def (:\n", RELU) == ""
