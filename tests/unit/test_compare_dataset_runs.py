"""scripts/compare_dataset_runs.py: a baseline counts once per task and configuration, keys measured
from different sources are not compared, and --only-keys-in narrows both runs to shared keys."""

from __future__ import annotations

from script_module import load_script


def _script():
    return load_script("compare_dataset_runs")


def _row(impl: str, median_ms: float, eager_ms: float, source: str = "h") -> dict:
    return {"median_ms": median_ms, "eager_ms": eager_ms, "source_hash": source, "impl_id": impl}


def test_a_baseline_counts_once_per_task_and_configuration():
    a = {("T", "small", "T/x"): _row("T/x", 1.0, 2.0), ("T", "small", "T/y"): _row("T/y", 1.0, 2.0)}
    b = {("T", "small", "T/x"): _row("T/x", 1.1, 3.0), ("T", "small", "T/y"): _row("T/y", 1.2, 3.0)}
    script = _script()
    assert script.differences(a, b, "eager_ms") == [0.5]
    assert len(script.differences(a, b, "median_ms")) == 2


def test_keys_of_different_sources_are_skipped():
    a = {("T", "small", "T/x"): _row("T/x", 1.0, 2.0)}
    b = {("T", "small", "T/x"): _row("T/x", 2.0, 2.0, source="new")}
    assert _script().differences(a, b, "median_ms") == []


def test_only_keys_in_drops_keys_another_run_did_not_time():
    rows = {("T", "small", "T/x"): _row("T/x", 1.0, 2.0), ("T", "large", "T/x"): _row("T/x", 1.0, 2.0)}
    other = {("T", "small", "T/x"): _row("T/x", 5.0, 5.0)}
    assert list(_script().only_keys_in(rows, [other])) == [("T", "small", "T/x")]
