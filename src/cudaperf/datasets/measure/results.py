"""The files of a measurement: `measurements.jsonl` (read tolerating a torn last line, appended one
fsynced line per record), what they already hold (`read_progress`: the keys and tasks a run skips), and the
CPU filter's verdicts beside them (`validate*.jsonl[.gz]`, `flagged_tasks`).

Record types in measurements.jsonl (field `record`): `run` (one per invocation), `row` (one per task x
configuration x implementation, see `task_measurement.py`), `task` (a task finished or given up). Static
features go to `features.jsonl` (one line per implementation, `features.py`). Every reader takes all
`<stem>*.jsonl[.gz]` of a directory, so the gzipped shards committed after earlier sessions count as well.

Resume: a key (task, configuration, implementation) counts as done only for the source it was measured
with (`impl_hash`), a task as finished only while its implementations are those it was measured with
(families gain and fix implementations while a measurement spans sessions). The last row of a key wins.

Not covered: deciding what to measure (runner.py), the statistics (stats.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudaperf.datasets.jsonl import read_records
from cudaperf.datasets.records import normalise_code

RESULTS_FILE = "measurements.jsonl"
FEATURES_FILE = "features.jsonl"
ROW_VERSION = 2  # 2: `impl_hash` covers the CUDA source
RETRYABLE = ("worker_died", "timeout")  # row statuses that --retry-failed measures again
INCORRECT = "incorrect"  # the row status that --retry-incorrect measures again
VALIDATE_STEM = "validate"  # validate*.jsonl[.gz]: `dataset validate` results (the CPU filter)
Key = tuple[str, str, str]  # (task_id, config, impl_id)


@dataclass
class Progress:
    """What the result files already hold. Keys and tasks map to the source hashes they were measured
    with (`impl_hash`): a key counts as done only for the same source, a task as finished only while its
    implementations are those it was measured with (families gain and fix implementations over time)."""

    done_keys: dict[Key, str | None] = field(default_factory=dict)
    finished_tasks: dict[str, dict[str, str]] = field(default_factory=dict)  # task -> {impl id: hash}
    rows: int = 0
    torn_lines: int = 0

    def is_finished(self, task_id: str, impls: dict[str, str]) -> bool:
        measured = self.finished_tasks.get(task_id)
        return measured is not None and all(measured.get(i) == h for i, h in impls.items())

    def done_for(self, task_id: str, impls: dict[str, str], keys_by_task: dict[str, list[Key]]) -> set[Key]:
        return {k for k in keys_by_task.get(task_id, ()) if impls.get(k[2]) == self.done_keys[k]}


def impl_hash(source: str) -> str:
    """The hash of an implementation's source, its CUDA included (comments and whitespace do not change
    it); rows carry it as `source_hash` (ROW_VERSION 2)."""
    return hashlib.sha256(normalise_code(source).encode()).hexdigest()[:12]


def timed_before_the_lead(row: dict[str, Any]) -> bool:
    """A timed row from before `cudaperf.timing` ran a lead ahead of each call (its samples were timed
    after a 2x L2 write only: a median IQR of 22% of the median on the H200, against 8% with a lead)."""
    return row.get("median_ms") is not None and row.get("lead_us") is None


def timed_before_priority(row: dict[str, Any]) -> bool:
    """A timed row not timed at a raised thread priority (no `timing_nice`: measured before the child
    raised it, with it switched off, or where the OS refused): its host-heavy baselines (eager, compile,
    serial C) shared the CPU with other children's compiles (serial C inflated 1.7-2.7x under load on 2
    cores, benchmarks/serial_priority.py)."""
    return row.get("median_ms") is not None and row.get("timing_nice") is None


def read_progress(directories: Path | Iterable[Path], retry_failed: bool = False,
                  retry_incorrect: bool = False, retime_before_lead: bool = False,
                  retime_before_priority: bool = False) -> Progress:
    """Finished keys and tasks over every result file of `directories` (the output directory and the
    `--resume-from` ones). The last row of a key wins (a retried key's new row replaces the old); with
    `retry_failed`, keys whose last row is a RETRYABLE failure, and their tasks, count as not done; with
    `retry_incorrect`, likewise keys whose last row says INCORRECT; with `retime_before_lead` or
    `retime_before_priority`, keys whose last row was `timed_before_the_lead` or `timed_before_priority`."""
    rows, torn = read_records([directories] if isinstance(directories, Path) else directories)
    last: dict[Key, dict[str, Any]] = {}
    tasks: dict[str, dict[str, Any]] = {}
    for row in rows:
        if row.get("record") == "row":
            last[(row["task_id"], row["config"], row["impl_id"])] = row
        elif row.get("record") == "task":
            tasks[row["task_id"]] = row
    again = (RETRYABLE if retry_failed else ()) + ((INCORRECT,) if retry_incorrect else ())
    retry = {k for k, r in last.items() if r.get("status") in again
             or (retime_before_lead and timed_before_the_lead(r))
             or (retime_before_priority and timed_before_priority(r))}
    finished = {t: dict(r.get("impls") or {}) for t, r in tasks.items()
                if not (retry_failed and r.get("status") != "ok")}
    for key in retry:
        finished.pop(key[0], None)
    done = {k: r.get("source_hash") for k, r in last.items() if k not in retry}
    return Progress(done, finished, len(last), torn)



def failed_checks(verdict: dict[str, Any]) -> tuple[str, ...]:
    """Why a `dataset validate` verdict is not ok: its degenerate flags, `declaration` / `compile` for the
    other checks (empty for a verdict that passed)."""
    if verdict.get("ok"):
        return ()
    why = tuple(verdict.get("flags") or ()) + (("declaration",) if verdict.get("problems") else ()) + \
        (("compile",) if any(v != "ok" for v in (verdict.get("compiled") or {}).values()) else ())
    return why or ("not_ok",)


def flagged_tasks(directories: Iterable[Path]) -> dict[str, tuple[str, ...]]:
    """Tasks the CPU filter did not pass, from every validate*.jsonl[.gz] of `directories`: id -> why
    (`failed_checks`). A verdict row names its `check` (`degenerate` when absent: `dataset validate`;
    `rounding`: filters/rounding.py); the last verdict of each (task, check) wins, and a task is flagged when
    any of its checks' last verdicts is not ok."""
    records, _ = read_records(directories, VALIDATE_STEM)
    last: dict[tuple[str, str], dict[str, Any]] = {}
    for r in records:
        if "task_id" in r and "ok" in r:
            last[(r["task_id"], r.get("check", "degenerate"))] = r
    flagged: dict[str, tuple[str, ...]] = {}
    for (task_id, _check), r in sorted(last.items()):
        if not r["ok"]:
            flagged[task_id] = flagged.get(task_id, ()) + failed_checks(r)
    return flagged

