"""`cudaperf report FILE [--markdown]`: fast_p, outcome counts, speedup histograms and the best solution
per task, from a results JSONL file written by `cudaperf eval --out`.

Rich tables on the terminal by default; `--markdown` prints the same report as markdown, to commit
next to the results. Lines of the file that are not results (a torn last line after a crash) are
skipped with a note on stderr.

Not covered: computing the numbers (`cudaperf.report`), reading the file (`cudaperf.results`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="results JSONL written by `cudaperf eval --out`")
    parser.add_argument("--markdown", action="store_true", help="print markdown instead of rich tables")


def run(args: argparse.Namespace) -> int:
    from cudaperf.report import render, rich_renderables
    from cudaperf.results import ResultStore

    path = Path(args.file)
    if not path.is_file():
        print(f"cudaperf report: {path}: no such file", file=sys.stderr)
        return 2
    found = ResultStore(path).read()
    if found.bad_lines:
        what = "a torn last line" if found.torn_tail and len(found.bad_lines) == 1 else "unreadable lines"
        print(f"cudaperf report: skipped {what} of {path}: {list(found.bad_lines)[:10]}", file=sys.stderr)
    results = list(found.results)
    if args.markdown:
        print(render(results, title=f"cudaperf report: {path.name}"), end="")
        return 0
    from rich.console import Console

    console = Console()
    if not results:
        console.print(f"{path}: no results")
        return 0
    for renderable in rich_renderables(results):
        console.print(renderable)
    return 0
