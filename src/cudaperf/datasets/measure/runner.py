"""`cudaperf dataset measure OUT_DIR`: verify every implementation of every dataset task on every
configuration on the GPU and time it against the baselines, resumably, one JSONL line per
(task, configuration, implementation) in `OUT_DIR/measurements.jsonl`.

This module decides what to measure and runs it: the tasks of a shard in a stable order (`select_tasks`),
less those finished with their current sources and those the CPU filter flagged (`plan_jobs`), through the
pool of measuring children (pool.py), with the static features computed on the parent's idle CPU.

Resume: on start every `measurements*.jsonl[.gz]` of OUT_DIR and of the `--resume-from` directories is read
(results.py). A task is skipped when its `task` record lists the implementations it has now with the same
source hashes; otherwise it is sent with the keys already measured with the current sources, so only the
rest is measured. Tasks without implementations are counted, not recorded. New records go to
OUT_DIR/measurements.jsonl only, so a GPU session can write into an empty $OUT, resume from the gzipped
shards committed after earlier sessions, and hand back just its own rows (the whole measurement is too big
for one committed file). `--retry-failed` measures again the keys whose rows say the child died or timed
out; `--retry-incorrect` those whose rows say the implementation was wrong (after a generator or
comparison fix); `--retime-before-lead` those timed before `cudaperf.timing` ran a lead ahead of each
call, `--retime-before-priority` those timed before the timing thread's priority was raised.

The CPU filter: tasks that `cudaperf dataset validate` did not pass (declaration problems, the degenerate
filter's constant / input-independent / tiny outputs, the rounding filter) are not selected when its
results lie beside the measurement (`validate*.jsonl[.gz]` in OUT_DIR or a `--resume-from` directory; the
last verdict per task and check wins); `dataset stats` leaves them out of every count the same way.

Exit codes: 0 all selected tasks measured, 3 stopped by the time budget (run it again), 2 usage errors or
no GPU.

Not covered: the process model and the blame rule (pool.py), the measurement of one task
(task_measurement.py), statistics and export (stats.py), the CLI flags (`cudaperf.commands.dataset_cmd`),
evaluation of model candidates (`cudaperf eval`, sandboxed).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import platform
import sys
import time
import uuid
from collections import deque
from pathlib import Path
from typing import Any, Self

from cudaperf.datasets import registry
from cudaperf.datasets.jsonl import ResultsWriter
from cudaperf.datasets.measure.features import FeatureThread, add_missing, feature_ids
from cudaperf.datasets.measure.options import MeasureOptions, measured_implementations
from cudaperf.datasets.measure.pool import EXIT_BUDGET, EXIT_DONE, Job, Pool, RunSummary
from cudaperf.datasets.measure.results import (
    FEATURES_FILE,
    RESULTS_FILE,
    ROW_VERSION,
    Key,
    Progress,
    flagged_tasks,
    impl_hash,
    read_progress,
)
from cudaperf.datasets.records import GeneratedTask
from cudaperf.types import TaskKind


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



def select_tasks(options: MeasureOptions) -> list[GeneratedTask]:
    """The tasks of this shard, in the stable order every run and shard agrees on."""
    kinds = [TaskKind(k) for k in options.kinds]
    tasks = registry.build_index(options.seed, kinds, list(options.families) or None)
    if options.limit:
        tasks = sample_per_family(tasks, options.limit)
    i, n = options.shard
    return [t for t in round_robin(tasks) if shard_of(t.task_id, n) == i]


def sample_per_family(tasks: list[GeneratedTask], limit: int) -> list[GeneratedTask]:
    """At most `limit` tasks of each family, chosen by the task id's hash (a stable sample that spreads
    over the family's variants, where the first tasks in generator order would share their first
    parameters), in the original order."""
    by_family: dict[str, list[GeneratedTask]] = {}
    for t in tasks:
        by_family.setdefault(t.family, []).append(t)
    kept = {t.task_id for fam in by_family.values()
            for t in sorted(fam, key=lambda t: hashlib.sha256(t.task_id.encode()).digest())[:limit]}
    return [t for t in tasks if t.task_id in kept]


def shard_of(task_id: str, n: int) -> int:
    """A stable shard from the task id's hash: positions mod n would follow the family interleave (with
    two families and two shards, one shard would get every PyTorch task)."""
    return int.from_bytes(hashlib.sha256(task_id.encode()).digest()[:8], "little") % n



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
    """Measure the selected tasks not measured yet; see the module docstring. ValueError (before anything
    is written) for a time budget too short for the first task to start."""
    jobs, summary = plan_jobs(options, progress_of(options))
    refuse_a_budget_nothing_fits(options, jobs)
    gpus = visible_gpus(options.workers) if gpus is None else gpus
    run_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
    writer = ResultsWriter(options.out_dir / RESULTS_FILE)
    writer.append({"record": "run", "v": ROW_VERSION, "run": run_id, "t": time.time(),
                   "host": platform.node(),
                   "argv": sys.argv[1:], "options": _plain_options(options),
                   "workers": len(gpus) * options.per_gpu,
                   "selected": summary.selected, "todo": len(jobs)})
    features = FeatureThread([options.out_dir, *options.resume_from]) if options.features else None
    try:
        pool = Pool(options, writer, run_id, gpus, on_task=features.submit if features else None)
        with _ProgressView(options.progress, summary.selected, summary.already_done, summary) as view:
            pool.run(jobs, summary, view.tick)
    finally:
        if features:
            features.close(wait_s=10.0)
        writer.close()
    return summary


def refuse_a_budget_nothing_fits(options: MeasureOptions, jobs: list[Job]) -> None:
    """The dispatcher starts a task only if it is expected to end within the budget, and stops at the first
    that is not: a budget shorter than the first queued task's expectation would measure nothing and say
    "run it again", which would measure nothing again."""
    if not jobs or options.time_budget_s <= 0:
        return
    kind = jobs[0].task.kind.value
    need_s = options.first_task_s(kind)
    if options.time_budget_s < need_s:
        raise ValueError(f"time budget {options.time_budget_s:g} s: no task would start (the first, a "
                         f"{kind} task, is expected to need {need_s:g} s with its measuring process's start "
                         f"of {options.assumed_startup_s:g} s); use --time-budget-s {need_s:g} or more")


def plan_jobs(options: MeasureOptions, progress: Progress) -> tuple[list[Job], RunSummary]:
    """Jobs for the selected tasks that have implementations and are not finished with their current
    sources; each skips the keys already measured with the same source."""
    keys_by_task: dict[str, list[Key]] = {}
    for key in progress.done_keys:
        keys_by_task.setdefault(key[0], []).append(key)
    flagged = flagged_tasks([options.out_dir, *options.resume_from])
    jobs, selected, no_impls, filtered = [], 0, 0, 0
    for task in select_tasks(options):
        if task.task_id in flagged:
            filtered += 1  # the CPU filter left it out (see the module docstring)
            continue
        impls = measured_implementations(registry.implementations(task), options.impls_per_task)
        hashes = {i.impl_id: impl_hash(i.source) for i in impls}
        if not hashes:
            no_impls += 1  # nothing to measure (yet): not recorded, so a later run picks it up
            continue
        selected += 1
        if not progress.is_finished(task.task_id, hashes):
            jobs.append(Job(task, progress.done_for(task.task_id, hashes, keys_by_task), hashes))
    done = selected - len(jobs)
    if options.max_tasks:
        jobs = jobs[: options.max_tasks]
    return jobs, RunSummary(selected, done, torn_lines=progress.torn_lines, no_impls=no_impls,
                            filtered=filtered)


def progress_of(options: MeasureOptions) -> Progress:
    """What the output and `--resume-from` directories already hold, with the options' retry rules."""
    return read_progress([options.out_dir, *options.resume_from], options.retry_failed,
                         options.retry_incorrect,
                         options.retime_before_lead, options.retime_before_priority)


def _plain_options(options: MeasureOptions) -> dict[str, Any]:
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(options).items()}


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
                  f"{self.rate():.1f} tasks/min, {self.summary.rows} rows "
                  f"({self.summary.failed_rows} failed)",
                  flush=True)

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.tick()
            self.progress.__exit__(None, None, None)


def features_only(options: MeasureOptions) -> int:
    """Static features of the selected tasks' implementations, on the CPU (no GPU), resumable."""
    path = options.out_dir / FEATURES_FILE
    done = feature_ids([options.out_dir, *options.resume_from])
    deadline = time.time() + options.time_budget_s if options.time_budget_s > 0 else float("inf")
    writer = ResultsWriter(path)
    written = 0
    try:
        for task in select_tasks(options):
            if time.time() > deadline:
                print(f"stopped at the time budget after {written} implementations", file=sys.stderr)
                return EXIT_BUDGET
            written += add_missing(registry.implementations(task), done, writer)
    finally:
        writer.close()
    print(f"static features: {written} new implementations in {path}")
    return EXIT_DONE
