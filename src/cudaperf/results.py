"""Durable storage of evaluation results: one JSON line per `EvalResult`, appended as each one finishes.

Every append is flushed and fsync'ed, so a crash loses at most the line being written. Reading back
tolerates exactly what a crash can leave: a torn last line (skipped) and a pair evaluated twice after a
resume (the last line wins). The file is plain JSONL; `jq` and pandas read it directly.

Not covered: several processes appending to one file at once (one writer per file; the evaluator's
single consumer loop is that writer), rendering results (`cudaperf.report`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cudaperf.types import EvalResult, Outcome, from_dict, to_dict

# Outcomes that describe the harness or the machine rather than the candidate: a resume runs them again.
RETRY_ON_RESUME = frozenset({Outcome.SKIPPED, Outcome.HARNESS_ERROR})


@dataclass(frozen=True)
class LoadReport:
    """What `ResultStore.read` found: the results (last line per pair wins) and the lines it skipped."""

    results: tuple[EvalResult, ...]
    bad_lines: tuple[int, ...] = ()  # 1-based line numbers that were not a valid result
    torn_tail: bool = False  # the last line was cut short (a crash while writing it)


class ResultStore:
    """Append-only JSONL file of `EvalResult`s, keyed by (task_id, solution_id)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def append(self, result: EvalResult) -> None:
        """Write one result as one line, then flush and fsync it."""
        line = json.dumps(to_dict(result), separators=(",", ":"), allow_nan=False) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a+b") as f:
            if self._ends_mid_line(f):
                line = "\n" + line  # after a torn line, start a fresh one rather than extend the wreck
            f.write(line.encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())

    @staticmethod
    def _ends_mid_line(f) -> bool:
        end = f.seek(0, os.SEEK_END)
        if end == 0:
            return False
        f.seek(end - 1)
        return f.read(1) != b"\n"

    def read(self) -> LoadReport:
        """Every result in the file; never raises for bad content (a missing file is empty)."""
        if not self.path.exists():
            return LoadReport(results=())
        raw = self.path.read_bytes()
        lines = raw.split(b"\n")
        by_key: dict[tuple[str, str], EvalResult] = {}
        bad: list[int] = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            result = _parse(line)
            if result is None:
                bad.append(number)
                continue
            key = (result.task_id, result.solution_id)
            by_key.pop(key, None)  # re-insert, so the order is that of the latest evaluation
            by_key[key] = result
        torn = bool(lines[-1].strip()) and bool(bad) and bad[-1] == len(lines)
        return LoadReport(results=tuple(by_key.values()), bad_lines=tuple(bad), torn_tail=torn)

    def load(self) -> list[EvalResult]:
        """The results, one per (task_id, solution_id), the last line of each pair winning."""
        return list(self.read().results)

    def done(self, retry: Iterable[Outcome] = RETRY_ON_RESUME) -> set[tuple[str, str]]:
        """Pairs already evaluated, for resume. Pairs whose outcome is in `retry` (by default SKIPPED
        and HARNESS_ERROR: the machine or cudaperf failed, not the candidate) are left out, so a resume
        evaluates them again."""
        again = set(retry)
        return {(r.task_id, r.solution_id) for r in self.load() if r.outcome not in again}


def _parse(line: bytes) -> EvalResult | None:
    try:
        data = json.loads(line)
        result = from_dict(EvalResult, data)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    if not isinstance(result.task_id, str) or not isinstance(result.solution_id, str):
        return None
    return result
