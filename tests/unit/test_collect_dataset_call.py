"""scripts/collect_dataset_call.py: a device call's rows reach the shards folder, a killed call's too,
and nothing already filed is overwritten."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from script_module import load_script


def _script():
    return load_script("collect_dataset_call")


def _killed_call(tmp_path: Path) -> Path:
    call = tmp_path / "b"
    (call / "run").mkdir(parents=True)
    rows = [{"record": "row", "task_id": "A", "t": 1796361000.0},
            {"record": "task", "task_id": "A", "t_end": 1796361126.2}]
    (call / "run" / "measurements.jsonl").write_text("\n".join(map(json.dumps, rows)) + '\n{"torn')
    (call / "measure.log").write_text("measured 1 task\n")
    return call


def test_a_killed_calls_rows_are_filed_under_the_time_of_their_last_record(tmp_path):
    _script().collect(_killed_call(tmp_path), tmp_path / "results", tmp_path)
    shard = tmp_path / "measurements-20261204T051206Z.jsonl.gz"
    with gzip.open(shard, "rt") as f:
        assert f.read().count("task_id") == 2


def test_a_shard_already_filed_is_not_overwritten(tmp_path):
    call = _killed_call(tmp_path)
    existing = tmp_path / "measurements-20261204T051206Z.jsonl.gz"
    existing.write_bytes(b"kept")
    lines = _script().collect(call, tmp_path / "results", tmp_path)
    assert existing.read_bytes() == b"kept" and any(line.startswith("kept") for line in lines)
