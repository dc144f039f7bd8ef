"""`cudaperf tasks PATH [--check]`: list PyTorch task files, their configurations and input sizes.

Sizes come from running `get_inputs` on torch's `meta` device (shapes only: no memory, no compute), so
listing a directory of large tasks is instant. `--check` also runs each reference on meta (output
shapes) and for real on the CPU for the smallest configuration, and exits 1 if any task is broken.

Not covered: C→CUDA tasks (`*.ctask.json`), evaluating solutions (`cudaperf eval`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="a task file or a directory of task files (*.py, private _*.py skipped)")
    parser.add_argument("--check", action="store_true",
                        help="also run each reference: on the meta device for every configuration and for "
                             "real on the CPU for the smallest one; exit 1 if anything fails")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object per task instead of a table")


def _load(path: Path):
    from cudaperf.tasks import TaskError, load_task, load_tasks

    errors: list[TaskError] = []
    if path.is_dir():
        return load_tasks(path, errors=errors), errors
    try:
        return [load_task(path)], errors
    except TaskError as exc:
        return [], [exc]


def _mb(nbytes: int) -> str:
    return f"{nbytes / 1e6:.2f}"


def _params(params: dict) -> str:
    return " ".join(f"{k}={json.dumps(v)}" for k, v in params.items()) or "-"


def _shapes(infos) -> str:
    return " ".join("x".join(map(str, t.shape)) or "scalar" for t in infos)


def _check(task, infos) -> list[str]:
    from cudaperf.tasks.runtime import run_reference_cpu

    problems = [f"{i.config}: {i.error}" for i in infos if i.error]
    known = [i for i in infos if not i.error]
    if known:
        smallest = min(known, key=lambda i: i.input_bytes)
        config = next(c for c in task.configs if c.name == smallest.config)
        problem = run_reference_cpu(task, config)
        if problem:
            problems.append(f"{config.name} (cpu run): {problem}")
    return problems


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from cudaperf.tasks.runtime import describe_task

    path = Path(args.path)
    if not path.exists():
        print(f"cudaperf tasks: {path} does not exist", file=sys.stderr)
        return 2
    tasks, errors = _load(path)
    console = Console()
    table = Table(title=f"Tasks in {path}", title_justify="left")
    for col in ("task", "family", "config", "params", "inputs", "in MB", "outputs" if args.check else None):
        if col:
            table.add_column(col)
    broken = [str(e) for e in errors]
    for task in tasks:
        infos = describe_task(task, run_reference=args.check)
        if args.check:
            broken += [f"{task.path or task.task_id}: {p}" for p in _check(task, infos)]
        if args.json:
            print(json.dumps({"task_id": task.task_id, "family": task.family, "configs": [
                {"name": i.config, "params": i.params, "input_bytes": i.input_bytes,
                 "inputs": [list(t.shape) for t in i.inputs], "error": i.error} for i in infos]}))
            continue
        for n, info in enumerate(infos):
            row = [task.task_id if n == 0 else "", (task.family or "-") if n == 0 else "", info.config,
                   _params(info.params), _shapes(info.inputs) or "?", _mb(info.input_bytes)]
            table.add_row(*row, *([_shapes(info.outputs) or "?"] if args.check else []))
        table.add_section()
    if not args.json:
        console.print(table)
        console.print(f"{len(tasks)} task(s), {sum(len(t.configs) for t in tasks)} configuration(s)")
    errs = Console(stderr=True)
    for problem in broken:
        errs.print(f"[red]broken[/red] {problem}", highlight=False, soft_wrap=True, markup=True)
    return 1 if broken else 0
