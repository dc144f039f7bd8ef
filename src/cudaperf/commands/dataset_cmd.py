"""`cudaperf dataset build | validate | stats | measure`: generate the task dataset, check it on the CPU,
count it, measure it on the GPU.

  build     write task files (C tasks with their naive CUDA port beside them), implementations, manifest,
            prompts.jsonl (+ Parquet when pyarrow is there); rerunning skips files that already hold the
            same text. The degenerate filter runs first (its
            verdicts go to validate.jsonl, reused by a rerun or `validate`) and flagged tasks are not
            written: the manifest names them under `left_out` (`--no-filter` keeps them)
  validate  per task: declaration checks, the degenerate filter (reference on the CPU, 2 seeds),
            optionally the rounding-sensitivity check (--rounding, filters/rounding.py) and NVRTC compiles of
            its implementations; results are appended to validate.jsonl one
            task at a time, and a rerun continues where the last one stopped
  stats     counts per family and kind, configurations per task, implementations per task, splits,
            and what validate found; with a measurement (measurements.jsonl), its statistics
            (stats.py), each family's headroom over its baseline among them (headroom.py); `--export DIR`
            also writes stats.md, task_ratios.csv, measurements.parquet
  measure   verify and time every implementation on the GPU, resumably (`cudaperf.datasets.measure`: this
            module maps its flags to `MeasureOptions` and prints the run's summary)

Not covered: the work itself (`cudaperf.datasets`), evaluation of model candidates (`cudaperf eval`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from cudaperf.types import TaskKind


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    for name, text in (("build", "generate tasks and implementations"),
                       ("validate", "check tasks on the CPU"),
                       ("stats", "counts and validation results"), ("measure", "time implementations (GPU)")):
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument("--out", type=Path, default=Path("dataset"), help="dataset directory "
                                                                         "(default: ./dataset)")
        if name == "build":
            p.add_argument("--seed", type=int, default=0, help="generator seed (same seed, same tasks)")
            p.add_argument("--kinds", default="pytorch,c", help="comma list of task kinds: pytorch,c")
            p.add_argument("--families", default="", help="comma list of families (default: all)")
            p.add_argument("--limit", type=int, default=0, help="at most this many tasks per family (0: all)")
            p.add_argument("--no-impls", action="store_true", help="write tasks only")
            p.add_argument("--no-filter", action="store_true",
                           help="keep the tasks the degenerate filter flags "
                                "(default: run it, leave them out)")
        if name == "validate":
            p.add_argument("--sample", type=int, default=0, help="check every N-th task only (0: all)")
            p.add_argument("--compile", action="store_true", help="also NVRTC-compile every implementation")
            p.add_argument("--no-degenerate", action="store_true", help="skip the reference runs")
            p.add_argument("--rounding", action="store_true",
                           help="also the rounding-sensitivity check (filters/rounding.py: every "
                                "configuration, slow)")
        if name == "measure":
            _add_measure_arguments(p)
        if name == "stats":
            p.add_argument("out_dir", nargs="?", type=Path, help="dataset or measurement directory "
                                                                 "(overrides --out)")
            p.add_argument("--export", type=Path, default=None,
                           help="also write stats.md, task_ratios.csv and measurements.parquet here")


def run(args: argparse.Namespace) -> int:
    action = getattr(args, "action", None)
    if action == "measure":
        return measure(args)
    if action == "build":
        return build(args)
    if action == "validate":
        return validate(args)
    if action == "stats":
        return stats(args)
    print("usage: cudaperf dataset {build,validate,stats,measure} --out DIR", file=sys.stderr)
    return 2


def _progress() -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeRemainingColumn(),
                    transient=False)


def _select(tasks: list, limit: int) -> list:
    if not limit:
        return tasks
    seen: Counter = Counter()
    out = []
    for t in tasks:
        if seen[t.family] < limit:
            seen[t.family] += 1
            out.append(t)
    return out


def build(args: argparse.Namespace) -> int:
    from cudaperf.datasets import export, registry, splits

    kinds = [TaskKind(k.strip()) for k in args.kinds.split(",") if k.strip()]
    families = [f.strip() for f in args.families.split(",") if f.strip()] or None
    tasks = _select(registry.build_index(args.seed, kinds, families), args.limit)
    split_of = splits.split_tasks(tasks, args.seed)  # before the filter: a task's split never depends on it
    root: Path = args.out
    left_out = {} if args.no_filter else _filter(root, tasks)
    tasks = [t for t in tasks if t.task_id not in left_out]
    rows, impl_rows, entries = [], [], []
    with _progress() as progress:
        bar = progress.add_task("build", total=len(tasks))
        for task in tasks:
            made = registry.implementations(task)
            export.write_task(root, task, made)
            impls = [] if args.no_impls else made
            for impl in impls:
                export.write_atomic(export.impl_path(root, impl), impl.source)
                impl_rows.append({"impl_id": impl.impl_id, "task_id": task.task_id, "strategy": impl.strategy,
                                  "tags": list(impl.tags), "baseline": impl.baseline, "source": impl.source})
            rows.append(export.prompt_row(task, split_of[task.task_id], [i.strategy for i in impls]))
            entries.append({"task_id": task.task_id, "kind": task.kind.value, "family": task.family,
                            "group": registry.group_of(task), "split": split_of[task.task_id],
                            "variant": task.variant, "strategies": [i.strategy for i in impls]})
            progress.advance(bar)
    export.write_manifest(root, {"seed": args.seed, "kinds": [k.value for k in kinds], "tasks": entries,
                                 "left_out": left_out})
    export.write_jsonl(root / "prompts.jsonl", rows)
    for name, table in (("tasks.parquet", rows), ("impls.parquet", impl_rows)):
        why = export.write_parquet(root / name, table)
        if why:
            print(why, file=sys.stderr)
            break
    filtered = f"; {len(left_out)} left out by the degenerate filter (validate.jsonl)" if left_out else ""
    print(f"wrote {len(tasks)} tasks and {len(impl_rows)} implementations to {root}{filtered}")
    return 0


def _filter(root: Path, tasks: list) -> dict[str, list[str]]:
    """The tasks that fail the CPU checks (declarations, degenerate outputs): id -> flags. Verdicts already
    in root/validate.jsonl are reused; the others are computed and appended there."""
    from cudaperf.datasets.measure.results import failed_checks

    rows, _ = _check_tasks(root / "validate.jsonl", tasks, compile_impls=False, degenerate=True,
                           label="filter")
    return {t.task_id: list(failed_checks(rows[t.task_id])) for t in tasks if not rows[t.task_id]["ok"]}


def _validated(path: Path) -> dict[str, dict[str, Any]]:
    """task id -> its last verdict in a validate.jsonl."""
    if not path.exists():
        return {}
    done = {}
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
            done[row["task_id"]] = row
        except (json.JSONDecodeError, KeyError, TypeError):
            continue  # a torn last line from an interrupted run: that task is checked again
    return done


def _covers(row: dict[str, Any] | None, compile_impls: bool, degenerate: bool,
            rounding: bool = False) -> bool:
    return (row is not None and (not compile_impls or "compiled" in row)
            and (not degenerate or "flags" in row) and (not rounding or "rounding_flags" in row))


def _check_tasks(out_path: Path, tasks: list, *, compile_impls: bool, degenerate: bool,
                 label: str, rounding: bool = False) -> tuple[dict[str, dict[str, Any]], int]:
    """Verdicts for `tasks` and how many were computed now: those in `out_path` that cover the checks asked
    for are kept, the rest are computed and appended one line per task (the last line of a task wins)."""
    done = _validated(out_path)
    todo = [t for t in tasks if not _covers(done.get(t.task_id), compile_impls, degenerate, rounding)]
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with _progress() as progress, out_path.open("a") as fh:
        bar = progress.add_task(label, total=len(tasks), completed=len(tasks) - len(todo))
        for task in todo:
            row = validate_task(task, compile_impls, degenerate, rounding)
            fh.write(json.dumps(row, sort_keys=True) + "\n")
            fh.flush()  # one line per task: an interrupted run loses at most the task in flight
            done[task.task_id] = row
            progress.advance(bar)
    return done, len(todo)


def validate_task(task: Any, compile_impls: bool, degenerate: bool, rounding: bool = False) -> dict[str, Any]:
    from cudaperf.datasets import registry
    from cudaperf.datasets.filters import degenerate as degen
    from cudaperf.tasks import ctask

    row: dict[str, Any] = {"task_id": task.task_id, "kind": task.kind.value, "family": task.family}
    if task.kind is TaskKind.C:
        row["problems"] = list(ctask.validate(ctask.from_json(task.text)))
    if degenerate:
        report = degen.check_task(task)
        row["flags"], row["message"] = list(report.flags), report.message
    if rounding:
        from cudaperf.datasets.filters import rounding as conditioning

        verdict = conditioning.check_task(task)
        row["rounding_flags"] = verdict["flags"]
        row["flags"] = [*row.get("flags", []), *verdict["flags"]]
        row["message"] = "; ".join(m for m in (row.get("message"), verdict["message"]) if m)
    if compile_impls:
        checks = {i.strategy: ctask.compile_check(i.source) for i in registry.implementations(task)}
        row["compiled"] = {s: c.status.value for s, c in checks.items()}
        row["compile_logs"] = {s: c.log[-800:] for s, c in checks.items() if not c.ok}
    row["ok"] = not row.get("problems") and not row.get("flags") and all(
        v == "ok" for v in row.get("compiled", {}).values())
    return row


def validate(args: argparse.Namespace) -> int:
    from cudaperf.datasets import export

    root: Path = args.out
    tasks = export.load_tasks(root)
    if not tasks:
        print(f"no tasks under {root}: run `cudaperf dataset build --out {root}` first", file=sys.stderr)
        return 2
    if args.sample:
        tasks = tasks[:: args.sample]
    out_path = root / "validate.jsonl"
    _, new = _check_tasks(out_path, tasks, compile_impls=args.compile, degenerate=not args.no_degenerate,
                          label="validate", rounding=args.rounding)
    print(f"validated {len(tasks)} tasks ({new} new); results in {out_path}")
    return 0


def stats(args: argparse.Namespace) -> int:
    from cudaperf.datasets import export
    from cudaperf.datasets.measure import stats as measure_stats

    root: Path = getattr(args, "out_dir", None) or args.out
    manifest = export.read_manifest(root)
    measured = bool(measure_stats.measurement_files(root))
    if manifest is None and not measured:
        print(f"no manifest under {root}: run `cudaperf dataset build --out {root}` first", file=sys.stderr)
        return 2
    if manifest is not None:
        _manifest_stats(root, manifest)
    if measured:
        print(measure_stats.stats_markdown(measure_stats.load_current(root)))
        if getattr(args, "export", None):
            for line in measure_stats.export_summary(args.export, root):
                print(line)
    return 0


def _manifest_stats(root: Path, manifest: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    entries = manifest["tasks"]
    checked = {}
    if (root / "validate.jsonl").exists():
        for line in (root / "validate.jsonl").read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            checked[row["task_id"]] = row
    table = Table(title=f"dataset {root} (seed {manifest['seed']})")
    for col in ("kind", "family", "split", "tasks", "impls/task", ">=3 impls", "validated", "kept"):
        table.add_column(col, justify="right" if col not in ("kind", "family", "split") else "left")
    fams: dict[tuple[str, str], list] = {}
    for e in entries:
        fams.setdefault((e["kind"], e["family"]), []).append(e)
    for (kind, fam), es in sorted(fams.items()):
        n_impls = [len(e["strategies"]) for e in es]
        rows = [checked[e["task_id"]] for e in es if e["task_id"] in checked]
        table.add_row(kind, fam, es[0]["split"], str(len(es)), f"{sum(n_impls) / len(es):.1f}",
                      str(sum(n >= 3 for n in n_impls)), str(len(rows)), str(sum(r["ok"] for r in rows)))
    Console().print(table)
    for kind in sorted({e["kind"] for e in entries}):
        es = [e for e in entries if e["kind"] == kind]
        flagged = Counter(f for e in es for f in checked.get(e["task_id"], {}).get("flags", []))
        print(f"{kind}: {len(es)} tasks, {sum(len(e['strategies']) >= 3 for e in es)} with >= 3 "
              "implementations, "
              f"splits {dict(Counter(e['split'] for e in es))}, degenerate flags {dict(flagged)}")
    left_out = manifest.get("left_out") or {}
    if left_out:
        why = Counter(f for flags in left_out.values() for f in flags)
        print(f"left out by the degenerate filter at build time: {len(left_out)} "
              f"tasks {dict(why.most_common())}")
    print("configurations per task: 3 (small, large, odd) for every generated task; "
          "speedup spread between implementations: from `cudaperf dataset measure` (GPU), shown "
          "below when measured")


# --------------------------------------------------------------------------------------------------
# measure


def _add_measure_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of `cudaperf dataset measure` (the parser already has `--out`)."""
    p.add_argument("out_dir", nargs="?", type=Path, help="results directory (overrides --out)")
    p.add_argument("--seed", type=int, default=0, help="generator seed of the task index (as for build)")
    p.add_argument("--kinds", default="pytorch,c", help="comma list of task kinds: pytorch,c")
    p.add_argument("--family", "--families", dest="families", default="", help="comma list of families")
    p.add_argument("--limit", type=int, default=0,
                   help="at most this many tasks per family, a stable sample by task-id hash (0: all)")
    p.add_argument("--max-tasks", type=int, default=0, help="at most this many tasks in this run (0: all)")
    p.add_argument("--impls-per-task", type=int, default=0,
                   help="at most this many implementations per task, the baseline one first (0: all); for "
                        "baseline A/B runs, a later full run measures the rest")
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
                   help="torch.compile's first run holds the GPU lock alone (an A/B found no "
                        "gain on the H200)")
    p.add_argument("--resume-from", default="", help="comma list of directories whose "
                                                     "measurements*.jsonl[.gz] "
                   "are already done (committed shards, earlier calls on this machine)")
    p.add_argument("--dry-run", action="store_true", help="print what would be measured, measure nothing")
    p.add_argument("--no-progress", action="store_true", help="no progress bar or progress lines")


def measure_options(args: argparse.Namespace) -> Any:
    """`MeasureOptions` from the flags; ValueError names a bad one."""
    from cudaperf.datasets.measure.options import MeasureOptions

    shard = tuple(int(x) for x in str(args.shard).split("/"))
    if len(shard) != 2:
        raise ValueError(f"--shard {args.shard}: expected i/n, e.g. 0/4")
    return MeasureOptions(
        out_dir=args.out_dir or args.out, seed=args.seed,
        kinds=tuple(k.strip() for k in args.kinds.split(",") if k.strip()),
        families=tuple(f.strip() for f in args.families.split(",") if f.strip()), limit=args.limit,
        max_tasks=args.max_tasks, impls_per_task=args.impls_per_task, shard=(shard[0], shard[1]),
        time_budget_s=args.time_budget_s,
        task_timeout_s=args.task_timeout_s, workers=args.workers, per_gpu=args.per_gpu,
        budget_ms=args.budget_ms, warmup_ms=args.warmup_ms, min_reps=args.min_reps, max_reps=args.max_reps,
        l2_flush=not args.no_l2_flush, compile_baseline=not args.no_compile_baseline,
        features=not args.no_features, retry_failed=args.retry_failed, retry_incorrect=args.retry_incorrect,
        retime_before_lead=args.retime_before_lead, retime_before_priority=args.retime_before_priority,
        raise_priority=args.raised_priority, compile_first_run_exclusive=args.exclusive_compile_first_run,
        progress=not args.no_progress,
        resume_from=tuple(Path(d.strip()) for d in args.resume_from.split(",") if d.strip()))


def measure(args: argparse.Namespace) -> int:
    from cudaperf.datasets.measure import runner
    from cudaperf.datasets.measure.pool import EXIT_USAGE

    try:
        options = measure_options(args)
    except ValueError as exc:
        print(f"cudaperf dataset measure: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.features_only:
        return runner.features_only(options)
    if args.dry_run:
        return _dry_run(options)
    gpus = runner.visible_gpus(options.workers)
    if not gpus:
        print("cudaperf dataset measure needs a GPU: no CUDA device is visible here (run it on the GPU "
              "machine; `--features-only` and `cudaperf dataset stats` work anywhere)", file=sys.stderr)
        return EXIT_USAGE
    try:
        summary = runner.measure(options, gpus)
    except ValueError as exc:
        print(f"cudaperf dataset measure: {exc}", file=sys.stderr)
        return EXIT_USAGE
    _print_summary(options, summary)
    _write_summary_files(options)
    return summary.exit_code


def _dry_run(options: Any) -> int:
    from cudaperf.datasets.measure import runner
    from cudaperf.datasets.measure.pool import EXIT_DONE

    progress = runner.progress_of(options)
    jobs, summary = runner.plan_jobs(options, progress)
    by_kind = Counter(j.task.kind.value for j in jobs)
    torn = f", {progress.torn_lines} torn lines" if progress.torn_lines else ""
    print(f"shard {options.shard[0]}/{options.shard[1]}: {summary.selected} tasks with implementations "
          f"selected ({summary.no_impls} without, {summary.filtered} left out by the CPU filter), "
          f"{len(jobs)} to measure {dict(by_kind)}, {progress.rows} rows already measured{torn}")
    return EXIT_DONE


def _print_summary(options: Any, s: Any) -> None:
    from cudaperf.datasets.measure.pool import EXIT_BUDGET
    from cudaperf.datasets.measure.results import RESULTS_FILE

    rate = s.finished / max(s.elapsed_s / 60, 1e-9)
    end = (f"stopped by the time budget with {s.left} tasks left: run the same command again"
           if s.exit_code == EXIT_BUDGET else "all selected tasks measured")
    print(f"measured {s.finished} tasks ({s.failed_tasks} failed or partial), {s.rows} rows "
          f"({s.failed_rows} failed) in {s.elapsed_s:.0f} s = {rate:.1f} tasks/min; {s.already_done} of "
          f"{s.selected} were done before ({s.no_impls} more have no implementations yet, {s.filtered} left "
          f"out by the CPU filter); {end}. "
          f"Results: {options.out_dir / RESULTS_FILE}")


def _write_summary_files(options: Any) -> None:
    """The summary of everything measured so far (this run and the resumed ones) under OUT_DIR/summary."""
    from cudaperf.datasets.measure import stats as measure_stats

    for line in measure_stats.export_summary(options.out_dir / "summary", options.out_dir,
                                             *options.resume_from):
        print(line)
