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


def _diag(median_ms: float, compile_ms: float, bound: int, serial_ms: float | None = None,
          calibration_ms: float | None = None) -> dict:
    return {"median_ms": median_ms, "compile_ms": compile_ms, "compile_host_bound_samples": bound,
            "host_bound_samples": 0, "rounds": 100, "source_hash": "h", "serial_c_ms": serial_ms,
            "serial_c_calibration_ms": calibration_ms, "serial_c_calibration_mem_ms": calibration_ms}


def test_a_host_bound_share_is_host_bound_samples_over_the_rounds():
    assert _script().host_bound_share(_diag(1.0, 1.0, 25), "compile_") == 0.25


def test_keys_host_bound_in_either_run_are_left_out_of_the_calm_figure():
    a = {("T", "small", "T/x"): _diag(1.0, 1.0, 60), ("T", "large", "T/x"): _diag(1.0, 2.0, 0)}
    b = {("T", "small", "T/x"): _diag(1.0, 3.0, 0), ("T", "large", "T/x"): _diag(1.0, 2.2, 0)}
    line = next(x for x in _script().host_bound_lines(a, b) if x.startswith("| compile_ms"))
    # both keys: 200% and 10% apart (median: the higher, 200%); the calm key alone: 10%
    assert line == "| compile_ms | 2 | 200.0% | 30.0% | 0.0% | - | - | 1 | 10.0% |"


def test_serial_c_normalised_by_the_calibration_removes_a_shift_of_the_whole_cpu():
    a = {("C", "small", "C/x"): _diag(1.0, 1.0, 0, serial_ms=10.0, calibration_ms=1.0)}
    b = {("C", "small", "C/x"): _diag(1.0, 1.0, 0, serial_ms=13.0, calibration_ms=1.3)}
    row = _script().serial_lines(a, b)[-1].split(" | ")
    assert row[2:7] == ["30.0%", "1.300 (1.300-1.300)", "1.300 (1.300-1.300)", "0.0%", "0.0%"]
    assert row[7] == "1/1"


def test_rows_without_the_diagnostics_say_so():
    a = {("T", "small", "T/x"): _row("T/x", 1.0, 2.0)}
    assert _script().diagnostics(a, a)[0].startswith("no host-path diagnostics")


def test_each_run_says_whether_its_reserved_cpu_was_slower_than_an_unpinned_one():
    row = {**_diag(1.0, 1.0, 0, serial_ms=10.0, calibration_ms=1.5), "serial_c_calibration_free_ms": 1.0,
           "serial_c_cpus": [15]}
    line = _script().serial_run_lines({("C", "small", "C/x"): row}, {})[-1]
    assert line == "| A | 1 | 1.500 | 1.500 | 1.500 (1.500-1.500) | 15 |"
