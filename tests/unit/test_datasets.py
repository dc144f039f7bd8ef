"""The dataset generators: determinism, reachable counts, dedupe, loadability, C references,
implementation compiles (sampled), the degenerate filter, family splits, export and the CLI."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from functools import lru_cache

import numpy as np
import pytest

from cudaperf.commands import dataset_cmd as cli
from cudaperf.datasets import export, registry, splits
from cudaperf.datasets.filters import degenerate
from cudaperf.datasets.records import GeneratedTask, normalise
from cudaperf.tasks import cref, ctask
from cudaperf.tasks.ctask import compile_check, from_json, validate
from cudaperf.types import TaskKind


@lru_cache(maxsize=2)
def index(seed: int = 0) -> tuple[GeneratedTask, ...]:
    return tuple(registry.build_index(seed))


def sample(kind: TaskKind, per_family: int = 1) -> list[GeneratedTask]:
    seen: Counter = Counter()
    out = []
    for t in index():
        if t.kind is kind and seen[t.family] < per_family:
            seen[t.family] += 1
            out.append(t)
    return out


def test_same_seed_gives_the_same_tasks():
    again = registry.build_index(0, families=["map", "elementwise"])
    assert [t.task_id for t in again] == [t.task_id for t in index() if t.family in ("map", "elementwise")]


def test_another_seed_changes_the_random_families():
    other = {t.task_id for t in registry.build_index(1, families=["map"])}
    assert other != {t.task_id for t in index() if t.family == "map"}


def test_counts_reach_the_issue_targets_before_filtering():
    kinds = Counter(t.kind for t in index())
    assert kinds[TaskKind.PYTORCH] >= 1000 and kinds[TaskKind.C] >= 2900


def test_index_has_no_duplicate_sources_or_ids():
    tasks = index()
    assert len({t.dedupe_key for t in tasks}) == len(tasks) == len({t.task_id for t in tasks})


def test_dedupe_ignores_comments_and_whitespace():
    assert normalise("int  a; // note\n/* x */ b") == normalise("int a;\nb")


def test_every_c_task_declares_three_configs_and_is_well_formed():
    c_tasks = [from_json(t.text) for t in index() if t.kind is TaskKind.C]
    assert all(len(t.configs) >= 3 for t in c_tasks)
    assert [t.task_id for t in c_tasks if validate(t)] == []


def test_c_references_build_and_run_on_a_sample(tmp_path):
    for task in sample(TaskKind.C):
        ctask = from_json(task.text)
        run = cref.run_reference(ctask, ctask.configs[0], 0, cache_dir=tmp_path)
        assert run.ok, (task.task_id, run.message)


def test_sorted_segments_reference_sorts(tmp_path):
    task = next(t for t in index() if t.family == "sort" and '"kv": false' in json.dumps(t.variant))
    ctask = from_json(task.text)
    out = cref.run_reference(ctask, ctask.configs[0], 0, cache_dir=tmp_path).outputs["keys"]
    seg = task.variant["seg"]
    rows = out.reshape(-1, seg)
    order = -1 if task.variant["desc"] else 1
    assert np.all(np.diff(rows.astype(np.float64), axis=1) * order >= 0)


def test_pytorch_tasks_load_with_the_task_loader():
    from cudaperf.tasks import task_from_source

    for task in sample(TaskKind.PYTORCH):
        record = task_from_source(task.text, task.task_id)
        assert [c.name for c in record.configs] == ["small", "large", "odd"]
        assert record.family == task.family


def test_sampled_implementations_compile_to_cubin():
    picks = [t for t in sample(TaskKind.C) + sample(TaskKind.PYTORCH)][::3]
    failures = []
    for task in picks:
        impls = registry.implementations(task)
        for impl in impls[:2]:
            check = compile_check(impl.source)
            if not check.ok:
                failures.append((impl.impl_id, check.log[:300]))
    assert failures == []


def test_c_tasks_have_a_naive_baseline_and_three_strategies():
    for task in sample(TaskKind.C):
        impls = registry.implementations(task)
        assert len({i.strategy for i in impls}) >= 3, task.task_id
        assert sum(i.baseline for i in impls) == 1, task.task_id


def test_degenerate_filter_flags_constant_and_input_independent_outputs():
    const = [np.zeros(10)]
    assert set(degenerate.check_outputs([const, const], 1e-4)) >= {"constant_output", "input_independent"}


def test_degenerate_filter_flags_tiny_magnitudes():
    assert "tiny_magnitude" in degenerate.check_outputs([[np.full(4, 1e-7) * [1, 2, 3, 4]],
                                                         [np.full(4, 2e-7) * [1, 2, 3, 4]]], 1e-4)


def test_degenerate_filter_passes_a_healthy_c_task(tmp_path):
    task = next(t for t in index() if t.family == "stencil1d")
    assert degenerate.check_task(task, cache_dir=str(tmp_path)).flags == ()


def test_degenerate_filter_catches_a_clamped_relu_min_torch_task():
    task = next(t for t in index() if t.family == "reduction" and t.variant["op"] == "amin"
                and t.variant["pre"] == [["relu", 0.0]] and t.variant["post"] == [])
    assert "constant_output" in degenerate.check_task(task).flags or "input_independent" in \
        degenerate.check_task(task).flags


def test_degenerate_filter_catches_a_relu_of_log_softmax_task():
    # relu(log_softmax(.)) is zero everywhere on the CPU: measured on the H200 before the filter existed
    # in the measurement (the GPU's rounding left +6e-8 where the CPU had 0)
    task = next(t for t in index() if t.task_id == "pt_softmax_b99ed18c57f4")
    assert "constant_output" in degenerate.check_task(task).flags


def test_8bit_image_tasks_allow_one_level_and_float_ones_none():
    tasks = [from_json(t.text) for t in index() if t.family == "image_filter"]
    levels = {t.arrays[-1].ctype: t.tolerance.int_atol for t in tasks}
    assert levels == {"unsigned char": 1, "float": 0}


def test_splits_hold_whole_groups_out():
    tasks = list(index())
    split_of = splits.split_tasks(tasks, seed=0)
    by_group: dict[tuple, set] = {}
    for t in tasks:
        by_group.setdefault((t.kind, registry.group_of(t)), set()).add(split_of[t.task_id])
    assert all(len(s) == 1 for s in by_group.values())
    for kind in TaskKind:
        assert {"train", "test"} <= {split_of[t.task_id] for t in tasks if t.kind is kind}


def test_splits_are_deterministic():
    tasks = list(index())
    assert splits.split_tasks(tasks, seed=3) == splits.split_tasks(tasks, seed=3)


def test_write_atomic_skips_identical_content(tmp_path):
    path = tmp_path / "a" / "t.py"
    assert export.write_atomic(path, "x") and not export.write_atomic(path, "x")
    assert [p.name for p in path.parent.iterdir()] == ["t.py"]


def _cli(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return cli.run(parser.parse_args(list(argv)))


def test_cli_build_validate_stats_round_trip(tmp_path, capsys):
    out = str(tmp_path / "ds")
    assert _cli("build", "--out", out, "--families", "stencil1d,elementwise", "--limit", "1") == 0
    rows = [json.loads(x) for x in (tmp_path / "ds" / "prompts.jsonl").read_text().splitlines()]
    assert {r["kind"] for r in rows} == {"c", "pytorch"} and all(r["prompt"] for r in rows)
    assert _cli("validate", "--out", out, "--no-degenerate") == 0
    assert _cli("validate", "--out", out, "--no-degenerate") == 0  # resumes: nothing new
    assert len((tmp_path / "ds" / "validate.jsonl").read_text().splitlines()) == 2
    assert _cli("stats", "--out", out) == 0
    assert "stencil1d" in capsys.readouterr().out


def test_build_leaves_out_a_task_the_degenerate_filter_flags(tmp_path):
    out = tmp_path / "ds"
    assert _cli("build", "--out", str(out), "--families", "map", "--limit", "2", "--no-impls") == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert [e["task_id"] for e in manifest["tasks"]] == [registry.build_index(0, families=["map"])[0].task_id]
    assert "constant_output" in manifest["left_out"]["c_map_aff91953900a"]


def test_build_with_no_filter_keeps_every_task(tmp_path):
    out = tmp_path / "ds"
    assert _cli("build", "--out", str(out), "--families", "map", "--limit", "2", "--no-impls",
                "--no-filter") == 0
    assert len(json.loads((out / "manifest.json").read_text())["tasks"]) == 2


def test_build_writes_each_c_tasks_naive_port_even_without_implementations(tmp_path):
    out = tmp_path / "ds"
    assert _cli("build", "--out", str(out), "--families", "map", "--limit", "1", "--no-impls",
                "--no-filter") == 0
    task = registry.build_index(0, families=["map"])[0]
    naive = next(i for i in registry.implementations(task) if i.baseline)
    assert ctask.naive_port_path(export.task_path(out, task)).read_text() == naive.source


def test_validate_compiles_what_the_build_filter_only_ran(tmp_path):
    out = tmp_path / "ds"
    assert _cli("build", "--out", str(out), "--families", "stencil1d", "--limit", "1", "--kinds", "c") == 0
    assert _cli("validate", "--out", str(out), "--compile") == 0
    rows = [json.loads(x) for x in (out / "validate.jsonl").read_text().splitlines()]
    assert "compiled" not in rows[0] and rows[-1]["compiled"]


def test_cli_measure_says_it_needs_a_gpu(capsys):
    assert _cli("measure", "--out", "x") == 2
    assert "needs a GPU" in capsys.readouterr().err


def test_parquet_export_round_trips(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    assert export.write_parquet(tmp_path / "t.parquet", [{"a": 1, "b": "x"}]) is None
    assert pq.read_table(tmp_path / "t.parquet").to_pylist() == [{"a": 1, "b": "x"}]


def test_validate_rounding_adds_its_verdict_to_rows_that_lack_it(tmp_path):
    out = tmp_path / "ds"
    assert _cli("build", "--out", str(out), "--families", "map", "--limit", "2", "--no-impls") == 0
    assert _cli("validate", "--out", str(out), "--rounding") == 0
    rows = [json.loads(x) for x in (out / "validate.jsonl").read_text().splitlines()]
    assert "rounding_flags" not in rows[0] and "rounding_flags" in rows[-1]
