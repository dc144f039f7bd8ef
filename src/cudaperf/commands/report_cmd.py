"""`cudaperf report FILE... [--markdown | --html OUT.html]`: fast_p, outcome counts, speedup histograms and
the best solution per task, from results JSONL written by `cudaperf eval --out`; with `--html`, one
self-contained page for results and refinement trajectories (`cudaperf optimize` output) together, and
training curves of `cudaperf train sft|rl` runs (give the run directory, or its metrics.jsonl). Without
`--html`, a training run gets a summary of where its time went (generation, evaluation, optimiser, per
rollout batch and in all; its evaluations' outcomes and stage times: `cudaperf.train.run_summary`).

Rich tables on the terminal by default; `--markdown` prints the same report as markdown, to commit
next to the results; `--html` writes a page that opens offline (charts, per-task tables, each trajectory
turn by turn). Lines of a file that are not results (a torn last line after a crash) are skipped with a
note on stderr.

Not covered: computing the numbers (`cudaperf.report`, `cudaperf.report_html`), reading results files
(`cudaperf.results`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE",
                        help="results JSONL (`cudaperf eval --out`); with --html also trajectory JSONL and "
                        "training run directories (metrics.jsonl)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--markdown", action="store_true", help="print markdown instead of rich tables")
    mode.add_argument("--html", metavar="OUT.html", help="write one self-contained HTML page to OUT.html")
    parser.add_argument("--title", default=None, help="page or report title")
    parser.add_argument("--max-trajectories", type=int, default=200,
                        help="trajectories drawn turn by turn in the HTML page (all are in its table)")


def run(args: argparse.Namespace) -> int:
    paths = [Path(f) for f in args.files]
    missing = [p for p in paths if not p.exists()]
    if missing:
        print(f"cudaperf report: {missing[0]}: no such file", file=sys.stderr)
        return 2
    if args.html:
        return _html(args, paths)
    from cudaperf.report_html import is_training_metrics, metrics_file

    runs = [p for p in paths if is_training_metrics(p)]
    unread = [p for p in runs if not metrics_file(p).is_file()]
    if unread:
        print(f"cudaperf report: {unread[0]}: no metrics.jsonl, and not one *metrics.jsonl to take instead: "
              "name the run's metrics file (e.g. DIR/rl_metrics.jsonl)", file=sys.stderr)
        return 2
    for run in runs:
        _run_summary(run, args.markdown)
    if runs and len(runs) == len(paths):
        return 0
    results = []
    for path in paths:
        results += _read_results(path) if path not in runs else []
    title = args.title or f"cudaperf report: {', '.join(p.name for p in paths)}"
    if args.markdown:
        from cudaperf.report import render

        print(render(results, title=title), end="")
        return 0
    return _rich(results, paths)


def _run_summary(path: Path, markdown: bool) -> None:
    from cudaperf.report_html import read_training_run
    from cudaperf.train.run_summary import run_markdown

    run, unreadable = read_training_run(path)
    if unreadable:
        print(f"cudaperf report: skipped in {path}: {unreadable[:10]}", file=sys.stderr)
    text = run_markdown(run, path)
    if markdown:
        print(text)
        return
    from rich.console import Console
    from rich.markdown import Markdown

    Console().print(Markdown(text))


def _read_results(path: Path) -> list:
    from cudaperf.results import ResultStore

    found = ResultStore(path).read()
    if found.bad_lines:
        what = "a torn last line" if found.torn_tail and len(found.bad_lines) == 1 else "unreadable lines"
        print(f"cudaperf report: skipped {what} of {path}: {list(found.bad_lines)[:10]}", file=sys.stderr)
    return list(found.results)


def _rich(results: list, paths: list[Path]) -> int:
    from rich.console import Console

    from cudaperf.report import rich_renderables

    console = Console()
    if not results:
        console.print(f"{', '.join(map(str, paths))}: no results")
        return 0
    for renderable in rich_renderables(results):
        console.print(renderable)
    return 0


def _html(args: argparse.Namespace, paths: list[Path]) -> int:
    from cudaperf.report_html import read_inputs, write_html

    inputs = read_inputs(paths)
    if inputs.bad_lines:
        print(f"cudaperf report: skipped unreadable lines: {list(inputs.bad_lines)[:10]}", file=sys.stderr)
    out = write_html(args.html, inputs, title=args.title or "cudaperf report",
                     max_trajectories=args.max_trajectories)
    n_trajectories = len({(t.task_id, t.sample) for t in inputs.turns})
    print(f"wrote {out} ({len(inputs.results)} results, {n_trajectories} trajectories, "
          f"{len(inputs.training)} training runs, {out.stat().st_size / 1024:.0f} KiB)")
    return 0
