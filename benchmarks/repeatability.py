"""Timing repeatability: each of several example kernels timed in 5 separate evaluations (spread of the
medians, and of the speedups over eager), and the agreement of cudaperf's median with Nsight Compute's
`gpu__time_duration` for the same kernel and inputs.

Targets (issue 2): spread of medians ≤ 1% for kernels ≥ 50 µs; agreement with ncu within 5%.
cudaperf times the whole `forward` (output allocation, launch, a full device synchronise before the end
event), ncu only the kernel; the difference is reported, not hidden. The GPU's SM clock, power and
clock-event reasons are sampled (cudaperf.gpu_clocks) during every evaluation and during the ncu run, and
after every evaluation the same kernel's device time is read from CUPTI (torch.profiler, in this process,
L2 flushed before each call): if those kernel-only medians move between evaluations as much as cudaperf's,
the GPU changed, not the harness.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import example_pairs, write_result

from cudaperf.gpu_clocks import ClockMonitor

HERE = Path(__file__).resolve().parent


def cupti_kernel_ms(task, sol_file: Path, config: str, calls: int = 50) -> float:
    """Median over `calls` forwards of the summed device time of the solution's kernels (CUPTI through
    torch.profiler). Before each call the timing protocol's lead (cudaperf.lead: L2 flushed, then clean) and
    a tiny marker kernel (`torch.cuda._sleep`, named spin_kernel) are queued: the device work after a
    marker, less the next call's lead, is one call."""
    import torch
    from ncu_target import load_model
    from torch.profiler import ProfilerActivity, profile

    from cudaperf.lead import Lead
    from cudaperf.timing import default_l2_flush_bytes

    model, inputs = load_model(task.path, str(sol_file), config)
    l2x2 = default_l2_flush_bytes("cuda")
    flush = Lead(torch.device("cuda", torch.cuda.current_device()), l2x2, l2x2)
    with torch.no_grad():
        for _ in range(3):
            model(*inputs)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                flush()
                torch.cuda._sleep(1)  # the marker
                model(*inputs)
            torch.cuda.synchronize()
    device_events = sorted((e for e in prof.events() if str(e.device_type).endswith("CUDA")
                            and not getattr(e, "is_user_annotation", False)),
                           key=lambda e: e.time_range.start)
    return statistics.median(per_call_ms([(e.name, e.time_range.elapsed_us()) for e in device_events]))


def _is_lead(name: str) -> bool:
    """The lead's kernel (cudaperf.lead), or torch's fill when it falls back to one."""
    return "cudaperf_lead" in name or "FillFunctor" in name or "memset" in name.lower()


def per_call_ms(events: list[tuple[str, float]]) -> list[float]:
    """(name, µs) device events in time order -> ms per call: split at each marker, the flush that
    precedes a marker taken off the call before it."""
    calls: list[list[tuple[str, float]]] = []
    for name, us in events:
        if "spin_kernel" in name:
            if calls and calls[-1] and _is_lead(calls[-1][-1][0]):
                calls[-1].pop()
            calls.append([])
        elif calls:
            calls[-1].append((name, us))
    return [sum(us for _, us in call) / 1000 for call in calls]


def benchmark_pairs() -> dict[str, tuple]:
    """task id -> (Task, Solution) for the tasks of repeatability_tasks/ (TASK.py beside TASK_fast.py)."""
    from cudaperf.solutions import solution_from_text
    from cudaperf.tasks import load_task

    pairs = {}
    for sol_path in sorted((HERE / "repeatability_tasks").glob("*_fast.py")):
        task = load_task(sol_path.with_name(sol_path.name.removesuffix("_fast.py") + ".py"))
        pairs[task.task_id] = (task, solution_from_text(sol_path.read_text(), f"{task.task_id}-fast"))
    return pairs


def longest_config(result) -> str:
    return max(result.timings, key=lambda t: t.candidate.median_ms).config


def evaluate_repeatedly(task, sol, sol_file: Path, times: int, warmup_ms: float,
                        clocks) -> tuple[list, list, list]:
    """`times` evaluations in one Evaluator, each followed by the CUPTI kernel time of the longest
    configuration: (results, each evaluation's clock summary, the kernel-only medians in ms)."""
    from cudaperf.evaluate import EvalConfig, Evaluator, TimingConfig

    # eager only: the compile baseline has no bearing on the candidate's repeatability and costs minutes
    config = EvalConfig(device="cuda", coverage=False,
                        timing=TimingConfig(warmup_ms=warmup_ms, baselines=("eager",)))
    results, windows, kernel_only = [], [], []
    with Evaluator(config) as ev:
        for _ in range(times):
            start = time.time()
            results.append(ev.evaluate(task, sol))
            windows.append(clocks.summary(start, time.time()))
            if not results[-1].correct:
                raise SystemExit(f"evaluation failed: {results[-1].outcome.value} "
                                 f"{results[-1].message[:500]}")
            try:  # a diagnostic: its failure must not cost the evaluations
                kernel_only.append(cupti_kernel_ms(task, sol_file, longest_config(results[0])))
            except Exception as exc:  # noqa: BLE001 - reported in the output instead
                print(f"CUPTI kernel time failed: {type(exc).__name__}: {exc}", flush=True)
                kernel_only.append(None)
    return results, windows, kernel_only


def spread_of(values: list[float | None]) -> float | None:
    """(max - min) / median of the values measured (None where fewer than two were)."""
    known = [v for v in values if v is not None]
    return (max(known) - min(known)) / statistics.median(known) if len(known) >= 2 else None


def series(task, sol, sol_file: Path, times: int, warmup_ms: float, clocks) -> dict:
    """`times` evaluations in one Evaluator; medians of the longest kernel's configuration."""
    results, windows, kernel_only = evaluate_repeatedly(task, sol, sol_file, times, warmup_ms, clocks)
    config = longest_config(results[0])
    timings = [next(t for t in r.timings if t.config == config) for r in results]
    medians = [t.candidate.median_ms for t in timings]
    speedups = [t.speedup_vs_eager for t in timings if t.speedup_vs_eager is not None]
    return {"warmup_ms": warmup_ms, "config": config, "medians_ms": medians, "spread": spread_of(medians),
            "speedups_vs_eager": speedups, "speedup_spread": spread_of(speedups) if speedups else None,
            "cupti_kernel_ms": kernel_only, "cupti_spread": spread_of(kernel_only),
            "timer_overhead_ms": [t.overhead_ms for t in timings],
            "clocks": [w.__dict__ for w in windows], "clock_notes": [w.describe() for w in windows],
            "timings": [json.loads(json.dumps(t.candidate.__dict__, default=str)) for t in timings]}


def ncu_median_ms(task, sol_file: Path, config: str, clocks) -> tuple[float | None, str]:
    ncu = shutil.which("ncu")
    if ncu is None:
        return None, "ncu not found"
    cmd = [ncu, "--clock-control", "none", "--cache-control", "all", "--profile-from-start", "off",
           "--metrics", "gpu__time_duration.sum", "--csv", "--page", "raw",
           sys.executable, str(HERE / "ncu_target.py"), task.path, str(sol_file), config]
    start = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    clock_note = clocks.summary(start, time.time()).describe()
    lines = proc.stdout.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        return None, (proc.stdout + proc.stderr)[-2000:]
    rows = list(csv.DictReader(io.StringIO("\n".join([lines[start]] + lines[start + 2:]))))
    by_id: dict[str, float] = {}
    unit = lines[start + 1].split(",")[list(rows[0].keys()).index("gpu__time_duration.sum")].strip('"')
    scale = {"ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0,
             "nsecond": 1e-6}.get(unit, 1e-6)
    for r in rows:  # one row per kernel launch; a forward with several kernels sums them per call
        by_id[r["ID"]] = float(r["gpu__time_duration.sum"].replace(",", "")) * scale
    per_launch = list(by_id.values())
    return statistics.median(per_launch), f"{len(per_launch)} launches, unit {unit}; {clock_note}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # matmul (compute-bound, ~0.8 ms on the H200) first; the others are memory-bound. Each task's longest
    # configuration is timed; one under 50 µs is reported but is outside the target.
    # triad (benchmarks/repeatability_tasks/) is bandwidth-bound and ~170 µs: the harness's own
    # repeatability, apart from the SM-clock changes that move the compute-bound matmul.
    ap.add_argument("--tasks", default="matmul,softmax,layernorm,row_sum,triad")
    ap.add_argument("--evaluations", type=int, default=5)
    # A 200 ms warm-up made the matmul spread worse, not better (7.8% against 3.8%, dev/LOG.md): 25 ms, the
    # evaluator's default, unless asked.
    ap.add_argument("--warmup-ms", type=float, default=25.0)
    ap.add_argument("--out", default=None)
    ap.add_argument("--table-from", default=None,
                    help="print the table of an earlier run's JSON (.json[.gz]) and exit, without a GPU")
    args = ap.parse_args()
    if args.table_from:
        opener = gzip.open if args.table_from.endswith(".gz") else open
        with opener(args.table_from, "rt") as fh:
            print_table(json.load(fh)["tasks"])
        return 0
    by_id = {t.task_id: (t, s) for t, s in example_pairs("fast", 12)} | benchmark_pairs()
    rows = []
    with ClockMonitor() as clocks:
        for task_id in args.tasks.split(","):
            task, sol = by_id[task_id]
            sol_file = Path("/tmp/cudaperf_repeatability_solution.py")  # for the CUPTI and ncu runs
            sol_file.write_text(sol.source)
            run = series(task, sol, sol_file, args.evaluations, args.warmup_ms, clocks)
            ncu = ncu_median_ms(task, sol_file, run["config"], clocks)
            ours = statistics.median(run["medians_ms"])
            rows.append({"task": task_id, **run, "ncu_median_ms": ncu[0], "ncu_note": ncu[1],
                         "relative_difference_vs_ncu": None if ncu[0] is None else (ours - ncu[0]) / ncu[0]})
            print(f"{task_id}: medians ms {run['medians_ms']}; CUPTI ms {run['cupti_kernel_ms']}; clocks "
                  f"{run['clock_notes']}", flush=True)
            # after every task, so a run stopped at its time limit keeps what it measured
            write_result(args.out, {"warmup_ms": args.warmup_ms, "evaluations": args.evaluations,
                                    "tasks": rows, "clock_monitor_error": clocks.error})
    print_table(rows)
    return 0


def print_table(rows: list[dict]) -> None:
    print("\n| repeatability (5 evaluations, longest configuration) | median | spread of medians (target ≤ "
          "1% for ≥ 50 µs) | spread of speedups vs eager | kernel-only (CUPTI) after each evaluation: "
          "spread (µs) | vs ncu gpu__time_duration (target ±5%) | vs ncu, the timer's own cost (an empty "
          "function, same run) taken off | net: each evaluation's median less its own timer cost: spread "
          "(µs) | SM clock per evaluation (MHz) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ours = statistics.median(r["medians_ms"]) * 1000
        ncu = "not measured: " + r["ncu_note"][:120] if r["ncu_median_ms"] is None else \
            f"{r['relative_difference_vs_ncu'] * 100:+.2f}% (ncu {r['ncu_median_ms'] * 1000:.1f} µs)"
        speed = "-" if r["speedup_spread"] is None else f"{r['speedup_spread'] * 100:.2f}%"
        cupti = "-" if r["cupti_spread"] is None else \
            f"{r['cupti_spread'] * 100:.2f}% ({_us(r['cupti_kernel_ms'])})"
        corrected = "-"
        overheads = [o for o in r.get("timer_overhead_ms", []) if o is not None]
        if r["ncu_median_ms"] and overheads:
            net_ms = statistics.median(r["medians_ms"]) - statistics.median(overheads)
            corrected = f"{(net_ms - r['ncu_median_ms']) / r['ncu_median_ms'] * 100:+.2f}% (timer " \
                        f"{statistics.median(overheads) * 1000:.1f} µs)"
        nets = net_medians_ms(r)
        net = "-" if spread_of(nets) is None else f"{spread_of(nets) * 100:.2f}% ({_us(nets)})"
        sm = ", ".join("-" if c["sm_mhz_median"] is None else f"{c['sm_mhz_median']:.0f}"
                       for c in r["clocks"])
        print(f"| {r['task']}/{r['config']} | {ours:.1f} µs | {r['spread'] * 100:.2f}% "
              f"({_us(r['medians_ms'])}) | {speed} | {cupti} | {ncu} | {corrected} | {net} | {sm} |")


def net_medians_ms(row: dict) -> list[float | None]:
    """Each evaluation's median less the timer cost measured in that same evaluation (None where the
    cost was not measured)."""
    return [None if o is None else m - o for m, o in zip(row["medians_ms"], row.get("timer_overhead_ms") or
                                                          [None] * len(row["medians_ms"]), strict=True)]


def _us(values_ms: list[float | None]) -> str:
    return ", ".join("-" if m is None else f"{m * 1000:.1f}" for m in values_ms)


if __name__ == "__main__":
    sys.exit(main())
