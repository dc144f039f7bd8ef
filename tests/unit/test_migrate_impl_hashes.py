"""dev/migrate_impl_hashes.py: which records it rewrites (the regeneration itself ran once, see
dev/LOG.md)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_SPEC = importlib.util.spec_from_file_location(
    "migrate_impl_hashes", Path(__file__).resolve().parents[2] / "dev" / "migrate_impl_hashes.py")
migrate = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(migrate)

LEGACY, NEW = {"t/a": "old-a", "t/b": "old-b"}, {"t/a": "new-a", "t/b": "new-b"}


def _counts() -> dict[str, int]:
    return {"migrated": 0, "left": 0}


def test_a_row_measured_from_the_regenerated_source_gets_the_new_hash():
    rec = migrate.migrate_record({"record": "row", "v": 1, "impl_id": "t/a", "source_hash": "old-a"}, NEW,
                                 LEGACY,
                                 _counts())
    assert rec["source_hash"] == "new-a" and rec["v"] == 2


def test_a_row_from_another_source_keeps_its_hash():
    counts = _counts()
    rec = migrate.migrate_record({"record": "row", "impl_id": "t/a", "source_hash": "other"}, NEW, LEGACY,
                                 counts)
    assert rec["source_hash"] == "other" and counts == {"migrated": 0, "left": 1}


def test_a_task_record_maps_each_implementation():
    rec = migrate.migrate_record({"record": "task", "impls": {"t/a": "old-a", "t/b": "other"}}, NEW, LEGACY,
                                 _counts())
    assert rec["impls"] == {"t/a": "new-a", "t/b": "other"}


def test_a_features_row_gains_its_hash():
    rec = migrate.migrate_record({"impl_id": "t/b", "features": {}}, NEW, LEGACY, _counts())
    assert rec["source_hash"] == "new-b"
