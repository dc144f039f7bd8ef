"""`cudaperf dataset measure` without a GPU: the results file (resume, torn lines), task selection and
shards, the time budget, child deaths and timeouts (through the fake runner's test hooks, in real spawned
children), the blame rule, and the statistics and export on a hand-made measurements.jsonl."""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import math
from pathlib import Path

import numpy as np
import pytest
from dataset_fake_runner import RUNNER as FAKE_RUNNER

from cudaperf.commands import dataset_cmd as cli
from cudaperf.datasets import registry
from cudaperf.datasets.jsonl import ResultsWriter
from cudaperf.datasets.measure import features as measure_features
from cudaperf.datasets.measure import stats as measure_stats
from cudaperf.datasets.measure.options import MeasureOptions
from cudaperf.datasets.measure.pool import EXIT_BUDGET, EXIT_DONE, Job, Phase, RunSummary, after_death
from cudaperf.datasets.measure.results import RESULTS_FILE, flagged_tasks, impl_hash, read_progress
from cudaperf.datasets.measure.runner import measure, round_robin, select_tasks

FAMILIES = ("map", "elementwise")


def options(tmp_path: Path, **kw) -> MeasureOptions:
    base = {"out_dir": tmp_path, "families": FAMILIES, "limit": 1, "runner": FAKE_RUNNER, "progress": False,
            "features": False}
    return MeasureOptions(**{**base, **kw})


def measure_fake(opts: MeasureOptions) -> RunSummary:
    """`measure` with the fake runner in as many GPU-less children as the options ask for."""
    return measure(opts, gpus=[None] * max(opts.workers, 1))


def lines(tmp_path: Path) -> list[dict]:
    return [json.loads(x) for x in (tmp_path / RESULTS_FILE).read_text().splitlines() if x.strip()]


def row_keys(tmp_path: Path) -> list[tuple]:
    return [(r["task_id"], r["config"], r["impl_id"]) for r in lines(tmp_path) if r["record"] == "row"]


def planned_keys(tasks) -> set[tuple]:
    return {(t.task_id, c, i.impl_id) for t in tasks for c in ("small", "large", "odd")
            for i in registry.implementations(t)}


# --------------------------------------------------------------------------------------------------
# The results file


def _row(task: str, config: str, impl: str, status: str = "ok") -> dict:
    return {"record": "row", "task_id": task, "config": config, "impl_id": impl, "status": status}


def test_a_torn_last_line_is_skipped_and_its_key_measured_again(tmp_path):
    whole = json.dumps(_row("t", "small", "t/naive"))
    torn = json.dumps(_row("t", "large", "t/naive"))[:25]
    (tmp_path / RESULTS_FILE).write_text(whole + "\n" + torn)
    progress = read_progress(tmp_path)
    assert set(progress.done_keys) == {("t", "small", "t/naive")} and progress.torn_lines == 1


def test_the_writer_fences_off_a_torn_tail_before_appending(tmp_path):
    path = tmp_path / RESULTS_FILE
    path.write_text(json.dumps(_row("t", "small", "t/naive")) + "\n" + '{"record": "ro')
    writer = ResultsWriter(path)
    writer.append(_row("t", "odd", "t/naive"))
    writer.close()
    assert set(read_progress(tmp_path).done_keys) == {("t", "small", "t/naive"), ("t", "odd", "t/naive")}


def test_retry_failed_reopens_keys_whose_child_died_and_their_task(tmp_path):
    path = tmp_path / RESULTS_FILE
    path.write_text("\n".join(json.dumps(r) for r in (
        _row("t", "small", "t/a"), _row("t", "small", "t/b", "worker_died"),
        {"record": "task", "task_id": "t", "status": "partial"})) + "\n")
    assert set(read_progress(tmp_path).finished_tasks) == {"t"}
    again = read_progress(tmp_path, retry_failed=True)
    assert set(again.done_keys) == {("t", "small", "t/a")} and not again.finished_tasks


def test_retry_incorrect_reopens_keys_found_wrong_and_their_task(tmp_path):
    path = tmp_path / RESULTS_FILE
    path.write_text("\n".join(json.dumps(r) for r in (
        _row("t", "small", "t/a"), _row("t", "small", "t/b", "incorrect"),
        {"record": "task", "task_id": "t", "status": "ok"})) + "\n")
    again = read_progress(tmp_path, retry_incorrect=True)
    assert set(again.done_keys) == {("t", "small", "t/a")} and not again.finished_tasks


def test_incorrect_keys_stay_done_without_retry_incorrect(tmp_path):
    (tmp_path / RESULTS_FILE).write_text(json.dumps(_row("t", "small", "t/b", "incorrect")) + "\n")
    assert ("t", "small", "t/b") in read_progress(tmp_path, retry_failed=True).done_keys


def _validate_file(path: Path, task_id: str, ok: bool = False, check: str | None = None) -> None:
    row = {"task_id": task_id, "ok": ok, "flags": [] if ok else ["constant_output"]}
    if check:
        row["check"] = check
    path.write_bytes(gzip.compress((json.dumps(row) + "\n").encode()))


def test_tasks_the_cpu_filter_flagged_are_not_measured(tmp_path):
    flagged = select_tasks(options(tmp_path))[0]
    shards = tmp_path / "committed"
    shards.mkdir()
    _validate_file(shards / "validate-seed0.jsonl.gz", flagged.task_id)
    run = measure_fake(options(tmp_path / "run", resume_from=(shards,)))
    assert run.filtered == 1 and flagged.task_id not in {k[0] for k in row_keys(tmp_path / "run")}


def test_a_later_passing_verdict_lifts_the_filter(tmp_path):
    _validate_file(tmp_path / "validate-a.jsonl.gz", "t")
    _validate_file(tmp_path / "validate-b.jsonl.gz", "t", ok=True)
    assert flagged_tasks([tmp_path]) == {}


def test_a_passing_verdict_of_another_check_keeps_the_flag(tmp_path):
    _validate_file(tmp_path / "validate-a.jsonl.gz", "t")
    _validate_file(tmp_path / "validate-b.jsonl.gz", "t", ok=True, check="rounding")
    assert flagged_tasks([tmp_path]) == {"t": ("constant_output",)}


def test_stats_leave_flagged_tasks_out_and_say_so(tmp_path):
    write_measurement(tmp_path)
    _validate_file(tmp_path / "validate-seed0.jsonl.gz", "B")
    m = measure_stats.load(tmp_path)
    assert {s.task_id for s in measure_stats.task_summaries(m)} == {"A"}
    assert "1 of them had been measured" in measure_stats.stats_markdown(m)


def test_committed_gzip_shards_count_as_done(tmp_path):
    measure_fake(options(tmp_path / "session1"))
    shards = tmp_path / "committed"
    shards.mkdir()
    raw = (tmp_path / "session1" / RESULTS_FILE).read_bytes()
    (shards / "measurements-session1.jsonl.gz").write_bytes(gzip.compress(raw))
    again = measure_fake(options(tmp_path / "session2", resume_from=(shards,)))
    assert again.finished == 0 and again.already_done == 2


def test_a_truncated_gzip_shard_keeps_its_whole_lines(tmp_path):
    rows = [json.dumps(_row("t", c, "t/naive")) for c in ("small", "large", "odd")] * 200
    packed = gzip.compress(("\n".join(rows) + "\n").encode())
    (tmp_path / "measurements-cut.jsonl.gz").write_bytes(packed[: len(packed) * 3 // 4])
    progress = read_progress(tmp_path)
    assert progress.torn_lines >= 1 and ("t", "small", "t/naive") in progress.done_keys


def test_a_second_run_measures_nothing_new(tmp_path):
    first = measure_fake(options(tmp_path))
    before = len(lines(tmp_path))
    second = measure_fake(options(tmp_path))
    assert first.finished == 2 and second.finished == 0
    assert len(lines(tmp_path)) == before + 1  # only the second run's `run` record


def test_a_partly_measured_task_gets_only_its_missing_keys(tmp_path):
    task = select_tasks(options(tmp_path))[0]
    impl = registry.implementations(task)[0]
    row = {**_row(task.task_id, "small", impl.impl_id), "source_hash": impl_hash(impl.source)}
    (tmp_path / RESULTS_FILE).write_text(json.dumps(row) + "\n")
    measure_fake(options(tmp_path))
    keys = row_keys(tmp_path)
    assert len(keys) == len(set(keys)) and set(keys) == planned_keys(select_tasks(options(tmp_path)))


def test_a_key_measured_with_another_source_is_measured_again(tmp_path):
    task = select_tasks(options(tmp_path))[0]
    impl = registry.implementations(task)[0]
    stale = {**_row(task.task_id, "small", impl.impl_id), "source_hash": "older-source"}
    (tmp_path / RESULTS_FILE).write_text(json.dumps(stale) + "\n")
    measure_fake(options(tmp_path))
    assert row_keys(tmp_path).count((task.task_id, "small", impl.impl_id)) == 2


def test_a_task_that_gained_an_implementation_gets_only_the_new_keys(tmp_path):
    measure_fake(options(tmp_path))
    task = select_tasks(options(tmp_path))[0]
    lines_now = lines(tmp_path)
    dropped = registry.implementations(task)[-1].impl_id  # pretend it did not exist at the first run
    kept = [r for r in lines_now if r.get("impl_id") != dropped]
    for r in kept:
        if r["record"] == "task" and r["task_id"] == task.task_id:
            r["impls"].pop(dropped)
    (tmp_path / RESULTS_FILE).write_text("".join(json.dumps(r) + "\n" for r in kept))
    again = measure_fake(options(tmp_path))
    new = [k for k in row_keys(tmp_path) if k not in {(r.get("task_id"), r.get("config"), r.get("impl_id"))
                                                      for r in kept}]
    assert again.finished == 1 and {k[2] for k in new} == {dropped} and len(new) == 3


def test_tasks_without_implementations_are_counted_but_not_recorded(tmp_path, monkeypatch):
    real = registry.implementations
    monkeypatch.setattr(registry, "implementations", lambda t: [] if t.family == "elementwise" else real(t))
    summary = measure_fake(options(tmp_path))
    assert summary.no_impls == 1 and summary.finished == 1
    assert {r["family"] for r in lines(tmp_path) if r["record"] == "task"} == {"map"}


# --------------------------------------------------------------------------------------------------
# Selection


def test_shards_partition_the_selection(tmp_path):
    full = [t.task_id for t in select_tasks(options(tmp_path, limit=5))]
    shards = [[t.task_id for t in select_tasks(options(tmp_path, limit=5, shard=(i, 3)))] for i in range(3)]
    together = [task_id for shard in shards for task_id in shard]
    assert sorted(together) == sorted(full) and len(set(together)) == len(full)


def test_shards_mix_the_task_kinds(tmp_path):
    kinds = {t.kind for t in select_tasks(options(tmp_path, limit=20, shard=(1, 4)))}
    assert len(kinds) == 2


def test_round_robin_puts_every_family_in_a_short_prefix(tmp_path):
    tasks = registry.build_index(0, families=["map", "elementwise", "stencil1d"])
    assert {t.family for t in round_robin(tasks)[:3]} == {"map", "elementwise", "stencil1d"}


def test_a_bad_shard_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="0 <= i < n"):
        MeasureOptions(out_dir=Path("x"), shard=(3, 3))


# --------------------------------------------------------------------------------------------------
# The time budget


def test_the_budget_stops_before_a_task_that_cannot_fit(tmp_path):
    # the first task is expected to fit (0.6 s of 1 s); once it has taken 0.6 s the second cannot
    fits_once = options(tmp_path, time_budget_s=1.0, assumed_task_s=0.5, assumed_startup_s=0.0,
                        test_hooks=(("sleep_s", "0.6"),))
    summary = measure_fake(fits_once)
    assert summary.finished == 1 and summary.left == 1 and summary.exit_code == EXIT_BUDGET


def test_a_budget_too_short_for_any_task_is_refused_with_the_fix(tmp_path):
    too_short = options(tmp_path, time_budget_s=55.0, kinds=("pytorch",))
    with pytest.raises(ValueError, match="no task would start.*--time-budget-s 60 or more"):
        measure_fake(too_short)
    assert not (tmp_path / RESULTS_FILE).exists()


def test_the_budget_kills_a_task_past_the_grace_and_the_next_run_finishes_it(tmp_path):
    slow = options(tmp_path, time_budget_s=1.0, grace_s=0.5, assumed_task_s=0.1, assumed_startup_s=0.0,
                   test_hooks=(("sleep_s", "30"),))
    summary = measure_fake(slow)
    assert summary.exit_code == EXIT_BUDGET and summary.elapsed_s < 10
    assert not [r for r in lines(tmp_path) if r["record"] == "task"]  # killed tasks are not finished
    assert measure_fake(options(tmp_path)).exit_code == EXIT_DONE
    assert set(row_keys(tmp_path)) == planned_keys(select_tasks(options(tmp_path)))


# --------------------------------------------------------------------------------------------------
# Deaths and timeouts


def test_a_child_death_fails_only_the_culprit_and_the_task_is_finished(tmp_path):
    task = select_tasks(options(tmp_path))[0]
    culprit = registry.implementations(task)[1].impl_id
    summary = measure_fake(options(tmp_path, test_hooks=(("crash_on", culprit),)))
    rows = [r for r in lines(tmp_path) if r["record"] == "row"]
    assert {r["impl_id"] for r in rows if r["status"] != "ok"} == {culprit}
    assert all("died" in r["message"] for r in rows if r["status"] == "worker_died")
    assert set(row_keys(tmp_path)) == planned_keys(select_tasks(options(tmp_path)))
    assert summary.finished == 2 and summary.exit_code == EXIT_DONE


def test_a_hanging_implementation_is_killed_and_marked_timeout(tmp_path):
    task = select_tasks(options(tmp_path))[0]
    culprit = registry.implementations(task)[0].impl_id
    measure_fake(options(tmp_path, task_timeout_s=1.0, test_hooks=(("hang_on", culprit),)))
    failed = {(r["impl_id"], r["status"]) for r in lines(tmp_path)
              if r["record"] == "row" and r["status"] != "ok"}
    assert failed == {(culprit, "timeout")}


def test_a_death_inside_torch_compile_retries_without_that_baseline(tmp_path):
    summary = measure_fake(options(tmp_path, test_hooks=(("crash_in_compile", "1"),)))
    assert summary.failed_rows == 0 and summary.finished == 2
    assert set(row_keys(tmp_path)) == planned_keys(select_tasks(options(tmp_path)))


def _job(configs=("small",), impls=("t/a", "t/b")) -> Job:
    job = Job(registry.build_index(0, families=["map"])[0], set())
    job.planned = [("t", c, i) for c in configs for i in impls]
    return job


def test_one_implementation_in_flight_is_blamed_at_once():
    verdict = after_death(_job(), Phase("check", "small", ("t/a",)), timed_out=False, max_attempts=3)
    assert verdict.failed == {("t", "small", "t/a")} and verdict.retry


def test_a_death_during_timing_is_retried_once_then_fails_the_timed_group():
    job, phase = _job(), Phase("timing", "small", ("t/a", "t/b"))
    first = after_death(job, phase, timed_out=False, max_attempts=3)
    second = after_death(job, phase, timed_out=False, max_attempts=3)
    assert not first.failed and first.retry
    assert second.failed == {("t", "small", "t/a"), ("t", "small", "t/b")} and not second.retry


def test_deaths_that_blame_nobody_are_capped():
    job = Job(registry.build_index(0, families=["map"])[0], set())  # died before planning
    verdicts = [after_death(job, Phase("setup"), timed_out=False, max_attempts=3) for _ in range(3)]
    assert [v.retry for v in verdicts] == [True, True, False]


# --------------------------------------------------------------------------------------------------
# Statistics on a hand-made measurement


def _timed(task, config, impl, ms, status="ok", **kw):
    return {"record": "row", "task_id": task, "kind": "c", "family": "fam", "config": config,
            "impl_id": f"{task}/{impl}", "strategy": impl, "status": status, "correct": status == "ok",
            "median_ms": ms if status == "ok" else None, **kw}


def write_measurement(tmp_path: Path) -> None:
    rows = [
        {"record": "run", "run": "r1", "t": 1000.0},
        # task A: ratios 4 (small) and 9 (large) -> geomean 6; `bad` is wrong on large and never verified
        _timed("A", "small", "x", 1.0, naive_ms=3.0, serial_c_ms=10.0), _timed("A", "small", "y", 4.0),
        _timed("A", "small", "bad", 2.0),
        _timed("A", "large", "x", 2.0, naive_ms=4.0, serial_c_ms=40.0), _timed("A", "large", "y", 18.0),
        _timed("A", "large", "bad", 0.5, "incorrect"),
        # task B: one config, ratio 2, three verified implementations
        _timed("B", "small", "x", 1.0), _timed("B", "small", "y", 2.0), _timed("B", "small", "z", 1.5),
        {"record": "task", "task_id": "A", "kind": "c", "status": "ok", "run": "r1", "t_start": 1000.0,
         "t_end": 1030.0, "elapsed_s": 30.0},
        {"record": "task", "task_id": "B", "kind": "c", "status": "ok", "run": "r1", "t_start": 1030.0,
         "t_end": 1060.0, "elapsed_s": 30.0},
    ]
    (tmp_path / RESULTS_FILE).write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def test_the_task_ratio_is_the_geomean_of_slowest_over_fastest_correct(tmp_path):
    write_measurement(tmp_path)
    a = {s.task_id: s for s in measure_stats.task_summaries(measure_stats.load(tmp_path))}["A"]
    assert a.config_ratios == {"small": 4.0, "large": 9.0} and math.isclose(a.ratio, 6.0)


def test_verified_implementations_are_correct_on_every_configuration(tmp_path):
    write_measurement(tmp_path)
    by_id = {s.task_id: s for s in measure_stats.task_summaries(measure_stats.load(tmp_path))}
    assert (by_id["A"].verified_impls, by_id["A"].impls, by_id["B"].verified_impls) == (2, 3, 3)


def test_rows_of_an_older_source_are_left_out_and_counted(tmp_path):
    """B/z was measured from a source its generator no longer produces: its row is stale."""
    write_measurement(tmp_path)
    m = measure_stats.load(tmp_path)
    current = {r["impl_id"]: r.get("source_hash") for r in m.rows if r["impl_id"] != "B/z"}
    current["B/z"] = "new-source"
    kept = measure_stats.without_stale(m, current)
    assert (kept.stale_rows, kept.stale_impls, len(kept.rows)) == (1, 1, len(m.rows) - 1)
    assert "1 rows of 1 implementations" in measure_stats.stats_markdown(kept)


def test_the_current_hashes_of_a_generated_task_match_its_implementations():
    task = registry.build_index(0, families=["map"])[0]
    current = measure_stats.current_source_hashes(measure_stats.Measurements((), {}, ()))
    assert all(current[i.impl_id] == impl_hash(i.source) for i in registry.implementations(task))


def test_best_speedups_are_geomeans_over_configurations(tmp_path):
    write_measurement(tmp_path)
    a = {s.task_id: s for s in measure_stats.task_summaries(measure_stats.load(tmp_path))}["A"]
    assert math.isclose(a.speedups["naive"], math.sqrt(3.0 * 2.0))
    assert math.isclose(a.speedups["serial_c"], math.sqrt(10.0 * 20.0))


def test_quantiles_match_numpy_linear_interpolation():
    values = [3.0, 1.0, 7.5, 2.0, 10.0]
    got = measure_stats.quantiles(values, (0.1, 0.5, 0.9))
    assert np.allclose(list(got.values()), np.quantile(values, [0.1, 0.5, 0.9]))


def test_histogram_bins_are_half_open_with_an_open_last_bin():
    counts = dict(measure_stats.histogram([1.0, 1.24, 1.25, 100.0], (1.0, 1.25, 2.0)))
    assert counts == {"[1, 1.25)": 2, "[1.25, 2)": 1, ">= 2": 1}


def test_throughput_counts_tasks_over_run_wall_time(tmp_path):
    write_measurement(tmp_path)
    tp = measure_stats.throughput(measure_stats.load(tmp_path))
    assert tp.tasks == 2 and math.isclose(tp.wall_minutes, 1.0) and math.isclose(tp.tasks_per_minute, 2.0)


def test_export_writes_a_csv_row_per_task_and_the_markdown(tmp_path):
    write_measurement(tmp_path)
    measure_stats.export_summary(tmp_path / "summary", tmp_path)
    table = list(csv.DictReader((tmp_path / "summary" / "task_ratios.csv").open()))
    assert [(r["task_id"], r["ratio"], r["best_large"]) for r in table] == [("A", "6", "x"), ("B", "2", "")]
    assert "tasks with >= 3 verified implementations: 1/2" in (tmp_path / "summary" / "stats.md").read_text()


def test_parquet_export_holds_every_row(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    write_measurement(tmp_path)
    measure_stats.export_summary(tmp_path / "summary", tmp_path)
    assert pq.read_table(tmp_path / "summary" / "measurements.parquet").num_rows == 9


def test_cli_stats_reads_a_measurement_without_a_manifest(tmp_path, capsys):
    write_measurement(tmp_path)
    args = argparse.Namespace(action="stats", out=Path("unused"), out_dir=tmp_path, export=None)
    assert cli.run(args) == 0
    out = capsys.readouterr().out
    assert "| ratio | 2.00 |" in out and "tasks measured: 2" in out


def test_static_features_summarise_the_kernels_of_an_implementation():
    impl = registry.implementations(registry.build_index(0, families=["reduce_all"])[0])[0]
    row = measure_features.static_feature_row(impl)
    assert row is not None and row["features"]["n_kernels"] >= 1 and row["features"]["global_accesses"] >= 1


def test_stats_say_how_many_tasks_the_latest_run_selected(tmp_path):
    write_measurement(tmp_path)
    with (tmp_path / "measurements-more.jsonl").open("w") as f:
        f.write(json.dumps({"record": "run", "run": "r2", "t": 2000.0, "selected": 5258}) + "\n")
    markdown = measure_stats.stats_markdown(measure_stats.load(tmp_path))
    assert "tasks measured: 2 {'c': 2} of 5258 selected" in markdown


def test_stats_count_timed_rows_and_their_spread_by_their_lead():
    rows = [{"median_ms": 1.0, "iqr_ms": 0.1, "lead_us": 200.0}, {"median_ms": 1.0, "iqr_ms": 0.6},
            {"median_ms": None, "lead_us": 200.0},
            {"median_ms": 2.0, "iqr_ms": 0.1, "lead_us": 200.0, "lead_kind": "persistent"}]
    assert measure_stats._leads(rows) == (
        "200 µs memset: 1 (IQR/median p50 10.0%, 0 above 50%); "
        "200 µs persistent: 1 (IQR/median p50 5.0%, 0 above 50%); "
        "2x L2 write only (before the lead): 1 (IQR/median p50 60.0%, 1 above 50%)")


def test_retime_before_priority_reopens_only_keys_without_a_timing_nice(tmp_path):
    rows = [{"record": "row", "task_id": "A", "config": "small", "impl_id": "A/x", "median_ms": 1.0,
             "status": "ok", "source_hash": "h"},
            {"record": "row", "task_id": "A", "config": "small", "impl_id": "A/y", "median_ms": 1.0,
             "timing_nice": -15, "status": "ok", "source_hash": "h"}]
    (tmp_path / RESULTS_FILE).write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    again = read_progress(tmp_path, retime_before_priority=True)
    assert set(again.done_keys) == {("A", "small", "A/y")}


def test_stats_count_rows_timed_at_a_raised_priority():
    rows = ({"median_ms": 1.0, "timing_nice": -15}, {"median_ms": 1.0},
            {"median_ms": None, "timing_nice": -15})
    assert "raised thread priority (`timing_nice`): 1 of 2 rows" in measure_stats._priority_line(rows)


def test_retime_before_lead_reopens_only_keys_timed_without_a_lead(tmp_path):
    rows = [{"record": "row", "task_id": "A", "config": "small", "impl_id": "A/x", "median_ms": 1.0,
             "status": "ok", "source_hash": "h"},
            {"record": "row", "task_id": "A", "config": "small", "impl_id": "A/y", "median_ms": 1.0,
             "lead_us": 200.0, "status": "ok", "source_hash": "h"},
            {"record": "task", "task_id": "A", "status": "ok", "impls": {"A/x": "h", "A/y": "h"}}]
    (tmp_path / RESULTS_FILE).write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert read_progress(tmp_path).is_finished("A", {"A/x": "h", "A/y": "h"})
    again = read_progress(tmp_path, retime_before_lead=True)
    assert set(again.done_keys) == {("A", "small", "A/y")}
    assert not again.is_finished("A", {"A/x": "h", "A/y": "h"})


def test_a_kernel_change_changes_the_implementation_hash():
    impl = registry.implementations(registry.build_index(0, families=["reduce_all"])[0])[0]
    changed = impl.source.replace("double acc", "float acc")
    assert changed != impl.source and impl_hash(changed) != impl_hash(impl.source)


def test_a_comment_in_the_kernel_does_not_change_the_implementation_hash():
    impl = registry.implementations(registry.build_index(0, families=["reduce_all"])[0])[0]
    commented = impl.source.replace("double acc", "/* note */ double   acc")
    assert impl_hash(commented) == impl_hash(impl.source)


def test_features_of_an_older_source_are_not_current():
    impl = registry.implementations(registry.build_index(0, families=["reduce_all"])[0])[0]
    assert measure_features.has_current_features({impl.impl_id: impl_hash(impl.source)}, impl)
    assert not measure_features.has_current_features({impl.impl_id: "older-source"}, impl)
    assert not measure_features.has_current_features({}, impl)


def test_a_limit_samples_each_family_by_task_id_hash_not_by_generator_order(tmp_path):
    from cudaperf.datasets import registry

    picked = [t.task_id for t in select_tasks(options(tmp_path, limit=3))]
    first = [t.task_id for f in FAMILIES for t in registry.build_index(0, families=[f])[:3]]
    assert len(picked) == 3 * len(FAMILIES) and set(picked) != set(first)
