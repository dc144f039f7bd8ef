"""What the sandbox boundary costs: evaluations per minute with it on and off, same candidates, one run.

The candidates are the example solutions (fast format; with `--inline` also the load_inline ones, whose
builds are done once, untimed, into the shared cache both arms use). Each repeat runs both arms, in
alternating order, each on a fresh Evaluator: one untimed pass to start the worker and warm its caches
(references, the eager baseline), then a timed pass over every candidate. Printed: per arm, the median
evaluations per minute over the repeats, the ratio, worker start times, and any candidate whose outcome
differs between the arms (there should be none).

The Evaluator has no boundary switch of its own yet, so the "off" arm builds its worker pool with
`Limits(boundary=False)` by wrapping `WorkerPool` while the Evaluator starts (a benchmark-only shim).

    python benchmarks/boundary_throughput.py --repeats 3 [--inline] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import write_result


def example_pairs(formats: tuple[str, ...]) -> list[tuple]:
    """(Task, Solution) for every example solution of `formats`, unchanged (the same text in both arms)."""
    from cudaperf.solutions import solution_from_text
    from cudaperf.tasks import load_task
    from cudaperf.tasks.examples import example_solutions_dir, example_tasks_dir

    tasks = {p.stem: load_task(p) for p in sorted(Path(example_tasks_dir()).glob("*.py"))
             if not p.name.startswith("_")}  # fmt: skip
    pairs = []
    for fmt in formats:
        for path in sorted(Path(example_solutions_dir(fmt)).glob("*.py")):
            if path.stem in tasks:
                pairs.append((tasks[path.stem], solution_from_text(path.read_text(), f"{path.stem}-{fmt}")))
    return pairs


@contextmanager
def boundary_switch(on: bool):
    """While an Evaluator starts: its WorkerPool gets Limits(boundary=on)."""
    from cudaperf.execute import sandbox

    original = sandbox.WorkerPool
    sandbox.WorkerPool = functools.partial(original, limits=sandbox.Limits(boundary=on))
    try:
        yield
    finally:
        sandbox.WorkerPool = original


def one_arm(pairs, on: bool, cache_dir: str, baselines: tuple[str, ...]) -> dict:
    from cudaperf.evaluate import EvalConfig, Evaluator, TimingConfig

    config = EvalConfig(device="cuda", cache_dir=cache_dir, timing=TimingConfig(baselines=baselines))
    started = time.perf_counter()
    with boundary_switch(on):
        ev = Evaluator(config).__enter__()
    try:
        list(ev.evaluate_many(pairs))  # untimed: worker start, references, first eager timings
        start_s = time.perf_counter() - started
        t0 = time.perf_counter()
        results = list(ev.evaluate_many(pairs))
        wall_s = time.perf_counter() - t0
        state = ev._workers.workers[0].boundary_state
    finally:
        ev.close()
    return {"boundary": on, "evals_per_min": 60.0 * len(results) / wall_s, "wall_s": wall_s,
            "warm_pass_s": start_s, "outcomes": {r.solution_id: r.outcome.value for r in results},
            "state": state}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--inline", action="store_true", help="also the load_inline examples")
    parser.add_argument("--baselines", default="eager", help="comma-separated (eager,compile)")
    parser.add_argument("--cache-dir", default=None, help="shared build cache (default: a fresh temp dir)")
    parser.add_argument("--out", default=None, help="write the rows as JSON here")
    args = parser.parse_args(argv)
    pairs = example_pairs(("fast", "inline") if args.inline else ("fast",))
    cache_dir = args.cache_dir or tempfile.mkdtemp(prefix="cudaperf-boundary-bench-")
    baselines = tuple(b for b in args.baselines.split(",") if b)
    rows = []
    for rep in range(args.repeats):
        for on in ((True, False) if rep % 2 == 0 else (False, True)):
            row = one_arm(pairs, on, cache_dir, baselines)
            rows.append({"repeat": rep, **row})
            print(f"repeat {rep} boundary={'on ' if on else 'off'}: {row['evals_per_min']:.1f} evals/min "
                  f"({len(pairs)} in {row['wall_s']:.1f} s; warm pass {row['warm_pass_s']:.1f} s)",
                  flush=True)
    summary = summarise(rows)
    print(f"median evals/min: boundary on {summary['on']:.1f}, off {summary['off']:.1f}; "
          f"on/off = {summary['ratio']:.3f} ({100 * (1 - summary['ratio']):+.1f}% slower with the boundary)")
    print(f"boundary state: {rows[0]['state']}")
    if summary["differing"]:
        print(f"outcomes differing between the arms: {summary['differing']}")
    write_result(args.out, {"rows": rows, "summary": summary, "candidates": len(pairs)})
    return 0


def summarise(rows: list[dict]) -> dict:
    on = statistics.median(r["evals_per_min"] for r in rows if r["boundary"])
    off = statistics.median(r["evals_per_min"] for r in rows if not r["boundary"])
    first = {r["boundary"]: r["outcomes"] for r in rows}
    differing = sorted(k for k in first[True] if first[True][k] != first[False].get(k))
    return {"on": on, "off": off, "ratio": on / off, "differing": differing}


if __name__ == "__main__":
    sys.exit(main())
