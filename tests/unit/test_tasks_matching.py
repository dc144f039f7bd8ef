"""Which task a solution file belongs to, in `cudaperf eval --tasks DIR --solutions DIR`."""

from __future__ import annotations

from pathlib import Path

from cudaperf.commands.eval_cmd import solution_files, solution_id_for, task_for_file

IDS = {"relu", "relu_grad", "matmul"}


def test_file_named_after_the_task_matches():
    assert task_for_file(Path("relu.py"), None, IDS) == ("relu", "")


def test_double_underscore_suffix_matches_the_longest_task_id():
    assert task_for_file(Path("relu_grad__v2.py"), None, IDS)[0] == "relu_grad"


def test_single_underscore_suffix_does_not_match():
    assert task_for_file(Path("relu_v2.py"), None, IDS)[0] is None


def test_subfolder_named_after_the_task_matches_any_file():
    assert task_for_file(Path("matmul/attempt3.py"), None, IDS)[0] == "matmul"


def test_first_line_comment_wins_over_the_name():
    assert task_for_file(Path("relu.py"), "matmul", IDS)[0] == "matmul"


def test_comment_naming_an_unknown_task_is_unmatched_with_reason():
    task, why = task_for_file(Path("x.py"), "conv", IDS)
    assert task is None and "conv" in why


def test_solution_files_skip_private_files_and_folders(tmp_path):
    for rel in ("relu.py", "_helpers.py", "_old/relu.py", "matmul/a.py", "notes.txt"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    found = [p.relative_to(tmp_path).as_posix() for p in solution_files(tmp_path)]
    assert found == ["matmul/a.py", "relu.py"]


def test_solution_id_is_dir_name_and_relative_path(tmp_path):
    d = tmp_path / "fast"
    assert solution_id_for(d, d / "matmul" / "a.py") == "fast/matmul/a"
