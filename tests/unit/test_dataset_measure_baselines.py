"""The baseline diagnostics of the dataset measurement's rows, on the CPU: each timed function's host path
(`task_measurement._host_fields`), the serial-C baseline in rounds with a calibration beside each
(`serial.py`), and the implementations a run measures per task (`options.measured_implementations`).
The recipe runs as in test_dataset_measure_task.py (implementations computing on the CPU)."""

from __future__ import annotations

import statistics

import pytest
from test_dataset_measure_task import c_impl, run_recipe, torch_impl

from cudaperf.datasets import registry
from cudaperf.datasets.measure import serial
from cudaperf.datasets.measure.options import measured_implementations
from cudaperf.datasets.measure.serial import SERIAL_ROUNDS, SerialBaseline, SerialRound
from cudaperf.datasets.measure.task_measurement import CTaskMeasure, TorchTaskMeasure
from cudaperf.host_timing import LEGACY, PROTOCOL_ENV


@pytest.fixture(autouse=True)
def _stable(monkeypatch):
    monkeypatch.delenv(PROTOCOL_ENV, raising=False)


@pytest.fixture(scope="module")
def c_task():
    return registry.build_index(0, families=["map"])[0]


@pytest.fixture(scope="module")
def c_row(c_task):
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(PROTOCOL_ENV, raising=False)
        # the recipe's 1 ms serial budget: a preempted call on this shared machine must not end the
        # rounds early (the limit has tests of its own below)
        patch.setattr(serial, "SPREAD_LIMIT", 1e6)
        _, rows, _ = run_recipe(CTaskMeasure, c_task, [c_impl(c_task, "naive", baseline=True)])
    return rows[("small", "naive")]


def _round(*samples_ms: float, calibration_ms: float = 1.0) -> SerialRound:
    return SerialRound(calibration_ms, 5.0, samples_ms, (), 0, 10)


# -- serial C in rounds ----------------------------------------------------------------------------


def test_serial_c_is_timed_in_rounds_spread_over_the_configuration(c_row):
    assert c_row["serial_c_rounds"] == SERIAL_ROUNDS == len(c_row["serial_c_round_ms"])


def test_the_serial_baseline_is_the_median_round(c_row):
    assert c_row["serial_c_ms"] == statistics.median(c_row["serial_c_round_ms"])


def test_every_row_carries_the_calibration_beside_the_serial_baseline(c_row):
    assert c_row["serial_c_calibration_ms"] > 0 and c_row["serial_c_calibration_mem_ms"] > 0
    assert c_row["serial_c_calibration_free_ms"] > 0  # the compute part off the reserved CPU
    assert c_row["serial_c_steal_share"] is None or 0 <= c_row["serial_c_steal_share"] <= 1


def test_the_legacy_protocol_times_serial_c_in_one_round(c_task, monkeypatch):
    monkeypatch.setenv(PROTOCOL_ENV, LEGACY)
    _, rows, _ = run_recipe(CTaskMeasure, c_task, [c_impl(c_task, "naive", baseline=True)])
    assert rows[("small", "naive")]["serial_c_rounds"] == 1


def test_a_call_longer_than_twice_the_budget_is_not_timed_again():
    baseline = SerialBaseline(budget_ms=300.0, rounds=[_round(700.0)])
    assert not baseline.wants_round()


def test_short_calls_get_every_round_each_with_its_share_of_the_budget():
    baseline = SerialBaseline(budget_ms=300.0, rounds=[_round(50.0, 50.0)])
    assert baseline.wants_round() and baseline.round_budget_ms == 100.0


def test_the_calibration_is_the_median_of_the_rounds():
    baseline = SerialBaseline(300.0, [_round(1.0, calibration_ms=c) for c in (1.0, 3.0, 2.0)])
    assert baseline.fields()["serial_c_calibration_ms"] == 2.0


def test_a_calibration_that_did_not_build_leaves_its_fields_empty(monkeypatch):
    monkeypatch.setattr(serial, "calibration", lambda: None)
    timed = serial.timed_round(lambda values: None, {}, 1.0, ())
    assert timed.calibration_ms is None
    assert SerialBaseline(1.0, [timed]).fields()["serial_c_calibration_ms"] is None


# -- host paths ------------------------------------------------------------------------------------


def test_c_rows_carry_the_host_path_of_the_implementation_and_the_naive_port(c_row):
    assert c_row["host_path_ms"] > 0 and c_row["naive_host_path_ms"] > 0
    assert c_row["host_path_p90_ms"] >= c_row["host_path_ms"]


def test_cpu_rows_have_no_lead_and_no_host_bound_samples(c_row):
    assert c_row["lead_launches"] == 0 and c_row["host_bound_samples"] == 0


def test_pytorch_rows_carry_eagers_host_path():
    task = registry.build_index(0, families=["elementwise"])[0]
    _, rows, _ = run_recipe(TorchTaskMeasure, task, [torch_impl(task, "naive", "ModelNew = Model\n")])
    row = rows[("small", "naive")]
    assert row["eager_host_path_ms"] > 0 and row["compile_host_path_ms"] is None  # compile: off here
    assert row["serial_c_calibration_ms"] is None


# -- implementations per task ----------------------------------------------------------------------


def _impls():
    task = registry.build_index(0, families=["map"])[0]
    return registry.implementations(task)


def test_all_implementations_by_default():
    assert measured_implementations(_impls(), 0) == _impls()


def test_a_limit_keeps_the_baseline_implementation_first():
    impls = _impls()
    kept = measured_implementations(impls, 2)
    assert len(kept) == 2 and kept[0].baseline and kept[1] in impls
