"""benchmarks/anchor_drift_replay.py on records of both forms (before session 22: live anchors against the
carrier; since: against the live reference, with the carrier's median beside them)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from anchor_drift_replay import anchored_sequences, recorded_since_s22, trips


def _write(tmp_path, schedule) -> str:
    path = tmp_path / "eval_modes.json"
    path.write_text(json.dumps({"rows": [{"mode": "rl", "schedule": schedule}]}))
    return str(path)


def _rec(age, fresh, cached, **extra):
    return {"task_id": "t", "config": "small", "age_s": age, "fresh_ms": fresh, "cached_ms": cached, **extra}


def test_records_against_the_carrier_replay_every_rule(tmp_path):
    records = [_rec(1, 1.3, 1.0), _rec(2, 1.31, 1.0), _rec(3, 1.29, 1.0)]
    path = _write(tmp_path, {"live_drift": {"records": records}})
    sequences = anchored_sequences([path])
    assert not recorded_since_s22([path])
    assert trips(sequences, "carrier", 0.10) == (3, 3)
    assert trips(sequences, "reference-twice", 0.10) == (0, 2)


def test_records_against_the_live_reference_are_replayed_with_the_carriers_median(tmp_path):
    schedule = {"anchor_offset": {"records": [_rec(1, 1.3, 1.0, reference="carrier")]},
                "live_drift": {"records": [_rec(2, 1.31, 1.3, reference="live", carrier_ms=1.0)]}}
    path = _write(tmp_path, schedule)
    assert recorded_since_s22([path])
    assert trips(anchored_sequences([path]), "carrier", 0.10) == (2, 2)
