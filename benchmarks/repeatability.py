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


def evaluate_repeatedly(task, sol, times: int) -> list:
    from cudaperf.evaluate import EvalConfig, Evaluator

    with Evaluator(EvalConfig(device="cuda", coverage=False)) as ev:
        return [ev.evaluate(task, sol) for _ in range(times)]


def ncu_median_ms(task, sol, config: str) -> tuple[float | None, str]:
    ncu = shutil.which("ncu")
    if ncu is None:
        return None, "ncu not found"
    sol_file = Path("/tmp/cudaperf_ncu_solution.py")
    sol_file.write_text(sol.source)
    cmd = [ncu, "--clock-control", "none", "--cache-control", "all", "--profile-from-start", "off",
           "--metrics", "gpu__time_duration.sum", "--csv", "--page", "raw",
           sys.executable, str(HERE / "ncu_target.py"), task.path, str(sol_file), config]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
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
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    pairs = [p for p in example_pairs("fast", 12) if p[0].task_id == args.task][:1]
    task, sol = pairs[0]
    results = evaluate_repeatedly(task, sol, args.evaluations)
    for r in results:
        if not r.correct:
            print("evaluation failed:", r.outcome.value, r.message[:500])
            return 1
    # the configuration with the longest kernel is the one the ≥ 50 µs target speaks of
    config = max(results[0].timings, key=lambda t: t.candidate.median_ms).config
    medians = [next(t.candidate.median_ms for t in r.timings if t.config == config) for r in results]
    spread = (max(medians) - min(medians)) / statistics.median(medians)
    ncu_ms, ncu_note = ncu_median_ms(task, sol, config)
    ours = statistics.median(medians)
    agreement = None if ncu_ms is None else (ours - ncu_ms) / ncu_ms
    payload = {"task": task.task_id, "config": config, "medians_ms": medians, "spread": spread,
               "ncu_median_ms": ncu_ms, "ncu_note": ncu_note, "relative_difference_vs_ncu": agreement,
               "timings": [json.loads(json.dumps(r.timings[0].candidate.__dict__, default=str)) for r in results]}
    write_result(args.out, payload)
    print(json.dumps({k: v for k, v in payload.items() if k != "timings"}, indent=1))
    print("\n| repeatability | value | target |\n|---|---|---|")
    print(f"| {task.task_id}/{config}: median of medians | {ours * 1000:.1f} µs | ≥ 50 µs |")
    print(f"| spread of {len(medians)} medians (max-min)/median | {spread * 100:.2f}% | ≤ 1% |")
    if agreement is not None:
        print(f"| vs ncu gpu__time_duration ({ncu_ms * 1000:.1f} µs) | {agreement * 100:+.2f}% | within 5% |")
    else:
        print(f"| vs ncu | not measured: {ncu_note[:200]} | within 5% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
