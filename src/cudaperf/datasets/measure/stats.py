"""Reading a measurement (`measurements.jsonl`, less the tasks the CPU filter flags), its statistics, and
the export: the full table as Parquet (static features joined) and a summary small enough to commit
(per-task ratios as CSV, the statistics as markdown).

Statistics (`MeasureStats`): tasks per family, configurations and implementations per task, the share
of implementations verified (correct on every configuration of their task), tasks with >= 3 verified
implementations, the distribution (quantiles, histogram) of each task's ratio between its slowest and
fastest correct implementation, throughput (tasks per minute) from the records' timestamps, and each
family's headroom over its baseline (`headroom.py`).

The per-task ratio: on each configuration, the slowest correct implementation's median time over the
fastest's; a task's ratio is the geometric mean over its configurations with >= 2 timed correct
implementations (one number per task, not dominated by one size). Per-configuration ratios are in the CSV.

`dataset stats` and the export count only rows of the sources the generators produce now
(`load_current`): a row measured from an older source of its implementation is stale, left out and
counted, until `measure` (which skips only keys of the same source) measures it again.

Not covered: measuring (runner.py, task_measurement.py), computing static features (features.py), the
dataset's own counts (`dataset stats` without a measurement, `cudaperf.commands.dataset_cmd`).
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import itertools
import json
import math
import statistics
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudaperf.datasets.jsonl import read_records, result_files
from cudaperf.datasets.measure.features import load_features
from cudaperf.datasets.measure.headroom import family_headroom, headroom_markdown
from cudaperf.datasets.measure.results import (
    flagged_tasks,
    impl_hash,
    timed_before_priority,
    timed_before_the_lead,
)
from cudaperf.stats import geomean

QUANTILES = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)
RATIO_BINS = (1.0, 1.25, 1.5, 2.0, 4.0, 8.0, 16.0, 64.0)  # histogram edges; the last bin is open
NOISY_SPREAD = 0.5  # a timed row whose IQR exceeds half its median is counted as noisy in the lead line
CONFIG_ORDER = ("small", "large", "odd")


@dataclass(frozen=True)
class Measurements:
    """A results file read back: the last row per key, the last task record per task, the run records.
    Tasks the CPU filter left out (`measure.flagged_tasks`) are not among them: `filtered` names every
    flagged task, `filtered_measured` counts those that had been measured before the filter knew them."""

    rows: tuple[dict[str, Any], ...]
    tasks: dict[str, dict[str, Any]]
    runs: tuple[dict[str, Any], ...]
    torn_lines: int = 0
    filtered: dict[str, tuple[str, ...]] = field(default_factory=dict)
    filtered_measured: int = 0
    stale_rows: int = 0  # rows of a source the generators no longer produce (`without_stale`)
    stale_impls: int = 0


def _of_selected(m: Measurements) -> str:
    """' of N selected' from the latest run record that says how many tasks it selected, else ''."""
    selected = [r["selected"] for r in sorted(m.runs, key=lambda r: r.get("t", 0)) if r.get("selected")]
    return f" of {selected[-1]} selected" if selected else ""


def load(*directories: Path) -> Measurements:
    """Every `measurements*.jsonl[.gz]` of the directories (shards of several sessions) as one, less the
    tasks that a validate*.jsonl[.gz] beside them flags."""
    records, torn = read_records(directories)
    flagged = flagged_tasks(directories)
    rows: dict[tuple, dict[str, Any]] = {}
    tasks: dict[str, dict[str, Any]] = {}
    runs = []
    for r in records:
        kind = r.get("record")
        if kind == "row":
            rows[(r["task_id"], r["config"], r["impl_id"])] = r
        elif kind == "task":
            tasks[r["task_id"]] = r
        elif kind == "run":
            runs.append(r)
    measured = {key[0] for key in rows} | set(tasks)
    kept = tuple(r for r in rows.values() if r["task_id"] not in flagged)
    return Measurements(kept, {t: r for t, r in tasks.items() if t not in flagged}, tuple(runs), torn,
                        flagged, len(measured & set(flagged)))


def without_stale(m: Measurements, current_hashes: Mapping[str, str]) -> Measurements:
    """`m` less its rows of a source other than the one generated now (`current_hashes`: impl id -> hash,
    `current_source_hashes`), counted: a generator fix makes its old rows stale until `measure` measures
    them again."""
    def current(r: dict[str, Any]) -> bool:
        return current_hashes.get(r["impl_id"]) == r.get("source_hash")

    stale = [r for r in m.rows if not current(r)]
    if not stale:
        return m
    return dataclasses.replace(m, rows=tuple(filter(current, m.rows)), stale_rows=len(stale),
                               stale_impls=len({r["impl_id"] for r in stale}))


def current_source_hashes(m: Measurements) -> dict[str, str]:
    """impl id -> the hash of the source its generator produces now, for every task of the seeds the
    measurement's runs used (seed 0 without a run record)."""
    return {impl_id: h for seed in _run_seeds(m) for impl_id, h in _index_hashes(seed).items()}


def _run_seeds(m: Measurements) -> list[int]:
    """The dataset seeds the measurement's runs used, sorted (seed 0 without a run record)."""
    return sorted({int((r.get("options") or {}).get("seed", 0)) for r in m.runs} or {0})


@functools.lru_cache(maxsize=4)
def _index_hashes(seed: int) -> dict[str, str]:
    """Every implementation hash of the index of `seed`: about 3 s on 2 cores, so computed once per
    process (the generators are pure functions of the seed; callers get copies). Fresh families' too
    (`registry.fresh_families()`): their rows are current, not stale, wherever they are read."""
    from cudaperf.datasets import registry

    return {impl.impl_id: impl_hash(impl.source) for task in registry.build_index(seed, fresh=True)
            for impl in registry.implementations(task)}


def _task_splits(m: Measurements) -> dict[str, str]:
    """task id -> split, for the tasks of the seeds the measurement's runs used (as
    `current_source_hashes`)."""
    return {task_id: split for seed in _run_seeds(m) for task_id, split in _index_splits(seed).items()}


@functools.lru_cache(maxsize=4)
def _index_splits(seed: int) -> dict[str, str]:
    """task id -> split of the index of `seed` (computed once per process, as `_index_hashes`)."""
    from cudaperf.datasets import registry, splits

    return splits.split_tasks(registry.build_index(seed, fresh=True), seed)


def load_current(*directories: Path) -> Measurements:
    """`load`, less the rows of sources the generators no longer produce."""
    m = load(*directories)
    return without_stale(m, current_source_hashes(m))


# --------------------------------------------------------------------------------------------------
# Per task


@dataclass(frozen=True)
class TaskSummary:
    """One task's measurement in a line: counts, ratios and the best implementation's speedups."""

    task_id: str
    kind: str
    family: str
    configs: int
    impls: int
    verified_impls: int
    ratio: float | None  # geometric mean over configurations of slowest / fastest correct
    config_ratios: dict[str, float] = field(default_factory=dict)
    best_strategy: dict[str, str] = field(default_factory=dict)  # config -> fastest correct strategy
    speedups: dict[str, float | None] = field(default_factory=dict)  # baseline -> geomean best speedup


def _timed_ok(row: dict[str, Any]) -> bool:
    return row.get("status") == "ok" and bool(row.get("median_ms"))



def summarize_task(rows: list[dict[str, Any]]) -> TaskSummary:
    first = rows[0]
    configs = sorted({r["config"] for r in rows}, key=_config_key)
    impls = sorted({r["impl_id"] for r in rows})
    by_impl: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_impl.setdefault(r["impl_id"], []).append(r)
    verified = sum(1 for rs in by_impl.values()
                   if len(rs) == len(configs) and all(r.get("correct") for r in rs))
    ratios, best, speedups = {}, {}, {b: [] for b in ("eager", "compile", "naive", "serial_c")}
    for c in configs:
        ok = [r for r in rows if r["config"] == c and _timed_ok(r)]
        if not ok:
            continue
        fastest = min(ok, key=lambda r: r["median_ms"])
        best[c] = fastest.get("strategy", fastest["impl_id"].rsplit("/", 1)[-1])
        if len(ok) >= 2:
            ratios[c] = max(r["median_ms"] for r in ok) / fastest["median_ms"]
        for b, found in speedups.items():
            base = fastest.get(f"{b}_ms")
            if base:
                found.append(base / fastest["median_ms"])
    return TaskSummary(first["task_id"], first.get("kind", ""), first.get("family", ""), len(configs),
                       len(impls),
                       verified, geomean(ratios.values()), ratios, best,
                       {b: geomean(v) for b, v in speedups.items()})


def _config_key(name: str) -> tuple[int, str]:
    return (CONFIG_ORDER.index(name) if name in CONFIG_ORDER else len(CONFIG_ORDER), name)


def task_summaries(m: Measurements) -> list[TaskSummary]:
    by_task: dict[str, list[dict[str, Any]]] = {}
    for r in m.rows:
        by_task.setdefault(r["task_id"], []).append(r)
    return [summarize_task(rs) for _, rs in sorted(by_task.items())]


# --------------------------------------------------------------------------------------------------
# Distributions and throughput


def quantiles(values: list[float], qs: tuple[float, ...] = QUANTILES) -> dict[float, float]:
    """Linear-interpolated quantiles (numpy's default method), {} for no values."""
    if not values:
        return {}
    ordered = sorted(values)
    out = {}
    for q in qs:
        pos = q * (len(ordered) - 1)
        lo, hi = math.floor(pos), math.ceil(pos)
        out[q] = ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)
    return out


def histogram(values: list[float], edges: tuple[float, ...] = RATIO_BINS) -> list[tuple[str, int]]:
    """Counts per bin [edges[i], edges[i+1]), the last bin open-ended; values below edges[0] go first."""
    labels = [f"[{a:g}, {b:g})" for a, b in itertools.pairwise(edges)] + [f">= {edges[-1]:g}"]
    counts = [0] * len(labels)
    for v in values:
        i = sum(1 for e in edges[1:] if v >= e)
        counts[i] += 1
    return list(zip(labels, counts, strict=True))


@dataclass(frozen=True)
class Throughput:
    tasks: int  # measured tasks (with implementations) that have a task record
    wall_minutes: float  # sum over runs of (last task end - run start)
    tasks_per_minute: float | None
    per_worker_task_s: dict[str, float]  # kind -> mean seconds one child spent per task


def throughput(m: Measurements) -> Throughput:
    starts = {r["run"]: r["t"] for r in m.runs}
    measured = [t for t in m.tasks.values() if t.get("t_end")]
    ends: dict[str, float] = {}
    counts: Counter = Counter()
    for t in measured:
        run = t.get("run")
        ends[run] = max(ends.get(run, 0.0), t["t_end"])
        counts[run] += 1
    spans = [ends[r] - starts.get(r, min(t["t_start"] for t in measured if t.get("run") == r)) for r in ends]
    minutes = sum(max(s, 0.0) for s in spans) / 60
    per_kind: dict[str, list[float]] = {}
    for t in measured:
        per_kind.setdefault(t.get("kind", "?"), []).append(float(t.get("elapsed_s") or 0.0))
    return Throughput(len(measured), minutes, len(measured) / minutes if minutes > 0 else None,
                      {k: statistics.fmean(v) for k, v in sorted(per_kind.items())})


# --------------------------------------------------------------------------------------------------
# The statistics as lines


@dataclass(frozen=True)
class FamilyStats:
    kind: str
    family: str
    tasks: int
    configs_per_task: float
    impls_per_task: float
    verified_share: float | None
    tasks_3_verified: int
    ratio_median: float | None
    ratio_p90: float | None
    failed_rows: int


def family_stats(m: Measurements, summaries: list[TaskSummary]) -> list[FamilyStats]:
    failed = Counter(r.get("family") for r in m.rows if r.get("status") != "ok")
    groups: dict[tuple[str, str], list[TaskSummary]] = {}
    for s in summaries:
        groups.setdefault((s.kind, s.family), []).append(s)
    out = []
    for (kind, fam), ss in sorted(groups.items()):
        impls = sum(s.impls for s in ss)
        ratios = [s.ratio for s in ss if s.ratio]
        q = quantiles(ratios, (0.5, 0.9))
        out.append(FamilyStats(kind, fam, len(ss), statistics.fmean(s.configs for s in ss),
                               impls / len(ss), sum(s.verified_impls for s in ss) / impls if impls else None,
                               sum(s.verified_impls >= 3 for s in ss), q.get(0.5), q.get(0.9), failed[fam]))
    return out


def stats_markdown(m: Measurements) -> str:
    """Every statistic of the module docstring as a markdown document."""
    summaries = task_summaries(m)
    parts = [f"# Dataset measurement ({time.strftime('%Y-%m-%d')}, {_devices(m)})", "",
             *_overview(m, summaries), "",
             "## Slowest / fastest correct implementation per task (geometric mean over configurations)", "",
             *_ratio_section([s.ratio for s in summaries if s.ratio]), "", "## Per family", "",
             *_family_table(family_stats(m, summaries)), "",
             "## Headroom: the fastest correct implementation over the baseline (C: the naive CUDA port; "
             "PyTorch: eager)", "", *headroom_markdown(family_headroom(summaries, _task_splits(m)))]
    return "\n".join(parts) + "\n"


def _overview(m: Measurements, summaries: list[TaskSummary]) -> list[str]:
    impls = sum(s.impls for s in summaries)
    verified = sum(s.verified_impls for s in summaries)
    status = Counter(r.get("status") for r in m.rows)
    tp = throughput(m)
    rate = f"{tp.tasks_per_minute:.1f} tasks/min" if tp.tasks_per_minute else "n/a"
    per_child = ", ".join(f"{k} {v:.1f} s" for k, v in tp.per_worker_task_s.items()) or "n/a"
    share = f" = {verified / impls:.1%}" if impls else ""
    three = sum(s.verified_impls >= 3 for s in summaries)
    return [
        f"- tasks measured: {len(summaries)} {dict(Counter(s.kind for s in summaries))}{_of_selected(m)}",
        *_filter_line(m),
        f"- rows (task x configuration x implementation): {len(m.rows)}; status {dict(status.most_common())}",
        f"- implementations verified on every configuration: {verified}/{impls}{share}",
        f"- tasks with >= 3 verified implementations: {three}/{len(summaries)}",
        f"- configurations per task: {_spread([s.configs for s in summaries])}",
        f"- implementations per task: {_spread([s.impls for s in summaries])}",
        f"- timed rows by the lead before each call (cudaperf.timing): {_leads(m.rows)}",
        _priority_line(m.rows),
        (f"- throughput: {tp.tasks} tasks in {tp.wall_minutes:.1f} wall minutes = {rate}; "
        f"time per task in one measuring process: {per_child}"),
    ]


def _filter_line(m: Measurements) -> list[str]:
    lines = []
    if m.filtered:
        why = Counter(f for flags in m.filtered.values() for f in flags)
        lines.append(f"- left out by the CPU filter (validate*.jsonl): {len(m.filtered)} tasks "
                     f"{dict(why.most_common())}; {m.filtered_measured} of them had been "
                     "measured and are not "
                     "counted here")
    if m.stale_rows:
        lines.append(f"- left out as measured from an older source: {m.stale_rows} rows of {m.stale_impls} "
                     "implementations whose generator has changed since (`measure` measures them again)")
    return lines


def _leads(rows: list[dict[str, Any]]) -> str:
    """Timed rows per lead (`lead_us`, `lead_kind`) with their median spread (IQR / median); rows with a
    lead but no kind were timed after torch's fill (before cudaperf.lead), rows with neither after a 2x L2
    write only (~28 µs on the H200)."""
    groups: dict[tuple, list[float]] = {}
    for r in rows:
        if r.get("median_ms") is None:
            continue
        key = (1, 0.0, "") if timed_before_the_lead(r) else (0, r["lead_us"], r.get("lead_kind") or "memset")
        spread = (r.get("iqr_ms") or 0.0) / r["median_ms"] if r["median_ms"] else 0.0
        groups.setdefault(key, []).append(spread)
    parts = []
    for (before, lead, kind), spreads in sorted(groups.items()):
        label = "2x L2 write only (before the lead)" if before else f"{lead:g} µs {kind}"
        parts.append(f"{label}: {len(spreads)} (IQR/median p50 {statistics.median(spreads):.1%}, "
                     f"{sum(x > NOISY_SPREAD for x in spreads)} above {NOISY_SPREAD:.0%})")
    return "; ".join(parts) or "n/a"


def _priority_line(rows: tuple[dict[str, Any], ...]) -> str:
    """How many timed rows ran their timing at a raised priority (`task_measurement.raised_priority`, an
    opt-in protocol since the H200 A/B found no gain from it)."""
    timed = [r for r in rows if r.get("median_ms") is not None]
    raised = sum(not timed_before_priority(r) for r in timed)
    return f"- timed at a raised thread priority (`timing_nice`): {raised} of {len(timed)} rows"


def _ratio_section(ratios: list[float]) -> list[str]:
    if not ratios:
        return ["(no task has two timed correct implementations yet)"]
    q = quantiles(ratios)
    return ["| quantile | " + " | ".join(f"p{round(k * 100)}" for k in q) + " |",
            "|---|" + "---|" * len(q),
            "| ratio | " + " | ".join(f"{v:.2f}" for v in q.values()) + " |", "",
            "| ratio bin | tasks |", "|---|---|", *[f"| {label} | {n} |" for label, n in histogram(ratios)]]


def _family_table(fams: list[FamilyStats]) -> list[str]:
    lines = [("| kind | family | tasks | configs/task | impls/task | verified | >=3 verified | ratio "
              "p50 | ratio p90 "
             "| failed rows |"), "|---|---|---|---|---|---|---|---|---|---|"]
    for f in fams:
        lines.append(f"| {f.kind} | {f.family} | {f.tasks} | {f.configs_per_task:.1f} "
                     f"| {f.impls_per_task:.1f} | "
                     f"{_pct(f.verified_share)} | {f.tasks_3_verified} | {_num(f.ratio_median)} | "
                     f"{_num(f.ratio_p90)} | {f.failed_rows} |")
    return lines


def _devices(m: Measurements) -> str:
    names = sorted({str(r.get("device")) for r in m.rows if r.get("device")})
    return ", ".join(names) or "no device recorded"


def _spread(values: list[int]) -> str:
    if not values:
        return "n/a"
    return f"min {min(values)}, mean {statistics.fmean(values):.2f}, max {max(values)}"


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1%}"


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}"


# --------------------------------------------------------------------------------------------------
# Export


CSV_COLUMNS = ("task_id", "kind", "family", "configs", "impls", "verified_impls", "ratio",
               "ratio_small", "ratio_large", "ratio_odd", "best_small", "best_large", "best_odd",
               "speedup_vs_eager", "speedup_vs_compile", "speedup_vs_naive", "speedup_vs_serial_c")


def ratios_csv(summaries: list[TaskSummary]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for s in summaries:
        w.writerow([s.task_id, s.kind, s.family, s.configs, s.impls, s.verified_impls, _fmt(s.ratio),
                    *[_fmt(s.config_ratios.get(c)) for c in CONFIG_ORDER],
                    *[s.best_strategy.get(c, "") for c in CONFIG_ORDER],
                    *[_fmt(s.speedups.get(b)) for b in ("eager", "compile", "naive", "serial_c")]])
    return buf.getvalue()


def _fmt(v: float | None) -> str:
    return "" if v is None else f"{v:.4g}"


def table_rows(m: Measurements, features: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The measured table: one row per (task, configuration, implementation), static features joined
    (prefix `f_`), nested values as JSON text so every column has one type."""
    names = sorted({k for f in features.values() for k in f})
    out = []
    for r in m.rows:
        row = {k: v for k, v in r.items() if k not in ("record", "baseline_notes")}
        row["baseline_notes"] = json.dumps(r.get("baseline_notes") or {}, sort_keys=True)
        row["tags"] = list(r.get("tags") or [])
        row["timing_flags"] = list(r.get("timing_flags") or [])
        f = features.get(r["impl_id"], {})
        row.update({f"f_{n}": f.get(n) for n in names})
        out.append(row)
    columns = sorted({k for row in out for k in row})
    return [{c: _scalar(row.get(c)) for c in columns} for row in out]


def _scalar(v: Any) -> Any:
    return float(v) if isinstance(v, int) and not isinstance(v, bool) and abs(v) > 2**53 else v


def measurement_files(directory: Path) -> list[Path]:
    return result_files(directory, "measurements")


def export_summary(dest: Path, *sources: Path) -> list[str]:
    """stats.md, task_ratios.csv and (with pyarrow) measurements.parquet under `dest`, from every shard of
    the `sources` directories; lines saying what was written."""
    from cudaperf.datasets.export import write_atomic, write_parquet

    m = load_current(*sources)
    if not m.rows and not m.tasks:
        return [f"no measurements (measurements*.jsonl[.gz]) in {', '.join(map(str, sources))}"]
    summaries = task_summaries(m)
    write_atomic(dest / "stats.md", stats_markdown(m))
    write_atomic(dest / "task_ratios.csv", ratios_csv(summaries))
    lines = [f"wrote {dest / 'stats.md'} and {dest / 'task_ratios.csv'} ({len(summaries)} tasks)"]
    why = write_parquet(dest / "measurements.parquet", _typed(table_rows(m, load_features(*sources))))
    lines.append(why or f"wrote {dest / 'measurements.parquet'} ({len(m.rows)} rows)")
    return lines


def _typed(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Numbers in a column that mixes ints and floats become floats (one Parquet type per column)."""
    floats = {k for row in rows for k, v in row.items() if isinstance(v, float)}
    return [{k: (float(v) if k in floats and isinstance(v, int) and not isinstance(v, bool) else v)
             for k, v in row.items()} for row in rows]
