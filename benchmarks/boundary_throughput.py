"""What the sandbox boundary costs: evaluations per minute with its parts on and off, same candidates,
one run.

Three arms: "full" (the operating-system boundary and the referee, the default), "no-referee" (the boundary
alone: the worker judges its own candidate) and "off" (neither). The issue's target is full against off:
under 5% slower. The candidates are the example solutions (fast format; with `--inline` also the
load_inline ones, whose builds are done once, untimed, into the shared cache every arm uses). Each repeat
times every arm once, in rotating order. Each arm has its own Evaluator, opened once before the first
repeat with one untimed pass (the worker and the referee start, their caches warm: references, the eager
baseline) and kept open, idle while the other arms run; a repeat is one timed pass over every candidate.
Printed: per pass, the median milliseconds of each stage (the timing stage's disposals beside them, and its
timed rounds per job; the correctness stage includes waiting for the referee's judgement; the wall time per
evaluation beyond `total` is the parent's: the referee's final verdict among it) and, for the arm with a
referee, the median milliseconds of the referee's own work per job (`environment["referee_ms"]`: per message
kind, per part inside them, the parent's wait per kind); per arm, the median evaluations per minute over the
repeats, the ratios, and any candidate whose outcome differs between the arms (there should be none). Below
the referee's milliseconds, the bytes moved per job and their rates (medians of `referee_ms`'s `*_bytes`,
`*_ms`, `*_gbps`: assembled out of the region, judged, the timed outputs judged, and the worker's own
account of filling the region) and whether each side's mapping of the region is pinned
(`environment["region"]`).

The Evaluator has no switch for these parts, so each arm's worker pool gets its `Limits` with `boundary`
and `referee` replaced by wrapping `WorkerPool` while the Evaluator starts (a benchmark-only shim).

`--cpu` runs the same arms on a CPU-mode worker instead, over a small pure-PyTorch task (two
configurations, an nn.Linear) with pure-PyTorch candidates (torch ops allowed): what the machinery costs
per evaluation where the GPU work is negligible, an upper bound on its share.

    python benchmarks/boundary_throughput.py --repeats 3 [--inline] [--out FILE.json]
    python benchmarks/boundary_throughput.py --cpu --repeats 3
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import referee_spent, write_result


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


CPU_TASK = """
import torch
import torch.nn as nn

CUDAPERF_TASK = {"no_derived_configs": "a benchmark of the sandbox's own cost"}

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.linear = nn.Linear(n, n)

    def forward(self, x, z):
        return torch.relu(self.linear(x)) * 2 + z

def get_input_configs():
    return [{"name": "small", "n": 16}, {"name": "odd", "n": 23}]

def get_inputs(n=16):
    return [torch.randn(8, n), torch.randn(8, n)]

def get_init_inputs(n=16):
    return [n]
"""
CPU_CANDIDATE = """
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.linear = nn.Linear(n, n)

    def forward(self, x, z):
        return torch.relu(self.linear(x)) * 2 + z  # {i}
"""


def cpu_pairs(count: int = 20) -> list[tuple]:
    """`count` distinct pure-PyTorch candidates (a comment differs) of CPU_TASK."""
    from cudaperf.solutions import solution_from_text
    from cudaperf.tasks import task_from_source

    task = task_from_source(CPU_TASK, "linear_relu")
    return [(task, solution_from_text(CPU_CANDIDATE.format(i=i), f"cpu-{i}")) for i in range(count)]


ARMS: dict[str, dict[str, bool]] = {
    "full": {"boundary": True, "referee": True},
    "no-referee": {"boundary": True, "referee": False},
    "off": {"boundary": False, "referee": False},
}


@contextmanager
def arm_switch(parts: dict[str, bool]):
    """While an Evaluator starts: its WorkerPool gets its Limits with `parts` replaced."""
    from cudaperf.execute import sandbox

    original = sandbox.WorkerPool

    def pool(devices=None, limits=None, **kwargs):
        return original(devices, dataclasses.replace(limits or sandbox.Limits(), **parts), **kwargs)

    sandbox.WorkerPool = pool
    try:
        yield
    finally:
        sandbox.WorkerPool = original


def open_arm(pairs, arm: str, cache_dir: str, baselines: tuple[str, ...], cpu: bool = False):
    """An Evaluator for `arm`, after its untimed warm pass (worker and referee start, references, first
    eager timings); (evaluator, warm pass seconds)."""
    from cudaperf.anticheat.policy import Policy
    from cudaperf.evaluate import EvalConfig, Evaluator, TimingConfig

    config = EvalConfig(device="cpu" if cpu else "cuda", cache_dir=cache_dir,
                        timing=TimingConfig(baselines=baselines, budget_ms=5.0 if cpu else 100.0),
                        policy=Policy(allow_torch_ops=True) if cpu else None, analyze=not cpu)
    started = time.perf_counter()
    with arm_switch(ARMS[arm]):
        ev = Evaluator(config).__enter__()
    try:
        list(ev.evaluate_many(pairs))
    except BaseException:
        ev.close()
        raise
    return ev, time.perf_counter() - started


def timed_pass(ev, pairs, arm: str) -> dict:
    """One timed pass of every candidate on an open arm: evaluations per minute and the median seconds
    per stage (the correctness stage includes waiting for the referee)."""
    t0 = time.perf_counter()
    results = list(ev.evaluate_many(pairs))
    wall_s = time.perf_counter() - t0
    stages = sorted({k for r in results for k in r.stage_durations_s})
    stage_s = {k: statistics.median(r.stage_durations_s.get(k, 0.0) for r in results) for k in stages}
    waits = [float(r.environment["referee_wait_s"]) for r in results if "referee_wait_s" in r.environment]
    if waits:  # inside the stages above, not beside them: the parent waiting for the referee's answers
        stage_s["(referee wait)"] = statistics.median(waits)
    timed = [r for r in results if r.timings]
    if timed:  # inside the timing stage: its disposals (outside the samples), per job
        stage_s["(timing: disposals)"] = statistics.median(sum(t.dispose_ms for t in r.timings) / 1e3
                                                          for r in timed)
    rounds = statistics.median(sum(t.rounds for t in r.timings) for r in timed) if timed else 0
    return {"arm": arm, **ARMS[arm], "evals_per_min": 60.0 * len(results) / wall_s, "wall_s": wall_s,
            "stage_median_s": stage_s, "rounds_median": rounds, "referee_median_ms": referee_medians(results),
            "region": region_notes(results),
            "baseline_memory": next((r.environment["baseline_memory"] for r in timed
                                     if "baseline_memory" in r.environment), ""),  # one job's: its scrubs
            "outcomes": {r.solution_id: r.outcome.value for r in results},
            "state": ev._workers.workers[0].boundary_state}  # fmt: skip


MOVED_SUFFIXES = ("_bytes", "_gbps", "_pinned")
MOVED_PARTS = (("assemble", "assembled"), ("compare", "judged"), ("timed_compare", "timed judged"),
               ("worker_fill", "worker filled"))


def moved_line(medians: dict[str, float]) -> str:
    """The bytes moved and judged per job and their rates (`RefereeJob.figures`), from the medians."""
    def one(name: str, label: str) -> str:
        got = {k: medians.get(f"{name}_{k}", 0.0) for k in ("bytes", "ms", "gbps")}
        return f"{label} {got['bytes'] / 1e6:.2f} MB in {got['ms']:.1f} ms ({got['gbps']:.3g} GB/s)"

    return "; ".join(one(name, label) for name, label in MOVED_PARTS)


def region_notes(results: list) -> str:
    """Each side's pinning (`environment["region"]`), as the results say it, once per distinct value."""
    notes = sorted({r.environment["region"] for r in results if "region" in r.environment})
    return " | ".join(notes) or "not recorded"


def referee_medians(results: list) -> dict[str, float]:
    """Per part of the referee's work (`environment["referee_ms"]`: its time per message kind, per part
    inside them, and the parent's wait per kind, `wait_*`), the median milliseconds over the results (a
    part a result lacks counts 0)."""
    spent = referee_spent(results)
    names = sorted({k for s in spent for k in s})
    return {k: statistics.median(s.get(k, 0.0) for s in spent) for k in names}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--inline", action="store_true", help="also the load_inline examples")
    parser.add_argument("--cpu", action="store_true", help="a CPU-mode worker, pure-PyTorch candidates")
    parser.add_argument("--baselines", default="eager", help="comma-separated (eager,compile)")
    parser.add_argument("--cache-dir", default=None, help="shared build cache (default: a fresh temp dir)")
    parser.add_argument("--out", default=None, help="write the rows as JSON here")
    parser.add_argument("--profile-dir", default=None, help="profile every worker's jobs into DIR/<arm>/ "
                        "(warm passes into DIR/<arm>-warm/; summary: benchmarks/profile_summary.py DIR)")
    args = parser.parse_args(argv)
    from cudaperf.execute.job_profile import profile_into

    pairs = cpu_pairs() if args.cpu else example_pairs(("fast", "inline") if args.inline else ("fast",))
    cache_dir = args.cache_dir or tempfile.mkdtemp(prefix="cudaperf-boundary-bench-")
    baselines = tuple(b for b in args.baselines.split(",") if b)
    rows = []
    names = list(ARMS)
    open_arms: dict[str, Any] = {}
    try:
        for arm in names:
            profile_into(args.profile_dir, f"{arm}-warm")
            open_arms[arm], warm_s = open_arm(pairs, arm, cache_dir, baselines, args.cpu)
            print(f"{arm:10s}: warm pass {warm_s:.1f} s", flush=True)
        for rep in range(args.repeats):
            for arm in names[rep % len(names):] + names[:rep % len(names)]:
                profile_into(args.profile_dir, arm)
                row = timed_pass(open_arms[arm], pairs, arm)
                rows.append({"repeat": rep, **row})
                stages = ", ".join(f"{k} {v * 1e3:.0f}" for k, v in row["stage_median_s"].items())
                print(f"repeat {rep} {arm:10s}: {row['evals_per_min']:.1f} evals/min ({len(pairs)} in "
                      f"{row['wall_s']:.1f} s); median ms per stage: {stages}; timed rounds per job "
                      f"{row['rounds_median']:g}", flush=True)
                if row["referee_median_ms"]:
                    parts = ", ".join(f"{k} {v:.1f}" for k, v in row["referee_median_ms"].items()
                                      if not k.endswith(MOVED_SUFFIXES))
                    print(f"    referee, median ms per job: {parts}", flush=True)
                    print(f"    moved per job (medians): {moved_line(row['referee_median_ms'])}; region "
                          f"{row['region']}", flush=True)
                if row["baseline_memory"]:
                    print(f"    baselines' memory (a job): {row['baseline_memory']}", flush=True)
    finally:
        for ev in open_arms.values():
            ev.close()
    summary = summarise(rows)
    print("median evals/min: " + ", ".join(f"{a} {summary[a]:.1f}" for a in ARMS))
    print(f"full/off = {summary['full_vs_off']:.3f} ({100 * (1 - summary['full_vs_off']):+.1f}% slower with "
          f"the boundary and the referee; target under 5%); full/no-referee = {summary['referee']:.3f} "
          f"({100 * (1 - summary['referee']):+.1f}% for the referee alone)")
    print(f"boundary state: {rows[0]['state']}")
    if summary["differing"]:
        print(f"outcomes differing between the arms: {summary['differing']}")
    write_result(args.out, {"rows": rows, "summary": summary, "candidates": len(pairs)})
    return 0


def summarise(rows: list[dict]) -> dict:
    medians = {a: statistics.median(r["evals_per_min"] for r in rows if r["arm"] == a) for a in ARMS}
    first = {r["arm"]: r["outcomes"] for r in rows}
    differing = sorted(k for k in first["full"] if any(first[a].get(k) != first["full"][k] for a in ARMS))
    return {**medians, "full_vs_off": medians["full"] / medians["off"],
            "referee": medians["full"] / medians["no-referee"], "differing": differing}


if __name__ == "__main__":
    sys.exit(main())
