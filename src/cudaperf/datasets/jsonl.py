"""JSON Lines files of the dataset (measurements, features, validation verdicts): read tolerating a torn
last line and truncated gzip shards, every `<stem>*.jsonl[.gz]` of several directories read as one, and
appended one fsynced line per record, so a kill loses at most the line in flight.

Not covered: what the records mean (measure/results.py, commands/dataset_cmd.py), writing whole files
(export.py).
"""

from __future__ import annotations

import gzip
import json
import os
import threading
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def read_jsonl(path: Path) -> tuple[list[dict[str, Any]], int]:
    """Every parseable line of `path` (plain or .gz; none if missing; blank lines skipped) and the number of
    lines that were not (a line cut by a kill mid-write: its key was not finished, it is measured again)."""
    if not path.exists():
        return [], 0
    rows, torn = [], 0
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        try:
            for raw in fh:
                if not raw.strip():
                    continue
                try:
                    rows.append(json.loads(raw))
                except (json.JSONDecodeError, UnicodeDecodeError):
                    torn += 1
        except (EOFError, gzip.BadGzipFile, zlib.error):
            torn += 1  # a truncated .gz: what was read before the cut is kept
    return rows, torn


def result_files(directory: Path, stem: str = "measurements") -> list[Path]:
    """`<stem>.jsonl` and every shard `<stem>*.jsonl[.gz]` in a directory (sorted: later shards win)."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.name.startswith(stem)
                  and (p.name.endswith(".jsonl") or p.name.endswith(".jsonl.gz")))


def read_records(directories: Iterable[Path], stem: str = "measurements") -> tuple[list[dict[str, Any]], int]:
    """The records of every result file of the directories, in order, and the torn lines among them."""
    records, torn = [], 0
    for directory in directories:
        for path in result_files(directory, stem):
            more, bad = read_jsonl(path)
            records += more
            torn += bad
    return records, torn


class ResultsWriter:
    """Appends one JSON line per record, flushed and fsynced, so a kill loses at most the line in flight."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        torn_tail = path.exists() and path.stat().st_size > 0 and _last_byte(path) != b"\n"
        self._fh = path.open("ab")
        self._lock = threading.Lock()
        if torn_tail:  # fence the torn line off, or the next record would be glued onto it
            self._write_bytes(b"\n")

    def append(self, record: dict[str, Any]) -> None:
        self._write_bytes(json.dumps(record, sort_keys=True, default=_json_default).encode() + b"\n")

    def _write_bytes(self, data: bytes) -> None:
        with self._lock:
            self._fh.write(data)
            self._fh.flush()
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()


def _last_byte(path: Path) -> bytes:
    with path.open("rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1)


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if isinstance(value, (set, tuple)):
        return list(value)
    return str(value)
