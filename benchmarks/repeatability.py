"""Timing repeatability: one kernel timed in 5 separate evaluations (spread of the medians), and the
agreement of cudaperf's median with Nsight Compute's `gpu__time_duration` for the same kernel and inputs.

Targets (issue 2): spread of medians ≤ 1% for kernels ≥ 50 µs; agreement with ncu within 5%.
cudaperf times the whole `forward` (output allocation, launch, a full device synchronise before the end
event), ncu only the kernel; the difference is reported, not hidden.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import example_pairs, write_result

HERE = Path(__file__).resolve().parent


def evaluate_repeatedly(task, sol, times: int, warmup_ms: float) -> list:
    from cudaperf.evaluate import EvalConfig, Evaluator, TimingConfig

    config = EvalConfig(device="cuda", coverage=False, timing=TimingConfig(warmup_ms=warmup_ms))
    with Evaluator(config) as ev:
        return [ev.evaluate(task, sol) for _ in range(times)]


def spread_of(values: list[float]) -> float:
    """(max - min) / median."""
    return (max(values) - min(values)) / statistics.median(values)


def series(task, sol, times: int, warmup_ms: float, config: str | None) -> dict:
    """`times` evaluations in one Evaluator; medians of `config` (default: the longest kernel's)."""
    results = evaluate_repeatedly(task, sol, times, warmup_ms)
    bad = [r for r in results if not r.correct]
    if bad:
        raise SystemExit(f"evaluation failed: {bad[0].outcome.value} {bad[0].message[:500]}")
    config = config or max(results[0].timings, key=lambda t: t.candidate.median_ms).config
    timings = [next(t for t in r.timings if t.config == config) for r in results]
    medians = [t.candidate.median_ms for t in timings]
    speedups = [t.speedup_vs_eager for t in timings if t.speedup_vs_eager is not None]
    return {"warmup_ms": warmup_ms, "config": config, "medians_ms": medians, "spread": spread_of(medians),
            "speedups_vs_eager": speedups, "speedup_spread": spread_of(speedups) if speedups else None,
            "timings": [json.loads(json.dumps(t.candidate.__dict__, default=str)) for t in timings]}


def ncu_median_ms(task, sol, config: str) -> tuple[float | None, str]:
    ncu = shutil.which("ncu")
    if ncu is None:
        return None, "ncu not found"
    sol_file = Path("/tmp/cudaperf_ncu_solution.py")
    sol_file.write_text(sol.source)
    cmd = [ncu, "--clock-control", "none", "--cache-control", "all", "--profile-from-start", "off",
           "--metrics", "gpu__time_duration.sum", "--csv", "--page", "raw",
           sys.executable, str(HERE / "ncu_target.py"), task.path, str(sol_file), config]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    lines = proc.stdout.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        return None, (proc.stdout + proc.stderr)[-2000:]
    rows = list(csv.DictReader(io.StringIO("\n".join([lines[start]] + lines[start + 2:]))))
    by_id: dict[str, float] = {}
    unit = lines[start + 1].split(",")[list(rows[0].keys()).index("gpu__time_duration.sum")].strip('"')
    scale = {"ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0, "nsecond": 1e-6}.get(unit, 1e-6)
    for r in rows:  # one row per kernel launch; a forward with several kernels sums them per call
        by_id[r["ID"]] = float(r["gpu__time_duration.sum"].replace(",", "")) * scale
    per_launch = list(by_id.values())
    return statistics.median(per_launch), f"{len(per_launch)} launches, unit {unit}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # matmul: its large configurations run ~0.8 ms, well above the 50 µs the target speaks of (vector_add's
    # largest runs ~29 µs on the H200).
    ap.add_argument("--task", default="matmul")
    ap.add_argument("--evaluations", type=int, default=5)
    # Several warm-up budgets, each its own series of evaluations in the same run (the default first):
    # shows whether a longer warm-up (clocks settled) narrows the spread between evaluations.
    ap.add_argument("--warmup-ms", default="25,200", help="comma-separated warm-up budgets per callable")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    pairs = [p for p in example_pairs("fast", 12) if p[0].task_id == args.task][:1]
    task, sol = pairs[0]
    runs, config = [], None
    for warmup_ms in (float(w) for w in args.warmup_ms.split(",")):
        runs.append(series(task, sol, args.evaluations, warmup_ms, config))
        config = runs[0]["config"]  # the same configuration in every series
    first = runs[0]
    ncu_ms, ncu_note = ncu_median_ms(task, sol, config)
    ours = statistics.median(first["medians_ms"])
    agreement = None if ncu_ms is None else (ours - ncu_ms) / ncu_ms
    payload = {"task": task.task_id, "config": config, "medians_ms": first["medians_ms"],
               "spread": first["spread"], "series": runs, "ncu_median_ms": ncu_ms, "ncu_note": ncu_note,
               "relative_difference_vs_ncu": agreement}
    write_result(args.out, payload)
    print(json.dumps({k: v for k, v in payload.items() if k != "series"}, indent=1))
    print("\n| repeatability | value | target |\n|---|---|---|")
    print(f"| {task.task_id}/{config}: median of medians | {ours * 1000:.1f} µs | ≥ 50 µs |")
    for run in runs:
        tag = f"warm-up {run['warmup_ms']:g} ms"
        print(f"| {tag}: spread of {len(run['medians_ms'])} medians (max-min)/median | {run['spread'] * 100:.2f}% "
              f"(medians µs: {', '.join(f'{m * 1000:.1f}' for m in run['medians_ms'])}) | ≤ 1% |")
        if run["speedup_spread"] is not None:
            print(f"| {tag}: spread of the speedups vs eager | {run['speedup_spread'] * 100:.2f}% | (context) |")
    if agreement is not None:
        print(f"| vs ncu gpu__time_duration ({ncu_ms * 1000:.1f} µs) | {agreement * 100:+.2f}% | within 5% |")
    else:
        print(f"| vs ncu | not measured: {ncu_note[:200]} | within 5% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
