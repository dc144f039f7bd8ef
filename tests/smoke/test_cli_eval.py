"""`cudaperf eval` end to end with `--device none` (build and static checks run, execution is SKIPPED),
so it runs on the CPU machine: one pair, a batch, and resume."""

from __future__ import annotations

import json

import pytest

from cudaperf.cli import main
from cudaperf.results import ResultStore
from cudaperf.tasks.examples import example_solutions_dir, example_tasks_dir
from cudaperf.types import EvalResult, Outcome


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDAPERF_CACHE_DIR", str(tmp_path / "cache"))


def test_eval_one_pair_prints_json_and_appends_the_result(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    rc = main(["eval", str(example_tasks_dir() / "relu.py"), str(example_solutions_dir("fast") / "relu.py"),
               "--device", "none", "--json", "--out", str(out)])
    printed = json.loads(capsys.readouterr().out)
    assert (rc, printed["outcome"], printed["build"]["ok"]) == (0, "skipped", True)
    assert [(r.task_id, r.solution_id) for r in ResultStore(out).load()] == [("relu", "fast/relu")]


def test_eval_one_pair_readable_summary_names_the_outcome(capsys):
    rc = main(["eval", str(example_tasks_dir() / "relu.py"), str(example_solutions_dir("fast") / "relu.py"),
               "--device", "none"])
    assert rc == 0 and "SKIPPED" in capsys.readouterr().out


def test_eval_batch_evaluates_every_matched_pair_and_resumes(tmp_path, capsys):
    out = tmp_path / "batch.jsonl"
    store = ResultStore(out)
    # a pair already recorded as evaluated: resume must not touch it
    store.append(EvalResult("matmul", "fast/matmul", Outcome.CORRECT, message="from an earlier run"))
    args = ["eval", "--tasks", str(example_tasks_dir()), "--solutions", str(example_solutions_dir("fast")),
            "--out", str(out), "--device", "none", "--json"]
    assert main(args) == 2  # the file holds results: --resume is required
    assert main([*args, "--resume"]) == 0
    results = {r.task_id: r for r in store.load()}
    assert len(results) == 6 and results["matmul"].message == "from an earlier run"
    assert {r.outcome for t, r in results.items() if t != "matmul"} == {Outcome.SKIPPED}


def test_eval_without_files_is_a_usage_error():
    assert main(["eval"]) == 2


def test_eval_batch_needs_out(tmp_path):
    assert main(["eval", "--tasks", str(example_tasks_dir()), "--solutions", str(tmp_path)]) == 2


def test_eval_broken_task_is_a_usage_error(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("raise RuntimeError('no')\n")
    assert main(["eval", str(bad), str(example_solutions_dir("fast") / "relu.py"), "--device", "none"]) == 2
