"""Helpers shared by the benchmark scripts: candidate variants, example pairs, result files, the referee's
own account of each result.

Not imported by the package. Variants make each candidate's CUDA text distinct (a comment line), so that
no build cache is shared between candidates: every build in a benchmark is a cold build.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from env_info import env_info

from cudaperf.solutions import solution_from_text
from cudaperf.tasks import load_task
from cudaperf.tasks.examples import example_solutions_dir, example_tasks_dir


def variant(source: str, k: int) -> str:
    """The same solution with a distinct CUDA text: a comment line before its first `__global__` line
    (that line is inside the CUDA source string, so the comment is too)."""
    at = source.find("__global__")
    if at < 0:
        raise ValueError("no CUDA source with __global__ found")
    line_start = source.rfind("\n", 0, at) + 1
    return source[:line_start] + f"// benchmark variant {k}\n" + source[line_start:]


def example_pairs(fmt: str, n: int) -> list[tuple]:
    """n (Task, Solution) pairs cycling over the example tasks, each solution a distinct variant."""
    tasks = {p.stem: load_task(p) for p in sorted(Path(example_tasks_dir()).glob("*.py"))
             if not p.name.startswith("_")}
    sols = {p.stem: p.read_text() for p in sorted(Path(example_solutions_dir(fmt)).glob("*.py"))
            if p.stem in tasks}
    names = sorted(sols)
    pairs = []
    for i in range(n):
        name = names[i % len(names)]
        text = variant(sols[name], i)
        pairs.append((tasks[name], solution_from_text(text, f"{name}-{fmt}-v{i}")))
    return pairs


def write_result(path: str | None, payload: dict) -> None:
    payload = {"environment": env_info(), **payload}
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(payload, indent=1, default=str))


def referee_spent(results: list) -> list[dict[str, float]]:
    """`environment["referee_ms"]` of every result that has one, parsed: the referee's time per message
    kind and per part inside them, the parent's wait per kind (`wait_*`), bytes moved and rates."""
    return [json.loads(r.environment["referee_ms"]) for r in results if "referee_ms" in r.environment]
