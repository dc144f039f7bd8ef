"""`cudaperf dataset measure OUT_DIR`: verify every implementation of every dataset task on every
configuration on the GPU and time it against the baselines, resumably, one JSONL line per
(task, configuration, implementation) in `OUT_DIR/measurements.jsonl`.

Why in-process and not through the evaluator's sandboxed workers: the implementations are our own
generated code (trusted, like the references), and the sandbox's per-candidate costs (a job round trip,
a fresh reference per job, import guards, the runtime monitor, coverage profiling) would multiply the
device time of ~20,000 implementations (~60,000 rows) that must fit in a handful of 30-minute GPU
sessions. What is kept from the evaluator: builds through NVRTC and its cache (`cudaperf.cuda`),
references computed once per (configuration, seed), two seeds per configuration compared with
`correctness.compare`, poisoned outputs, and one interleaved `timing.bench_interleaved_report` run per
configuration with the L2 flushed before every call, the baselines in the same run (`task_measurement.py`).

Why child processes anyway: a sticky CUDA error (an illegal address) leaves the context unusable and the
process with it. So each GPU gets a child (spawned: a forked CUDA context is unusable) that measures one
task at a time and tells the parent what it is doing (`phase` messages naming the implementations in
flight). When a child dies, the parent blames those implementations (failed rows with the reason), starts
a new child and sends the task again without them; see `after_death` for the rule. The parent is the
only writer of the results file: one JSON line per record, flushed and fsynced.

Resume: on start every `measurements*.jsonl[.gz]` of OUT_DIR and of the `--resume-from` directories is
read (a torn last line, from a killed run, is skipped, and fenced off with a newline before anything is
appended). A task is skipped when its `task` record lists the implementations it has now with the same
source hashes; otherwise it is sent with the keys already measured with the current sources, so only the
rest is measured (families gain and fix implementations while the measurement spans sessions). Tasks
without implementations are counted, not recorded. New records go to OUT_DIR/measurements.jsonl only, so
a GPU session can write into an empty $OUT, resume from the gzipped shards committed after earlier
sessions, and hand back just its own rows (the whole measurement is too big for one committed file).
`--retry-failed` measures again the keys whose rows say the child died or timed out; `--retry-incorrect`
those whose rows say the implementation was wrong (after a generator or comparison fix);
`--retime-before-lead` those timed before `cudaperf.timing` ran a lead ahead of each call,
`--retime-before-priority` those timed before the timing thread's priority was raised.

The CPU filter: tasks that `cudaperf dataset validate` did not pass (declaration problems, the degenerate
filter's constant / input-independent / tiny outputs) are not selected when its results lie beside the
measurement (`validate*.jsonl[.gz]` in OUT_DIR or a `--resume-from` directory; the last verdict per task
wins); `dataset stats` leaves them out of every count the same way.

Time budget: dispatching stops when the next task would not fit, the tasks in flight finish, and a child
still running `grace_s` after the budget is killed (its finished configurations are kept, the rest is
measured next time), so a 9-minute device command ends by itself with everything written. Exit codes:
0 all selected tasks measured, 3 stopped by the time budget (run it again), 2 usage errors or no GPU.

Record types in measurements.jsonl (field `record`): `run` (one per invocation), `row` (one per task x
configuration x implementation, see `task_measurement.py`), `task` (a task finished or given up).
Static features go to `features.jsonl` (one line per implementation, `stats.py`): computed by a
background thread of the parent while the GPU children work, or by `--features-only` on any machine.

Not covered: the measurement itself (task_measurement.py), statistics and export (stats.py),
evaluation of model candidates (`cudaperf eval`, sandboxed).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import gzip
import hashlib
import json
import multiprocessing
import os
import platform
import sys
import threading
import time
import traceback
import uuid
import zlib
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from multiprocessing.connection import wait as wait_any
from pathlib import Path
from typing import Any, Self

from cudaperf.datasets.records import GeneratedTask, normalise_code
from cudaperf.types import TaskKind

RESULTS_FILE = "measurements.jsonl"
FEATURES_FILE = "features.jsonl"
ROW_VERSION = 2  # 2: `impl_hash` covers the CUDA source
EXIT_DONE, EXIT_USAGE, EXIT_BUDGET = 0, 2, 3
RETRYABLE = ("worker_died", "timeout")  # row statuses that --retry-failed measures again
INCORRECT = "incorrect"  # the row status that --retry-incorrect measures again
VALIDATE_STEM = "validate"  # validate*.jsonl[.gz]: `dataset validate` results (the CPU filter)
# Before any task of a kind finished in this run, the dispatcher assumes these durations (seconds, one
# worker): PyTorch tasks pay three torch.compile baselines, C tasks the serial reference on the CPU.
DEFAULT_TASK_S = {"pytorch": 25.0, "c": 10.0}
STARTUP_ALLOWANCE_S = 180.0  # a child's import of torch + CUDA init before its first task starts
STARTUP_FAILED = "the measuring process could not start"
Key = tuple[str, str, str]  # (task_id, config, impl_id)


@dataclass(frozen=True)
class MeasureOptions:
    """What `measure` runs and how (the CLI flags map one to one)."""

    out_dir: Path
    seed: int = 0  # generator seed of the task index (the same as `dataset build --seed`)
    kinds: tuple[str, ...] = ("pytorch", "c")  # task kinds to measure
    families: tuple[str, ...] = ()  # families to measure (empty: all)
    limit: int = 0  # at most this many tasks per family (0: all), like `dataset build --limit`
    max_tasks: int = 0  # at most this many tasks measured in this run (0: no limit)
    shard: tuple[int, int] = (0, 1)  # (i, n): the tasks whose id hashes to i mod n (see shard_of)
    time_budget_s: float = 0.0  # stop dispatching so the run ends within this (0: no budget)
    grace_s: float = 20.0  # after the budget, a task still running this long is killed (kept unfinished)
    assumed_task_s: float = 0.0  # a task's duration before one finished in this run (0: DEFAULT_TASK_S)
    assumed_startup_s: float = 30.0  # a new child's start (torch import, CUDA context) before its first task
    task_timeout_s: float = 420.0  # one task longer than this: its child is killed, the culprits fail
    workers: int = 0  # GPUs used, one child each (0: every visible GPU)
    per_gpu: int = 1  # children per GPU; >1 overlaps CPU work and untimed GPU work (GpuLock), never timing
    budget_ms: float = 30.0  # timed budget per callable in each interleaved run
    warmup_ms: float = 10.0  # warm-up budget per callable
    min_reps: int = 5  # samples per callable at least (slow callables get this many)
    max_reps: int = 200  # samples per callable at most
    seeds: tuple[int, ...] = (0, 1)  # correctness seeds per configuration (timing rotates their inputs)
    l2_flush: bool = True  # write 2x L2 before every timed call
    compile_baseline: bool = True  # time torch.compile(reference) on PyTorch tasks
    serial_budget_ms: float = 300.0  # serial-C timing: repeat until this much time is spent (1 to 5 calls)
    retry_failed: bool = False  # measure again keys whose child died or timed out
    retry_incorrect: bool = False  # measure again keys whose implementation was found wrong
    retime_before_lead: bool = False  # measure again keys timed before the lead (`timed_before_the_lead`)
    retime_before_priority: bool = False  # ... and keys timed before the raised priority (`timed_before_priority`)
    # Off by default: on the H200 A/B (benchmarks/results/2026-12-04-session12/call2-repeatability) the
    # two together made two runs of the same 40 tasks agree less (implementations 6.0% vs 2.7%) and slower.
    raise_priority: bool = False  # timing threads at a raised priority (measure_task.raised_priority)
    compile_first_run_exclusive: bool = False  # torch.compile's first run (Triton's autotuning) holds the GPU alone
    resume_from: tuple[Path, ...] = ()  # more directories whose measurements*.jsonl[.gz] count as done
    max_attempts: int = 3  # deaths of one task that blame no key before its remaining keys are given up
    max_tasks_per_child: int = 150  # a child is replaced after this many tasks (bounded memory growth)
    features: bool = True  # compute static features in a background thread of the parent
    runner: str = "gpu"  # "gpu" (task_measurement.py) or "fake" (a CPU test aid, see FakeRunner)
    test_hooks: tuple[tuple[str, str], ...] = ()  # tests only: see FakeRunner; GPU: ("illegal_address_on", id)
    progress: bool = True

    def __post_init__(self) -> None:
        i, n = self.shard
        if not (n >= 1 and 0 <= i < n):
            raise ValueError(f"shard {i}/{n}: need 0 <= i < n (e.g. --shard 0/4)")
        if self.runner not in RUNNERS:
            raise ValueError(f"runner {self.runner!r}: one of {sorted(RUNNERS)}")
        if not self.seeds:
            raise ValueError("seeds: at least one correctness seed")
        if self.per_gpu < 1 or self.max_attempts < 1:
            raise ValueError("per_gpu and max_attempts must be >= 1")

    @property
    def hooks(self) -> dict[str, str]:
        return dict(self.test_hooks)


# --------------------------------------------------------------------------------------------------
# The results file: read (tolerating a torn last line) and append (fsynced)


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
    it). Rows before ROW_VERSION 2 hashed `normalise`d text, which drops the CUDA: see
    dev/migrate_impl_hashes.py."""
    return hashlib.sha256(normalise_code(source).encode()).hexdigest()[:12]


def read_jsonl(path: Path) -> tuple[list[dict[str, Any]], int]:
    """Every parseable line of `path` (plain or .gz; none if missing) and the number of lines that were
    not (a line cut by a kill mid-write: its key was not finished, it is measured again)."""
    if not path.exists():
        return [], 0
    rows, torn = [], 0
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        try:
            for raw in fh:
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


# --------------------------------------------------------------------------------------------------
# Selecting tasks


def round_robin(tasks: list[GeneratedTask]) -> list[GeneratedTask]:
    """Families interleaved (one task of each in turn), so any prefix of a run is a balanced sample."""
    by_family: dict[str, deque[GeneratedTask]] = {}
    for t in tasks:
        by_family.setdefault(t.family, deque()).append(t)
    out: list[GeneratedTask] = []
    while by_family:
        for name in list(by_family):
            out.append(by_family[name].popleft())
            if not by_family[name]:
                del by_family[name]
    return out


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


def select_tasks(options: MeasureOptions) -> list[GeneratedTask]:
    """The tasks of this shard, in the stable order every run and shard agrees on."""
    from cudaperf.datasets import registry

    kinds = [TaskKind(k) for k in options.kinds]
    tasks = registry.build_index(options.seed, kinds, list(options.families) or None)
    if options.limit:
        seen: Counter = Counter()
        kept = []
        for t in tasks:
            if seen[t.family] < options.limit:
                seen[t.family] += 1
                kept.append(t)
        tasks = kept
    i, n = options.shard
    return [t for t in round_robin(tasks) if shard_of(t.task_id, n) == i]


def shard_of(task_id: str, n: int) -> int:
    """A stable shard from the task id's hash: positions mod n would follow the family interleave (with
    two families and two shards, one shard would get every PyTorch task)."""
    return int.from_bytes(hashlib.sha256(task_id.encode()).digest()[:8], "little") % n


# --------------------------------------------------------------------------------------------------
# What happens when a child dies


@dataclass
class Job:
    """One task sent to a child, across its attempts."""

    task: GeneratedTask
    skip: set[Key]
    hashes: dict[str, str] = field(default_factory=dict)  # impl id -> impl_hash of its source
    attempt: int = 0
    planned: list[Key] | None = None  # the keys the child said it would measure (None: died before)
    received: set[Key] = field(default_factory=set)
    deaths: Counter = field(default_factory=Counter)  # (phase, config, culprits) -> deaths there
    fruitless: int = 0  # deaths that failed no key (capped by max_attempts)
    no_compile_baseline: bool = False  # a child died inside torch.compile: the retry goes without it
    failed_rows: int = 0
    t_start: float = 0.0

    def remaining(self) -> set[Key]:
        return set(self.planned or ()) - self.received - self.skip


@dataclass(frozen=True)
class Phase:
    """What a child was doing: a phase name, the configuration, the implementations in flight."""

    name: str = "setup"
    config: str | None = None
    culprits: tuple[str, ...] = ()


@dataclass(frozen=True)
class DeathVerdict:
    failed: frozenset[Key]  # keys to record as failed now
    retry: bool  # send the task again (without the failed keys)


def after_death(job: Job, phase: Phase, *, timed_out: bool, max_attempts: int) -> DeathVerdict:
    """Decide who is to blame when a child died (or was killed for a timeout) in `phase`.

    One implementation in flight (its build or correctness check): it fails at once. Several (the
    interleaved timing of a configuration): the first death there is retried, the second fails them all;
    a timeout fails them at once (a hang repeats, and costs the timeout each time). None in flight (the
    reference, setup): the configuration's (or the task's) remaining keys fail on the second death there.
    A death that fails some key always makes progress; deaths that fail nothing are capped: after
    `max_attempts` of those, everything left fails."""
    job.attempt += 1
    signature = (phase.name, phase.config, phase.culprits)
    job.deaths[signature] += 1
    remaining = job.remaining()
    in_scope = {k for k in remaining if phase.config is None or k[1] == phase.config}
    blamed = {k for k in in_scope if k[2] in phase.culprits} if phase.culprits else in_scope
    decisive = len(phase.culprits) == 1 or timed_out or job.deaths[signature] > 1
    failed = blamed if decisive else set()
    if not failed:
        job.fruitless += 1
        if job.fruitless >= max_attempts:
            failed = remaining
    retry = job.fruitless < max_attempts and (bool(remaining - failed) or job.planned is None)
    return DeathVerdict(frozenset(failed), retry)


def failed_row(task: GeneratedTask, key: Key, status: str, message: str, hash_: str | None = None) -> dict[str, Any]:
    return {"record": "row", "v": ROW_VERSION, "task_id": task.task_id, "kind": task.kind.value,
            "family": task.family, "config": key[1], "impl_id": key[2], "strategy": key[2].rsplit("/", 1)[-1],
            "status": status, "correct": False, "message": message[:800], "source_hash": hash_, "t": time.time()}


# --------------------------------------------------------------------------------------------------
# Children


class ContextLost(Exception):
    """Raised by a runner when the CUDA context is unusable (a sticky error): the child reports the
    culprit and exits, and the parent starts a new one."""


class GpuLock:
    """Orders the GPU phases of the children sharing one GPU (per_gpu > 1): a readers-writer lock made of
    flocks. Untimed GPU work (references, correctness checks, torch.compile's warm-up) holds it `shared`,
    so children overlap it with each other; a timed run holds it `exclusive`, so it never shares the GPU
    with another child's work. Both first pass a turnstile flock, which an exclusive taker keeps while it
    waits for the shared holders to leave: flock alone lets new shared holders in ahead of a waiting
    exclusive one, and a stream of checks could then keep timing waiting for ever. Holders must finish
    their GPU work (synchronise) before leaving. The kernel releases flocks when their holder dies, so a
    crashed child cannot leave the others waiting. `wait_s` adds up the time spent waiting, per mode."""

    def __init__(self, path: Path | None):
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644) if path else None
        self._turnstile = os.open(f"{path}.turnstile", os.O_RDWR | os.O_CREAT, 0o644) if path else None
        self.wait_s = {"shared": 0.0, "exclusive": 0.0}

    def shared(self) -> contextlib.AbstractContextManager[None]:
        return self._held(fcntl.LOCK_SH, "shared")

    def exclusive(self) -> contextlib.AbstractContextManager[None]:
        return self._held(fcntl.LOCK_EX, "exclusive")

    @contextlib.contextmanager
    def _held(self, operation: int, mode: str):
        if self._fd is None or self._turnstile is None:
            yield
            return
        start = time.perf_counter()
        fcntl.flock(self._turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(self._fd, operation)
        finally:
            fcntl.flock(self._turnstile, fcntl.LOCK_UN)
        self.wait_s[mode] += time.perf_counter() - start
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)


class FakeRunner:
    """A CPU test aid with the GPU runner's protocol: plans the real keys, emits rows with made-up
    times. Hooks (`test_hooks`): `crash_on` an impl id (the child exits hard when checking it),
    `hang_on` an impl id (it sleeps forever), `sleep_s` per task, `crash_in_compile` (exits in the
    compile-baseline phase unless the job says to skip it). Never used for reported numbers."""

    def __init__(self, options: MeasureOptions, lock: GpuLock):
        self.hooks = options.hooks

    def info(self) -> dict[str, Any]:
        return {"device": "fake", "host": platform.node()}

    def measure(self, job: dict[str, Any], emit: Callable[..., None]) -> dict[str, Any]:
        from cudaperf.datasets import registry

        task = task_from_job(job)
        skip = {tuple(k) for k in job["skip"]}
        keys = [(task.task_id, c, i.impl_id) for c in ("small", "large", "odd")
                for i in registry.implementations(task)]
        emit("plan", task.task_id, [k for k in keys if k not in skip])
        time.sleep(float(self.hooks.get("sleep_s", 0)))
        if self.hooks.get("crash_in_compile") and not job.get("no_compile_baseline"):
            emit("phase", task.task_id, "compile_baseline", "small", [])
            os._exit(70)
        for key in keys:
            if key in skip:
                continue
            emit("phase", task.task_id, "check", key[1], [key[2]])
            if key[2] == self.hooks.get("crash_on"):
                os._exit(70)  # like a segfault: no goodbye
            if key[2] == self.hooks.get("hang_on"):
                time.sleep(3600)
            ms = 0.01 * (1 + sum(map(ord, key[2])) % 97)
            source = next(i.source for i in registry.implementations(task) if i.impl_id == key[2])
            emit("row", {**failed_row(task, key, "ok", "", impl_hash(source)), "correct": True, "median_ms": ms,
                         "iqr_ms": ms / 20})
        return {"status": "ok"}


RUNNERS: dict[str, str] = {"gpu": "cudaperf.datasets.measure.task_measurement:GpuRunner",
                           "fake": "cudaperf.datasets.measure.runner:FakeRunner"}


def task_to_job(task: GeneratedTask, skip: Iterable[Key], no_compile_baseline: bool = False) -> dict[str, Any]:
    return {"task_id": task.task_id, "kind": task.kind.value, "family": task.family, "variant": task.variant,
            "text": task.text, "skip": sorted(skip), "no_compile_baseline": no_compile_baseline}


def task_from_job(job: dict[str, Any]) -> GeneratedTask:
    return GeneratedTask(job["task_id"], TaskKind(job["kind"]), job["family"], job["variant"], job["text"], "")


def _load_runner(options: MeasureOptions, lock: GpuLock) -> Any:
    import importlib

    module, _, name = RUNNERS[options.runner].partition(":")
    return getattr(importlib.import_module(module), name)(options, lock)


def child_main(conn: Any, options: MeasureOptions, gpu: str | None, lock_path: str | None, threads: int) -> None:
    """A child: pin its GPU and size inductor's compile pool (before torch loads), build the runner, then
    measure tasks as they come."""
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(threads))  # the host's cores, shared
    emit = conn.send
    try:
        runner = _load_runner(options, GpuLock(Path(lock_path) if lock_path else None))
        emit(("ready", runner.info()))
    except Exception as exc:  # noqa: BLE001 - a child that cannot start says why, then exits
        emit(("startup_failed", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-1500:]}"))
        return
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message[0] == "stop":
            return
        job = message[1]
        emit(("start", job["task_id"]))
        try:
            info = runner.measure(job, lambda *m: emit(m))
        except ContextLost as fatal:
            emit(("fatal", job["task_id"], str(fatal)[:2000]))
            conn.close()
            os._exit(71)  # the CUDA context is gone; the parent starts a new child
        except Exception as exc:  # noqa: BLE001 - a harness bug in one task must not stop the others
            info = {"status": "harness_error", "message": f"{type(exc).__name__}: {exc}\n"
                                                         f"{traceback.format_exc()[-1500:]}"}
        emit(("done", job["task_id"], info))


# --------------------------------------------------------------------------------------------------
# The parent: a pool of children, one job each


@dataclass
class _Worker:
    slot: int
    gpu: str | None
    lock_path: str | None
    process: Any = None
    conn: Any = None
    job: Job | None = None
    phase: Phase = field(default_factory=Phase)
    info: dict[str, Any] = field(default_factory=dict)
    tasks_done: int = 0
    started_at: float = 0.0  # when the job was sent
    task_started_at: float | None = None  # when the child began it
    fatal: str = ""
    timed_out: bool = False
    budget_killed: bool = False

    @property
    def busy(self) -> bool:
        return self.job is not None


@dataclass
class RunSummary:
    """What one `measure` invocation did."""

    selected: int
    already_done: int
    finished: int = 0
    failed_tasks: int = 0
    rows: int = 0
    failed_rows: int = 0
    stopped_by_budget: bool = False
    left: int = 0
    elapsed_s: float = 0.0
    torn_lines: int = 0
    no_impls: int = 0  # selected tasks whose family has no implementations yet (not measured, not recorded)
    filtered: int = 0  # tasks of the shard that the CPU filter left out (validate*.jsonl[.gz])
    error: str = ""  # why the run stopped early (children could not start)

    @property
    def exit_code(self) -> int:
        if self.error:
            return EXIT_USAGE
        return EXIT_BUDGET if self.stopped_by_budget and self.left else EXIT_DONE


class Pool:
    """Children, the job queue, the results writer, and the rules for deaths, timeouts and the budget."""

    def __init__(self, options: MeasureOptions, writer: ResultsWriter, run_id: str, gpus: list[str | None],
                 on_task: Callable[[GeneratedTask], None] | None = None):
        self.options, self.writer, self.run_id = options, writer, run_id
        self.ctx = multiprocessing.get_context("spawn")  # fork would copy a CUDA context: unusable
        lock_dir = options.out_dir / ".locks"
        self.workers = []
        for gpu_pos, gpu in enumerate(gpus):
            lock = str(lock_dir / f"gpu{gpu_pos}.lock") if options.per_gpu > 1 else None
            for _ in range(options.per_gpu):
                self.workers.append(_Worker(len(self.workers), gpu, lock))
        if options.per_gpu > 1:
            lock_dir.mkdir(parents=True, exist_ok=True)
        self.queue: deque[Job] = deque()
        self.durations: dict[str, list[float]] = {}
        self.on_task = on_task
        self.summary: RunSummary | None = None
        self.stopping = False
        self.unfinished = 0  # tasks killed at the end of the time budget (measured next time)
        self.startup_failures = 0
        self.error = ""

    # -- children ---------------------------------------------------------------------------------
    def _spawn(self, w: _Worker) -> None:
        parent_conn, child_conn = self.ctx.Pipe()
        threads = max(1, (os.cpu_count() or 1) // max(1, len(self.workers)))
        w.process = self.ctx.Process(target=child_main, args=(child_conn, self.options, w.gpu, w.lock_path, threads),
                                     daemon=True, name=f"cudaperf-measure-{w.slot}")
        w.process.start()
        child_conn.close()
        w.conn, w.info, w.tasks_done, w.fatal = parent_conn, {}, 0, ""

    def _retire(self, w: _Worker) -> None:
        with contextlib.suppress(OSError, BrokenPipeError):
            w.conn.send(("stop",))
        w.process.join(timeout=30)
        if w.process.is_alive():
            w.process.kill()
            w.process.join()
        w.conn.close()
        w.process = w.conn = None

    def _kill(self, w: _Worker) -> None:
        if w.process is not None and w.process.is_alive():
            w.process.kill()  # SIGKILL: the child may be stuck in a kernel or a driver call
        if w.process is not None:
            w.process.join(timeout=30)

    # -- dispatch ---------------------------------------------------------------------------------
    def expected_s(self, job: Job) -> float:
        """A task's likely duration: the 90th percentile of this run's recent tasks of its kind, +20%."""
        seen = sorted(self.durations.get(job.task.kind.value, [])[-30:])
        assumed = self.options.assumed_task_s or DEFAULT_TASK_S[job.task.kind.value]
        return (seen[int(0.9 * (len(seen) - 1))] if seen else assumed) * 1.2

    def _dispatch(self, deadline: float) -> None:
        for w in self.workers:
            if w.busy or not self.queue or self.stopping:
                continue
            if w.process is not None and not w.process.is_alive():  # died while idle
                self._forget(w)
            job = self.queue[0]
            startup = 0.0 if w.process is not None else self.options.assumed_startup_s
            if time.time() + startup + self.expected_s(job) > deadline:
                self.stopping = True  # the next task would not fit: finish what is in flight
                return
            self.queue.popleft()
            if w.process is None:
                self._spawn(w)
            w.job, w.phase, w.started_at, w.task_started_at = job, Phase(), time.time(), None
            w.timed_out = w.budget_killed = False
            if not job.t_start:
                job.t_start = time.time()
            with contextlib.suppress(OSError):  # a child dying right now is seen by its sentinel
                w.conn.send(("task", task_to_job(job.task, job.skip, job.no_compile_baseline)))

    def _forget(self, w: _Worker) -> None:
        with contextlib.suppress(OSError):
            w.conn.close()
        w.process.join(timeout=5)
        w.process = w.conn = None

    # -- messages ---------------------------------------------------------------------------------
    def _handle(self, w: _Worker, message: tuple) -> None:
        kind = message[0]
        if kind == "ready":
            w.info = message[1]
            self.startup_failures = 0
        elif kind == "start":
            w.task_started_at = time.time()
        elif kind == "plan" and w.job:
            w.job.planned = [tuple(k) for k in message[2]]
        elif kind == "phase":
            w.phase = Phase(message[2], message[3], tuple(message[4]))
        elif kind == "row" and w.job:
            self._write_row(w, message[1])
        elif kind == "fatal":
            w.fatal = message[2]
        elif kind == "startup_failed":
            w.fatal = f"{STARTUP_FAILED}: {message[1]}"
        elif kind == "done" and w.job:
            self._finish(w, message[2])

    def _write_row(self, w: _Worker, row: dict[str, Any]) -> None:
        row = {**row, "run": self.run_id, "worker": w.slot, "device": w.info.get("device")}
        self.writer.append(row)
        assert w.job is not None
        w.job.received.add((row["task_id"], row["config"], row["impl_id"]))
        self.summary.rows += 1
        self.summary.failed_rows += row.get("status") != "ok"

    def _finish(self, w: _Worker, info: dict[str, Any]) -> None:
        job = w.job
        assert job is not None
        status = info.get("status", "ok")
        if status == "ok" and job.failed_rows:
            status = "partial"  # some implementations were blamed for a dead child
        self._task_record(job, status, info.get("message", ""), w, info)
        w.job = None
        w.tasks_done += 1
        if w.tasks_done >= self.options.max_tasks_per_child:
            self._retire(w)

    def _task_record(self, job: Job, status: str, message: str, w: _Worker | None,
                     info: dict[str, Any] | None = None) -> None:
        now = time.time()
        elapsed = now - job.t_start if job.t_start else 0.0
        if w is not None and status in ("ok", "partial"):  # a failure's time says little about the next task
            self.durations.setdefault(job.task.kind.value, []).append(elapsed)
        self.writer.append({"record": "task", "v": ROW_VERSION, "task_id": job.task.task_id,
                            "kind": job.task.kind.value, "family": job.task.family, "status": status,
                            "message": message[:2000], "attempts": job.attempt + 1, "t_start": job.t_start,
                            "t_end": now, "elapsed_s": elapsed, "rows": len(job.received),
                            "failed_rows": job.failed_rows, "run": self.run_id, "impls": job.hashes,
                            "worker": None if w is None else w.slot,
                            "device": None if w is None else w.info.get("device"),
                            "durations_s": (info or {}).get("durations_s", {})})
        self.summary.finished += 1
        self.summary.failed_tasks += status != "ok"
        if self.on_task:
            self.on_task(job.task)

    # -- deaths, timeouts, the budget -------------------------------------------------------------
    def _drain(self, w: _Worker) -> None:
        with contextlib.suppress(EOFError, OSError):
            while w.conn.poll(0):
                self._handle(w, w.conn.recv())

    def _on_death(self, w: _Worker) -> None:
        self._drain(w)
        self._kill(w)
        code = w.process.exitcode if w.process is not None else None
        job, phase = w.job, w.phase
        w.process = w.conn = None  # a new child is spawned at the next dispatch
        w.job = None
        if job is None or w.budget_killed:
            self.unfinished += job is not None
            return  # an idle child exited, or the budget ended the run: the keys stay unfinished
        if not w.info:  # it never became ready: not the task's fault
            self._startup_failed(job, w.fatal or f"{STARTUP_FAILED} (exit code {code})")
            return
        what = f"during {phase.name}" + (f" of {', '.join(phase.culprits)}" if phase.culprits else "") + (
            f" on config {phase.config}" if phase.config else "")
        if w.timed_out:
            status, reason = "timeout", f"killed after {self.options.task_timeout_s:.0f} s {what}"
        else:
            status = "worker_died"
            reason = f"the measuring process died (exit code {code}) {what}" + (f": {w.fatal}" if w.fatal else "")
        job.no_compile_baseline |= phase.name == "compile_baseline"  # the baseline, not an implementation
        verdict = after_death(job, phase, timed_out=w.timed_out, max_attempts=self.options.max_attempts)
        for key in sorted(verdict.failed):
            self.writer.append({**failed_row(job.task, key, status, reason, job.hashes.get(key[2])),
                                "run": self.run_id})
            job.received.add(key)
            job.failed_rows += 1
            self.summary.rows += 1
            self.summary.failed_rows += 1
        if verdict.retry:
            job.skip |= job.received
            self.queue.appendleft(job)
        else:
            self._task_record(job, "failed", reason, w)

    def _startup_failed(self, job: Job, why: str) -> None:
        """Not the task's fault: it goes back to the queue; three failed starts in a row end the run."""
        self.queue.appendleft(job)
        self.startup_failures += 1
        if self.startup_failures >= 3:
            self.stopping = True
            self.error = why
            print(f"cudaperf dataset measure: stopping, children cannot start: {why}", file=sys.stderr)

    def _check_clocks(self, deadline: float) -> None:
        now = time.time()
        for w in self.workers:
            if not w.busy or w.process is None:
                continue
            began = w.task_started_at or (w.started_at + STARTUP_ALLOWANCE_S)
            if now > deadline + self.options.grace_s:
                w.budget_killed = self.stopping = True
                self._kill(w)
            elif now - began > self.options.task_timeout_s:
                w.timed_out = True
                self._kill(w)

    # -- the loop ---------------------------------------------------------------------------------
    def run(self, jobs: list[Job], summary: RunSummary, tick: Callable[[], None] = lambda: None) -> None:
        self.summary = summary
        self.queue.extend(jobs)
        start = time.time()
        budget = self.options.time_budget_s
        deadline = start + budget if budget > 0 else float("inf")
        try:
            while True:
                self._dispatch(deadline)
                busy = [w for w in self.workers if w.busy]
                if not busy:
                    break
                owner: dict[Any, tuple[_Worker, Any]] = {}
                for w in busy:
                    owner[w.conn] = owner[w.process.sentinel] = (w, w.process)
                for ready in wait_any(list(owner), timeout=1.0):
                    w, process = owner[ready]
                    if w.process is not process or not w.busy:
                        continue  # already handled in this round (a death seen on both handles)
                    if ready is w.conn:
                        try:
                            self._handle(w, w.conn.recv())
                        except (EOFError, OSError):
                            self._on_death(w)
                    else:
                        self._on_death(w)
                for w in busy:
                    if w.busy and w.process is not None and not w.process.is_alive():
                        self._on_death(w)
                self._check_clocks(deadline)
                tick()
        finally:
            for w in self.workers:
                if w.process is not None:
                    if w.busy:
                        self._kill(w)
                    else:
                        self._retire(w)
        summary.stopped_by_budget = self.stopping or bool(self.queue)
        summary.left = len(self.queue) + self.unfinished
        summary.error = self.error
        summary.elapsed_s = time.time() - start


# --------------------------------------------------------------------------------------------------
# Entry points


def visible_gpus(wanted: int) -> list[str | None]:
    """GPU ids for the children (CUDA_VISIBLE_DEVICES values); empty when no GPU is visible."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        ids = [x.strip() for x in env.split(",") if x.strip() and x.strip() != "-1"]
    else:
        try:
            import torch

            ids = [str(i) for i in range(torch.cuda.device_count())]
        except Exception:  # noqa: BLE001 - no torch or no driver: no GPU
            ids = []
    return ids[:wanted] if wanted else ids


def measure(options: MeasureOptions, gpus: list[str | None] | None = None) -> RunSummary:
    """Measure the selected tasks not measured yet; see the module docstring."""
    progress = _read_progress(options)
    jobs, summary = plan_jobs(options, progress)
    gpus = gpus if gpus is not None else ([None] * max(options.workers, 1) if options.runner == "fake"
                                          else visible_gpus(options.workers))
    run_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
    writer = ResultsWriter(options.out_dir / RESULTS_FILE)
    writer.append({"record": "run", "v": ROW_VERSION, "run": run_id, "t": time.time(), "host": platform.node(),
                   "argv": sys.argv[1:], "options": _plain_options(options), "workers": len(gpus) * options.per_gpu,
                   "selected": summary.selected, "todo": len(jobs)})
    features = FeatureThread(options) if options.features and options.runner == "gpu" else None
    try:
        pool = Pool(options, writer, run_id, gpus, on_task=features.submit if features else None)
        with _ProgressView(options.progress, summary.selected, summary.already_done, summary) as view:
            pool.run(jobs, summary, view.tick)
    finally:
        if features:
            features.close(wait_s=10.0)
        writer.close()
    return summary


def plan_jobs(options: MeasureOptions, progress: Progress) -> tuple[list[Job], RunSummary]:
    """Jobs for the selected tasks that have implementations and are not finished with their current
    sources; each skips the keys already measured with the same source."""
    from cudaperf.datasets import registry

    keys_by_task: dict[str, list[Key]] = {}
    for key in progress.done_keys:
        keys_by_task.setdefault(key[0], []).append(key)
    flagged = flagged_tasks([options.out_dir, *options.resume_from])
    jobs, selected, no_impls, filtered = [], 0, 0, 0
    for task in select_tasks(options):
        if task.task_id in flagged:
            filtered += 1  # the CPU filter left it out (see the module docstring)
            continue
        hashes = {i.impl_id: impl_hash(i.source) for i in registry.implementations(task)}
        if not hashes:
            no_impls += 1  # nothing to measure (yet): not recorded, so a later run picks it up
            continue
        selected += 1
        if not progress.is_finished(task.task_id, hashes):
            jobs.append(Job(task, progress.done_for(task.task_id, hashes, keys_by_task), hashes))
    done = selected - len(jobs)
    if options.max_tasks:
        jobs = jobs[: options.max_tasks]
    return jobs, RunSummary(selected, done, torn_lines=progress.torn_lines, no_impls=no_impls, filtered=filtered)


def _read_progress(options: MeasureOptions) -> Progress:
    return read_progress([options.out_dir, *options.resume_from], options.retry_failed, options.retry_incorrect,
                         options.retime_before_lead, options.retime_before_priority)


def _plain_options(options: MeasureOptions) -> dict[str, Any]:
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(options).items()}


class FeatureThread:
    """Static features of each measured task's implementations, computed on the parent's idle CPU while
    the children use the GPU, appended to features.jsonl (skipping implementations already there)."""

    def __init__(self, options: MeasureOptions):
        from concurrent.futures import ThreadPoolExecutor

        from cudaperf.datasets.measure import stats as measure_stats

        self.path = options.out_dir / FEATURES_FILE
        self.done = measure_stats.feature_ids([options.out_dir, *options.resume_from])
        self.writer = ResultsWriter(self.path)
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cudaperf-features")

    def submit(self, task: GeneratedTask) -> None:
        self.pool.submit(self._one, task)

    def _one(self, task: GeneratedTask) -> None:
        from cudaperf.datasets import registry
        from cudaperf.datasets.measure import stats as measure_stats

        for impl in registry.implementations(task):
            if not measure_stats.has_current_features(self.done, impl):
                row = measure_stats.static_feature_row(impl)
                if row is not None:  # analysis unavailable here: left for `--features-only` elsewhere
                    self.writer.append(row)
                    self.done[impl.impl_id] = row["source_hash"]

    def close(self, wait_s: float) -> None:
        self.pool.shutdown(wait=wait_s > 0, cancel_futures=True)
        self.writer.close()


class _ProgressView:
    """A rich progress bar with tasks/min on a terminal; a plain line every 30 s otherwise (device logs)."""

    def __init__(self, enabled: bool, total: int, done: int, summary: RunSummary):
        self.enabled, self.total, self.done, self.summary = enabled, total, done, summary
        self.start = self.last_line = time.time()
        self.bar = self.progress = None

    def __enter__(self) -> Self:
        from rich.console import Console

        if self.enabled and Console().is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                     TextColumn("{task.fields[rate]}"), TimeRemainingColumn())
            self.progress.__enter__()
            self.bar = self.progress.add_task("measure", total=self.total, completed=self.done, rate="")
        return self

    def rate(self) -> float:
        minutes = max(time.time() - self.start, 1e-6) / 60
        return self.summary.finished / minutes

    def tick(self) -> None:
        if self.progress is not None:
            self.progress.update(self.bar, completed=self.done + self.summary.finished,
                                 rate=f"{self.rate():.1f} tasks/min, {self.summary.failed_rows} failed rows")
        elif self.enabled and time.time() - self.last_line > 30:
            self.last_line = time.time()
            print(f"[{time.strftime('%H:%M:%S')}] {self.done + self.summary.finished}/{self.total} tasks, "
                  f"{self.rate():.1f} tasks/min, {self.summary.rows} rows ({self.summary.failed_rows} failed)",
                  flush=True)

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.tick()
            self.progress.__exit__(None, None, None)


def features_only(options: MeasureOptions) -> int:
    """Static features of the selected tasks' implementations, on the CPU (no GPU), resumable."""
    from cudaperf.datasets import registry
    from cudaperf.datasets.measure import stats as measure_stats

    path = options.out_dir / FEATURES_FILE
    done = measure_stats.feature_ids([options.out_dir, *options.resume_from])
    tasks = select_tasks(options)
    deadline = time.time() + options.time_budget_s if options.time_budget_s > 0 else float("inf")
    writer = ResultsWriter(path)
    written = 0
    try:
        for task in tasks:
            if time.time() > deadline:
                print(f"stopped at the time budget after {written} implementations", file=sys.stderr)
                return EXIT_BUDGET
            for impl in registry.implementations(task):
                if measure_stats.has_current_features(done, impl):
                    continue
                row = measure_stats.static_feature_row(impl)
                if row is not None:
                    writer.append(row)
                    done[impl.impl_id] = row["source_hash"]
                    written += 1
    finally:
        writer.close()
    print(f"static features: {written} new implementations in {path}")
    return EXIT_DONE


# --------------------------------------------------------------------------------------------------
# CLI


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of `cudaperf dataset measure` (the parser already has `--out`)."""
    p.add_argument("out_dir", nargs="?", type=Path, help="results directory (overrides --out)")
    p.add_argument("--seed", type=int, default=0, help="generator seed of the task index (as for build)")
    p.add_argument("--kinds", default="pytorch,c", help="comma list of task kinds: pytorch,c")
    p.add_argument("--family", "--families", dest="families", default="", help="comma list of families")
    p.add_argument("--limit", type=int, default=0, help="at most this many tasks per family (0: all)")
    p.add_argument("--max-tasks", type=int, default=0, help="at most this many tasks in this run (0: all)")
    p.add_argument("--shard", default="0/1", help="i/n: measure the tasks whose id hashes to i mod n")
    p.add_argument("--time-budget-s", type=float, default=0.0, help="end the run within this many seconds")
    p.add_argument("--task-timeout-s", type=float, default=420.0, help="kill a task running longer")
    p.add_argument("--workers", type=int, default=0, help="GPUs to use, one child each (0: all visible)")
    p.add_argument("--per-gpu", type=int, default=1,
                   help="children per GPU (timed runs alone on the GPU; checks and compiles overlap)")
    p.add_argument("--budget-ms", type=float, default=30.0, help="timed budget per callable and config")
    p.add_argument("--warmup-ms", type=float, default=10.0, help="warm-up budget per callable and config")
    p.add_argument("--min-reps", type=int, default=5, help="timed samples per callable at least")
    p.add_argument("--max-reps", type=int, default=200, help="timed samples per callable at most")
    p.add_argument("--no-l2-flush", action="store_true", help="do not flush L2 before timed calls")
    p.add_argument("--no-compile-baseline", action="store_true", help="skip torch.compile baselines")
    p.add_argument("--no-features", action="store_true", help="no static features during the run")
    p.add_argument("--features-only", action="store_true", help="only static features (CPU, no GPU)")
    p.add_argument("--retry-failed", action="store_true", help="measure keys whose child died again")
    p.add_argument("--retry-incorrect", action="store_true",
                   help="measure keys found incorrect again (after a generator or comparison fix)")
    p.add_argument("--retime-before-lead", action="store_true",
                   help="measure again keys timed before the timing lead existed (their spread is ~3x wider)")
    p.add_argument("--retime-before-priority", action="store_true",
                   help="measure again keys timed before the timing thread's priority was raised")
    p.add_argument("--raised-priority", action="store_true",
                   help="time at a raised thread priority (nice -15; an A/B found no gain on the H200)")
    p.add_argument("--exclusive-compile-first-run", action="store_true",
                   help="torch.compile's first run holds the GPU lock alone (an A/B found no gain on the H200)")
    p.add_argument("--resume-from", default="", help="comma list of directories whose measurements*.jsonl[.gz] "
                   "are already done (committed shards, earlier calls on this machine)")
    p.add_argument("--dry-run", action="store_true", help="print what would be measured, measure nothing")
    p.add_argument("--no-progress", action="store_true", help="no progress bar or progress lines")


def options_from_args(args: argparse.Namespace) -> MeasureOptions:
    shard = tuple(int(x) for x in str(args.shard).split("/"))
    if len(shard) != 2:
        raise ValueError(f"--shard {args.shard}: expected i/n, e.g. 0/4")
    return MeasureOptions(
        out_dir=args.out_dir or args.out, seed=args.seed,
        kinds=tuple(k.strip() for k in args.kinds.split(",") if k.strip()),
        families=tuple(f.strip() for f in args.families.split(",") if f.strip()), limit=args.limit,
        max_tasks=args.max_tasks, shard=(shard[0], shard[1]), time_budget_s=args.time_budget_s,
        task_timeout_s=args.task_timeout_s, workers=args.workers, per_gpu=args.per_gpu,
        budget_ms=args.budget_ms, warmup_ms=args.warmup_ms, min_reps=args.min_reps, max_reps=args.max_reps,
        l2_flush=not args.no_l2_flush, compile_baseline=not args.no_compile_baseline,
        features=not args.no_features, retry_failed=args.retry_failed, retry_incorrect=args.retry_incorrect,
        retime_before_lead=args.retime_before_lead, retime_before_priority=args.retime_before_priority,
        raise_priority=args.raised_priority, compile_first_run_exclusive=args.exclusive_compile_first_run,
        progress=not args.no_progress,
        resume_from=tuple(Path(d.strip()) for d in args.resume_from.split(",") if d.strip()))


def run_cli(args: argparse.Namespace) -> int:
    try:
        options = options_from_args(args)
    except ValueError as exc:
        print(f"cudaperf dataset measure: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.features_only:
        return features_only(options)
    if args.dry_run:
        return _dry_run(options)
    gpus = visible_gpus(options.workers)
    if not gpus:
        print("cudaperf dataset measure needs a GPU: no CUDA device is visible here (run it on the GPU "
              "machine; `--features-only` and `cudaperf dataset stats` work anywhere)", file=sys.stderr)
        return EXIT_USAGE
    summary = measure(options, gpus)
    _print_summary(options, summary)
    _write_summary_files(options)
    return summary.exit_code


def _dry_run(options: MeasureOptions) -> int:
    progress = _read_progress(options)
    jobs, summary = plan_jobs(options, progress)
    by_kind = Counter(j.task.kind.value for j in jobs)
    print(f"shard {options.shard[0]}/{options.shard[1]}: {summary.selected} tasks with implementations selected "
          f"({summary.no_impls} without, {summary.filtered} left out by the CPU filter), {len(jobs)} to measure "
          f"{dict(by_kind)}, {progress.rows} rows already measured{f', {progress.torn_lines} torn lines' if progress.torn_lines else ''}")
    return EXIT_DONE


def _print_summary(options: MeasureOptions, s: RunSummary) -> None:
    rate = s.finished / max(s.elapsed_s / 60, 1e-9)
    end = (f"stopped by the time budget with {s.left} tasks left: run the same command again"
           if s.exit_code == EXIT_BUDGET else "all selected tasks measured")
    print(f"measured {s.finished} tasks ({s.failed_tasks} failed or partial), {s.rows} rows "
          f"({s.failed_rows} failed) in {s.elapsed_s:.0f} s = {rate:.1f} tasks/min; {s.already_done} of "
          f"{s.selected} were done before ({s.no_impls} more have no implementations yet, {s.filtered} left out "
          f"by the CPU filter); {end}. "
          f"Results: {options.out_dir / RESULTS_FILE}")


def _write_summary_files(options: MeasureOptions) -> None:
    """The summary of everything measured so far (this run and the resumed ones) under OUT_DIR/summary."""
    from cudaperf.datasets.measure import stats as measure_stats

    for line in measure_stats.export_summary(options.out_dir / "summary", options.out_dir, *options.resume_from):
        print(line)
