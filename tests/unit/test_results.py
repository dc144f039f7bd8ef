"""The JSONL result store: append and read back, a torn last line, duplicates, resume."""

from __future__ import annotations

import json
import math

import pytest

from cudaperf.results import ResultStore
from cudaperf.types import ConfigCorrectness, ConfigTiming, EvalResult, Flag, Outcome, Severity, Timing


def _result(task="t", sol="s", outcome=Outcome.CORRECT, message="") -> EvalResult:
    return EvalResult(task_id=task, solution_id=sol, outcome=outcome, message=message,
                      correctness=(ConfigCorrectness("small", True, 3, max_abs_error=1e-6),),
                      flags=(Flag("x", "y", Severity.WARNING),), speedup_vs_eager=1.5)


def test_appended_results_read_back_equal(tmp_path):
    store = ResultStore(tmp_path / "r.jsonl")
    results = [_result("a"), _result("b", outcome=Outcome.COMPILE_ERROR)]
    for r in results:
        store.append(r)
    assert store.load() == results


def test_each_result_is_one_json_line(tmp_path):
    store = ResultStore(tmp_path / "r.jsonl")
    store.append(_result("a"))
    store.append(_result("b"))
    lines = store.path.read_text().splitlines()
    assert [json.loads(line)["task_id"] for line in lines] == ["a", "b"]


def test_missing_file_loads_empty(tmp_path):
    assert ResultStore(tmp_path / "none.jsonl").load() == []


def test_torn_last_line_is_skipped(tmp_path):
    store = ResultStore(tmp_path / "r.jsonl")
    store.append(_result("a"))
    with open(store.path, "a") as f:
        f.write('{"task_id": "b", "solution_id": "s", "outc')  # crash mid-write
    report = store.read()
    assert ([r.task_id for r in report.results], report.torn_tail) == (["a"], True)


def test_append_after_a_torn_line_starts_a_new_line(tmp_path):
    store = ResultStore(tmp_path / "r.jsonl")
    store.append(_result("a"))
    with open(store.path, "a") as f:
        f.write('{"task_id": "b", "sol')
    store.append(_result("c"))
    assert [r.task_id for r in store.load()] == ["a", "c"]


def test_duplicate_pair_last_line_wins(tmp_path):
    store = ResultStore(tmp_path / "r.jsonl")
    store.append(_result("a", message="first"))
    store.append(_result("b"))
    store.append(_result("a", message="second"))
    assert [(r.task_id, r.message) for r in store.load()] == [("b", ""), ("a", "second")]


def test_garbage_lines_in_the_middle_are_reported_not_raised(tmp_path):
    store = ResultStore(tmp_path / "r.jsonl")
    store.append(_result("a"))
    with open(store.path, "a") as f:
        f.write('not json\n{"task_id": "x", "solution_id": "y", "outcome": "no_such_outcome"}\n[1, 2]\n')
    store.append(_result("b"))
    report = store.read()
    assert ([r.task_id for r in report.results], report.bad_lines, report.torn_tail) == (
        ["a", "b"], (2, 3, 4), False)


def test_done_lists_evaluated_pairs(tmp_path):
    store = ResultStore(tmp_path / "r.jsonl")
    store.append(_result("a", "1"))
    store.append(_result("b", "2", outcome=Outcome.INCORRECT))
    assert store.done() == {("a", "1"), ("b", "2")}


def test_done_leaves_out_skipped_and_harness_errors_so_resume_retries_them(tmp_path):
    store = ResultStore(tmp_path / "r.jsonl")
    store.append(_result("a", outcome=Outcome.SKIPPED))
    store.append(_result("b", outcome=Outcome.HARNESS_ERROR))
    store.append(_result("c", outcome=Outcome.CRASH))
    assert store.done() == {("c", "s")}


def test_append_creates_parent_directories(tmp_path):
    store = ResultStore(tmp_path / "deep" / "dir" / "r.jsonl")
    store.append(_result())
    assert len(store.load()) == 1


def _non_finite(value: float) -> EvalResult:
    timing = ConfigTiming("small", Timing(median_ms=value, iqr_ms=value, min_ms=value, mean_ms=value,
                                          n_samples=3, samples_ms=(value, value, value)),
                          eager=Timing(median_ms=1.0, iqr_ms=0.0, min_ms=1.0, mean_ms=1.0, n_samples=3))
    return EvalResult(task_id="t", solution_id=str(value), outcome=Outcome.INCORRECT,
                      correctness=(ConfigCorrectness("small", False, 3, max_abs_error=value,
                                                     max_rel_error=value),),
                      timings=(timing,), speedup_vs_eager=value, stage_durations_s={"timing": value})


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 1e308, 5e-324, -0.0])
def test_results_with_non_finite_huge_and_denormal_numbers_are_stored_and_read_back(tmp_path, value):
    store = ResultStore(tmp_path / "r.jsonl")
    store.append(_non_finite(value))
    (back,) = store.load()
    got = back.correctness[0].max_rel_error
    assert got == value or (math.isnan(got) and math.isnan(value))
    assert back.timings[0].candidate.median_ms == value or math.isnan(value)
    assert back.stage_durations_s["timing"] == value or math.isnan(value)


def test_non_finite_numbers_are_written_as_named_strings(tmp_path):
    store = ResultStore(tmp_path / "r.jsonl")
    store.append(_non_finite(math.inf))
    row = json.loads(store.path.read_text())
    assert row["correctness"][0]["max_rel_error"] == "Infinity"
    assert row["speedup_vs_eager"] == "Infinity"


def test_values_json_cannot_hold_are_stored_as_numbers_or_text(tmp_path):
    import numpy as np

    store = ResultStore(tmp_path / "r.jsonl")
    odd = EvalResult(task_id="t", solution_id="s", outcome=Outcome.CORRECT,
                     environment={"np32": np.float32(2.5), "np_inf": np.float32("inf"), "obj": object()})
    store.append(odd)
    (back,) = store.load()
    assert back.environment["np32"] == 2.5
    assert back.environment["np_inf"] == "Infinity"  # a free-form dict keeps the JSON string
    assert back.environment["obj"].startswith("<object object")
