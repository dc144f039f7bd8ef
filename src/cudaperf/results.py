"""Durable storage of evaluation results: one JSON line per `EvalResult`, appended as each one finishes.

Every append is flushed and fsync'ed, so a crash loses at most the line being written. Reading back
tolerates exactly what a crash can leave: a torn last line (skipped) and a pair evaluated twice after a
resume (the last line wins). The file is plain JSONL; `jq` and pandas read it directly.

Schema: each line is `types.to_dict(EvalResult)`. JSON has no NaN or infinities, so a non-finite float (the
max error of an all-NaN output, a speedup over a zero time) is written as the string "NaN", "Infinity" or
"-Infinity"; `from_dict` reads those back as floats in every float field. Every result can be stored: a value
JSON cannot hold (a numpy scalar, a tensor that reached a free-form dict) is written as a number where it is
one and as its `repr` otherwise, so one odd record never ends a batch.

Not covered: several processes appending to one file at once (one writer per file; the evaluator's
single consumer loop is that writer), rendering results (`cudaperf.report`).
"""

from __future__ import annotations

import json
import numbers
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
        line = to_json_line(result)
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


def to_json_line(result: EvalResult) -> str:
    """One result as one JSON line (with its newline); never raises for odd values inside the record."""
    data = to_dict(result)
    try:
        text = json.dumps(data, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        text = json.dumps(_jsonable(data), separators=(",", ":"), allow_nan=False)
    return text + "\n"


def _jsonable(value: Any) -> Any:
    """`value` with everything JSON cannot hold replaced: numbers that are not Python numbers (numpy, torch
    scalars) become floats or ints (non-finite ones the strings of `NON_FINITE_JSON`), anything else its
    repr."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return to_dict(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return to_dict(float(value))
    return repr(value)[:2000]


def _parse(line: bytes) -> EvalResult | None:
    try:
        data = json.loads(line)
        result = from_dict(EvalResult, data)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    if not isinstance(result.task_id, str) or not isinstance(result.solution_id, str):
        return None
    return result
