"""GPU end-to-end test of `cudaperf dataset measure` (issue 4): three small tasks (a PyTorch elementwise
chain, a C map, a C sort with an in/out array) measured through the real spawned children: every
implementation verified on every configuration and timed with its baselines, a second run resumes with
nothing to do, and a kernel writing to NULL (a sticky CUDA error) costs only its own rows.

Run: `python3 -m pytest -q -s -m gpu tests/gpu/test_dataset_measure_gpu.py -rA`. With `-s` it prints the
statistics and, per task, the seconds spent per stage (reference, build, check, compile_baseline,
timing) and tasks/minute: the numbers that size the full measurement's GPU sessions.
"""

from __future__ import annotations

import json

import pytest

from cudaperf.datasets import registry
from cudaperf.datasets.measure import stats as measure_stats
from cudaperf.datasets.measure.options import MeasureOptions
from cudaperf.datasets.measure.results import RESULTS_FILE
from cudaperf.datasets.measure.runner import measure, select_tasks

FAMILIES = ("elementwise", "map", "sort")


def _options(out, **kw) -> MeasureOptions:
    base = {"out_dir": out, "families": FAMILIES, "limit": 1, "workers": 1, "progress": False,
            "features": False,
            "time_budget_s": 480.0}
    return MeasureOptions(**{**base, **kw})


def _records(out, kind: str) -> list[dict]:
    lines = (out / RESULTS_FILE).read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("record") == kind]


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    out = tmp_path_factory.mktemp("measure")
    summary = measure(_options(out))
    for t in _records(out, "task"):
        print(f"{t['task_id']}: {t['status']} in {t['elapsed_s']:.1f} s, stages {t.get('durations_s')}")
    print(f"{summary.finished} tasks in {summary.elapsed_s:.1f} s = "
          f"{summary.finished / max(summary.elapsed_s, 1e-9) * 60:.1f} tasks/min (includes one child start)")
    return out, summary


@pytest.mark.gpu
def test_every_key_has_a_row_and_every_generated_implementation_is_correct(measured):
    out, summary = measured
    tasks = select_tasks(_options(out))
    planned = {(t.task_id, c, i.impl_id) for t in tasks for c in ("small", "large", "odd")
               for i in registry.implementations(t)}
    rows = _records(out, "row")
    assert {(r["task_id"], r["config"], r["impl_id"]) for r in rows} == planned
    bad = [(r["impl_id"], r["config"], r["status"], r["message"][:200]) for r in rows if r["status"] != "ok"]
    assert not bad, bad
    assert summary.exit_code == 0


@pytest.mark.gpu
def test_rows_carry_timings_and_the_baselines_of_their_kind(measured):
    out, _ = measured
    for r in _records(out, "row"):
        assert r["median_ms"] > 0 and r["n_samples"] >= 5 and r["l2_flush_bytes"] > 0, r["impl_id"]
        wanted = ("eager_ms", "compile_ms") if r["kind"] == "pytorch" else ("naive_ms", "serial_c_ms")
        assert all(r[b] and r[b] > 0 for b in wanted), (r["impl_id"], r["config"], r.get("baseline_notes"))


@pytest.mark.gpu
def test_timing_rechecks_outputs_except_for_inout_tasks(measured):
    out, _ = measured
    checked = {r["family"]: r["timing_checked"] for r in _records(out, "row")}
    assert checked == {"elementwise": True, "map": True, "sort": False}


@pytest.mark.gpu
def test_a_second_run_measures_nothing(measured):
    out, _ = measured
    again = measure(_options(out))
    assert again.finished == 0 and again.already_done == 3


@pytest.mark.gpu
def test_stats_report_ratios_and_throughput(measured):
    out, _ = measured
    m = measure_stats.load(out)
    print(measure_stats.stats_markdown(m))
    summaries = measure_stats.task_summaries(m)
    assert all(s.ratio is not None and s.ratio >= 1.0 for s in summaries)
    assert measure_stats.throughput(m).tasks_per_minute > 0


@pytest.mark.gpu
def test_an_illegal_address_fails_only_its_implementation(tmp_path):
    task = registry.build_index(0, families=["map"])[0]
    culprit = registry.implementations(task)[1].impl_id  # not the naive baseline
    summary = measure(_options(tmp_path, families=("map",), test_hooks=(("illegal_address_on", culprit),)))
    rows = _records(tmp_path, "row")
    failed = {(r["impl_id"], r["status"]) for r in rows if r["status"] != "ok"}
    assert failed == {(culprit, "worker_died")}, [r["message"][:300] for r in rows if r["status"] != "ok"]
    assert len(rows) == 3 * len(registry.implementations(task)) and summary.finished == 1


@pytest.mark.gpu
def test_two_children_can_share_the_gpu(tmp_path):
    summary = measure(_options(tmp_path, families=("map", "stencil1d"), per_gpu=2))
    rows = _records(tmp_path, "row")
    assert summary.finished == 2 and rows and all(r["status"] == "ok" for r in rows)
    assert len({r["worker"] for r in rows}) == 2
