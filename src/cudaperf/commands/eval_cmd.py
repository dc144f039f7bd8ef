"""`cudaperf eval`: evaluate one solution file, every solution of a directory against a task directory, or
each task's own reference as its candidate (the harness's self-check).

  cudaperf eval TASK.py SOLUTION.py [--out FILE] [--device auto|cuda|cpu|none] [--mode default|rl] [--json]
  cudaperf eval --tasks DIR --solutions DIR --out FILE [--resume] [--max-seconds S] [--mode default|rl]
  cudaperf eval --self-check TASK_OR_DIR... --out FILE [--resume] [--max-seconds S]

`--mode rl` schedules the same checks for a batch (several workers per GPU, baselines timed once per task
and configuration and cached, ranking budgets); what differs exactly: `cudaperf.eval_modes`.

Matching solutions to tasks (directory mode), first rule that applies wins:
  1. a first line `# cudaperf-task: <task_id>`;
  2. any file under a subfolder named `<task_id>/`;
  3. a file named `<task_id>.py` or `<task_id>__<anything>.py`.
Private files (`_x.py`) are ignored; files matching no task are listed and skipped. A solution's id is
`<solutions dir name>/<path inside it, without .py>` (e.g. `fast/vector_add`), so solutions of two
directories evaluated into one results file never collide.

Self-check (`--self-check`): every PyTorch task of the files and directories given is evaluated with a
generated `ModelNew(Model)` as its candidate (`evaluate.self_check_solution`): the source policy, the
torch-op monitor and coverage are off, everything else is a real evaluation (derived configurations,
correctness, timing against eager by default). A harness that works gets CORRECT for every task; any other
outcome is the harness's or the task's limit, classified by its outcome and reason. A task file that
does not load is a HARNESS_ERROR row (stage "load"); a C task is SKIPPED.

Every result that is not correct is printed with its reason, one line each, grouped when several share one
(SKIPPED included). One result never ends a batch: a failure to store or print it becomes its stored
HARNESS_ERROR row (`evaluate.harness_row`).

Exit status: 0 when the one evaluation was CORRECT or SKIPPED (no GPU) or the batch ran, 1 when the
one solution failed (an empty file or one without ModelNew included), 2 for a usage error (missing or
broken files, a results file that needs --resume).

Not covered: the evaluation itself (`cudaperf.evaluate.Evaluator`), summaries (`cudaperf report`).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

TASK_COMMENT = re.compile(r"^#\s*cudaperf-task:\s*(\S+)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("Not covered")[0].split("\n", 1)[1]
    parser.add_argument("task", nargs="?", help="task file (KernelBench format, optional configurations)")
    parser.add_argument("solution", nargs="?", help="solution file defining ModelNew")
    parser.add_argument("--tasks", metavar="DIR", help="directory of task files (batch mode)")
    parser.add_argument("--self-check", nargs="+", metavar="TASK", dest="self_check",
                        help="task files or directories: evaluate each task's own reference as its candidate")
    parser.add_argument("--solutions", metavar="DIR", help="directory of solutions (batch mode)")
    parser.add_argument("--out", metavar="FILE", help="append results to this JSONL file")
    parser.add_argument("--resume", action="store_true",
                        help="batch mode: skip pairs already in --out (SKIPPED/HARNESS_ERROR ones run again)")
    parser.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu", "none"),
                        help="auto: a GPU if present, else build and static checks only")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per configuration for correctness")
    parser.add_argument("--no-timing", action="store_true", help="check correctness only")
    parser.add_argument("--baselines", default=None,
                        help="comma-separated baselines to time (default eager,compile; eager for "
                             "--self-check)")
    parser.add_argument("--timing-budget-ms", type=float, default=None,
                        help="timed budget per function and configuration (default 100)")
    parser.add_argument("--allow-torch-ops", action="store_true",
                        help="let candidates call torch compute ops (pure-PyTorch solutions)")
    parser.add_argument("--max-seconds", type=float, default=None,
                        help="batch and self-check: start no evaluation after this many seconds (the rest "
                             "is left for --resume)")
    parser.add_argument("--mode", default="default", choices=("default", "rl"),
                        help="rl: the same checks scheduled for batches (several workers per GPU, baselines "
                        "timed once per task and configuration, ranking budgets; docs/evaluation.md)")
    parser.add_argument("--json", action="store_true", help="print results as JSON instead of tables")


# -- matching ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Unmatched:
    path: Path
    reason: str


def _declared_task(path: Path) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            first = f.readline()
    except OSError:
        return None
    m = TASK_COMMENT.match(first.strip())
    return m.group(1) if m else None


def task_for_file(rel: Path, declared: str | None, task_ids: set[str]) -> tuple[str | None, str]:
    """The task a solution file (path relative to the solutions dir) belongs to, or None and why."""
    if declared is not None:
        return (declared, "") if declared in task_ids else (None, f"declares unknown task {declared!r}")
    if len(rel.parts) > 1:
        folder = rel.parts[0]
        return (folder, "") if folder in task_ids else (None, f"folder {folder!r} is not a task id")
    stem = rel.stem
    candidates = [t for t in task_ids if stem == t or stem.startswith(t + "__")]
    if candidates:
        return max(candidates, key=len), ""
    return None, "name matches no task (<task_id>.py or <task_id>__<x>.py)"


def solution_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*.py")
                  if p.is_file() and not any(part.startswith("_") for part in p.relative_to(directory).parts))


def match_solutions(tasks, directory: Path):
    """(pairs of (Task, Solution), unmatched files) for every solution file under `directory`."""
    from cudaperf.solutions import load_solution

    by_id = {t.task_id: t for t in tasks}
    pairs, unmatched = [], []
    for path in solution_files(directory):
        rel = path.relative_to(directory)
        task_id, why = task_for_file(rel, _declared_task(path), set(by_id))
        if task_id is None:
            unmatched.append(Unmatched(path, why))
            continue
        pairs.append((by_id[task_id], load_solution(path, solution_id_for(directory, path))))
    return pairs, unmatched


def solution_id_for(directory: Path, path: Path) -> str:
    return (Path(directory.resolve().name) / path.resolve().relative_to(directory.resolve())).with_suffix(
        "").as_posix()


# -- running -----------------------------------------------------------------------------------------


def _config(args: argparse.Namespace):
    from dataclasses import replace

    from cudaperf.anticheat.policy import Policy
    from cudaperf.evaluate import EvalConfig, TimingConfig, self_check_config

    timing = TimingConfig(enabled=not args.no_timing)
    if args.baselines is not None:
        timing = replace(timing, baselines=tuple(b.strip() for b in args.baselines.split(",") if b.strip()))
    elif args.self_check:
        timing = replace(timing, baselines=("eager",))
    if args.timing_budget_ms is not None:
        timing = replace(timing, budget_ms=args.timing_budget_ms,
                         warmup_ms=min(timing.warmup_ms, args.timing_budget_ms / 4))
    if args.self_check:
        return self_check_config(device=args.device, seeds=args.seeds, timing=timing, mode=args.mode)
    policy = Policy(allow_torch_ops=True) if args.allow_torch_ops else None
    return EvalConfig(device=args.device, seeds=args.seeds, timing=timing, policy=policy, mode=args.mode)


def _usage(message: str) -> int:
    print(f"cudaperf eval: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    batch = args.tasks or args.solutions
    if args.self_check:
        if batch or args.task or args.solution:
            return _usage("--self-check takes task files or directories only (no solutions)")
        if not args.out:
            return _usage("--self-check needs --out FILE")
        return run_self_check(args)
    if batch and (args.task or args.solution):
        return _usage("give either TASK SOLUTION or --tasks DIR --solutions DIR, not both")
    if batch:
        if not (args.tasks and args.solutions and args.out):
            return _usage("batch mode needs --tasks DIR, --solutions DIR and --out FILE")
        return run_batch(args)
    if not (args.task and args.solution):
        return _usage("give TASK SOLUTION (files), or --tasks DIR --solutions DIR --out FILE")
    return run_one(args)


def run_one(args: argparse.Namespace) -> int:
    from cudaperf.evaluate import Evaluator, harness_row, store_quietly
    from cudaperf.results import ResultStore
    from cudaperf.solutions import load_solution
    from cudaperf.tasks import TaskError, load_task
    from cudaperf.types import Outcome, to_dict

    try:
        task = load_task(args.task)
    except TaskError as exc:
        return _usage(str(exc))
    sol_path = Path(args.solution)
    if not sol_path.is_file():
        return _usage(f"{sol_path}: no such solution file")
    solution = load_solution(sol_path, solution_id_for(sol_path.parent, sol_path))
    try:
        with Evaluator(_config(args)) as ev:
            result = ev.evaluate(task, solution)
    except RuntimeError as exc:  # e.g. device='cuda' without a GPU
        return _usage(str(exc))
    store = ResultStore(args.out) if args.out else None
    store_quietly(store, result)  # a failure is said on stderr; the result is still printed
    try:
        if args.json:
            print(json.dumps(to_dict(result), indent=2))
        else:
            from rich.console import Console

            console = Console()
            for renderable in result_renderables(result):
                console.print(renderable)
    except Exception as exc:  # noqa: BLE001 - the result is stored; say what it was, plainly
        result = harness_row(result, "printing", exc)
        store_quietly(store, result)
        print(f"{result.task_id} / {result.solution_id}: {result.outcome.value}: {result.message}")
    return 0 if result.outcome in (Outcome.CORRECT, Outcome.SKIPPED) else 1


def run_batch(args: argparse.Namespace) -> int:
    from rich.console import Console

    from cudaperf.results import ResultStore
    from cudaperf.tasks import TaskError, load_tasks

    console = Console(stderr=args.json)
    tasks_dir, sols_dir = Path(args.tasks), Path(args.solutions)
    if not sols_dir.is_dir():
        return _usage(f"{sols_dir}: not a directory")
    errors: list[TaskError] = []
    try:
        tasks = load_tasks(tasks_dir, errors=errors)
    except TaskError as exc:
        return _usage(str(exc))
    for e in errors:
        console.print(f"[yellow]skipped task[/yellow] {e}", highlight=False)
    pairs, unmatched = match_solutions(tasks, sols_dir)
    for u in unmatched:
        console.print(f"[yellow]skipped solution[/yellow] {u.path}: {u.reason}", highlight=False)
    store = ResultStore(args.out)
    if store.load() and not args.resume:
        return _usage(f"{args.out} already holds {len(store.load())} result(s): pass --resume to continue "
                      "it, or choose another file")
    console.print(f"{len(pairs)} pair(s) from {len(tasks)} task(s)", highlight=False)
    return _evaluate_pairs(args, pairs, store, console, [])


def run_self_check(args: argparse.Namespace) -> int:
    """Each task's own reference as its candidate (see the module docstring); results like a batch."""
    from rich.console import Console

    from cudaperf.evaluate import self_check_solution
    from cudaperf.results import ResultStore
    from cudaperf.types import TaskKind

    console = Console(stderr=args.json)
    store = ResultStore(args.out)
    if store.load() and not args.resume:
        return _usage(f"{args.out} already holds {len(store.load())} result(s): pass --resume to continue "
                      "it, or choose another file")
    tasks, early = load_self_check_tasks([Path(p) for p in args.self_check])
    if not tasks and not early:
        return _usage(f"no task files in {', '.join(args.self_check)}")
    pairs = [(t, self_check_solution(t)) for t in tasks if t.kind is TaskKind.PYTORCH]
    early += [_early_row(t.task_id, "SKIPPED", "the self-check covers PyTorch tasks (a C task's candidate "
                         "is CUDA)") for t in tasks if t.kind is not TaskKind.PYTORCH]
    console.print(f"self-check: {len(pairs)} task(s), {len(early)} decided without running", highlight=False)
    return _evaluate_pairs(args, pairs, store, console, early)


def load_self_check_tasks(paths: list[Path]):
    """(tasks, HARNESS_ERROR rows for task files that do not load) from files and directories."""
    from cudaperf.tasks import TaskError, load_task
    from cudaperf.tasks.kernelbench import task_files

    files = [f for p in paths for f in (task_files(p) if p.is_dir() else [p])]
    tasks, rows = [], []
    for f in files:
        try:
            tasks.append(load_task(f))
        except TaskError as exc:
            rows.append(_early_row(f.name.removesuffix(".ctask.json").removesuffix(".py"), "HARNESS_ERROR",
                                   f"the task does not load: {exc.reason}", stage="load"))
    return tasks, rows


def _early_row(task_id: str, outcome: str, message: str, stage: str = "setup"):
    from cudaperf.evaluate import SELF_CHECK_ID
    from cudaperf.types import EvalResult, Outcome

    return EvalResult(task_id=task_id, solution_id=f"{SELF_CHECK_ID}/{task_id}", outcome=Outcome[outcome],
                      stage=stage, message=message)


def _evaluate_pairs(args: argparse.Namespace, pairs: list, store, console, early: list) -> int:
    """Run the pairs into `store` (rows decided without running first), print each result safely, then
    the outcome counts and the reasons."""
    from cudaperf.evaluate import Evaluator, store_quietly

    done = store.done()
    todo = sum((t.task_id, s.solution_id) not in done for t, s in pairs)
    console.print(f"{len(pairs) - todo} already done, {todo} to evaluate", highlight=False)
    results = []
    for row in early:
        store_quietly(store, row)
        results.append(_show(row, args, store))
    try:
        with Evaluator(_config(args)) as ev:
            for result in ev.evaluate_many(pairs, store=store, progress=not args.json,
                                           deadline_s=args.max_seconds):
                results.append(_show(result, args, store))
    except RuntimeError as exc:
        return _usage(str(exc))
    if len(results) - len(early) < todo:
        left = todo - len(results) + len(early)
        console.print(f"stopped at --max-seconds: {left} pair(s) left for --resume", highlight=False)
    _print_summary(console, results)
    console.print(f"results in {args.out}; summary: cudaperf report {args.out}", highlight=False)
    return 0


def _show(result, args: argparse.Namespace, store):
    """Print one batch result (a JSON line with --json); a failure to print it becomes its stored
    HARNESS_ERROR row, printed plainly, and that row is what the batch keeps."""
    from cudaperf.evaluate import harness_row, store_quietly
    from cudaperf.types import to_dict

    if not args.json:
        return result
    try:
        print(json.dumps(to_dict(result)), flush=True)
        return result
    except Exception as exc:  # noqa: BLE001 - one result must not end the batch
        row = harness_row(result, "printing", exc)
        store_quietly(store, row)
        print(json.dumps({"task_id": row.task_id, "solution_id": row.solution_id,
                          "outcome": row.outcome.value, "message": row.message}), flush=True)
        return row


def _print_summary(console, results: list) -> None:
    from cudaperf.report import outcome_table, reasons_table, to_rich

    if not results:
        return
    for table in (outcome_table(results), reasons_table(results)):
        try:
            if table.rows:
                console.print(to_rich(table))
        except Exception as exc:  # noqa: BLE001 - the results are stored; the summary is a courtesy
            console.print(f"(could not print {table.title}: {exc!r})", highlight=False, markup=False)


# -- one result, readable ----------------------------------------------------------------------------

_OUTCOME_STYLE = {"correct": "bold green", "skipped": "bold yellow"}


def _num(value: float | None, fmt: str) -> str:
    return format(value, fmt) if value is not None else "-"


def result_renderables(result) -> list:
    """A header, per-configuration correctness and timing, flags, build details and logs of a failure."""
    from rich.table import Table
    from rich.text import Text

    style = _OUTCOME_STYLE.get(result.outcome.value, "bold red")
    out: list = [Text.assemble((f"{result.task_id} / {result.solution_id}: ", "bold"),
                               (result.outcome.value.upper(), style),
                               (f"  (stage: {result.stage})" if result.stage else "", "dim"))]
    if result.message:
        out.append(Text(result.message))
    timing = {t.config: t for t in result.timings}
    if result.correctness:
        table = Table(title="Configurations", title_justify="left")
        for col in ("config", "correct", "max abs err", "max rel err", "cand ms", "eager ms", "compile ms",
                    "vs eager", "vs compile", "timer ms"):
            table.add_column(col)
        for c in result.correctness:
            t = timing.get(c.config)
            table.add_row(c.config, "yes" if c.correct else "[red]no[/red]", _num(c.max_abs_error, ".2e"),
                          _num(c.max_rel_error, ".3f"), _num(t and t.candidate.median_ms, ".4f"),
                          _num(t and t.eager and t.eager.median_ms, ".4f"),
                          _num(t and t.compiled and t.compiled.median_ms, ".4f"),
                          _num(t and t.speedup_vs_eager, ".2f"), _num(t and t.speedup_vs_compile, ".2f"),
                          _num(t and t.overhead_ms, ".4f"))
        out.append(table)
        if any(t.overhead_ms for t in result.timings):
            lead = max(t.lead_us for t in result.timings)
            kind = next((t.lead_kind for t in result.timings if t.lead_kind), "")
            out.append(Text("timer ms: an empty function timed the same way (device synchronise, end event); "
                            "it is inside every time above, not subtracted"
                            + (f"; each call had a {lead:g} µs lead (L2 flush{', ' + kind if kind else ''}) "
                               "before its start event" if lead else ""),
                            style="dim"))
    out.append(Text(f"speedup (geomean): vs eager {_num(result.speedup_vs_eager, '.2f')}x, "
                    f"vs torch.compile {_num(result.speedup_vs_compile, '.2f')}x; coverage "
                    f"{_num(result.coverage, '.0%')}"))
    if result.flags:
        ft = Table(title="Flags", title_justify="left")
        for col in ("severity", "code", "where", "message"):
            ft.add_column(col)
        for f in result.flags:
            where = " ".join(x for x in (f.config or "", f"line {f.line}" if f.line else "") if x)
            ft.add_row(f.severity.value, f.code, where or "-", f.message)
        out.append(ft)
    if result.build is not None:
        b = result.build
        regs = ", ".join(f"{r.kernel}: {r.registers} regs, {r.spill_store_bytes} B spilled"
                         for r in b.resources)
        out.append(Text(f"build: {b.format.value}, {b.units} unit(s), {b.cache_hits} cache hit(s), "
                        f"{b.duration_s:.2f} s" + (f"; {regs}" if regs else ""), style="dim"))
    if result.logs and not result.correct:
        out.append(Text("logs (tail):\n" + "\n".join(result.logs.splitlines()[-20:]), style="dim"))
    return out
