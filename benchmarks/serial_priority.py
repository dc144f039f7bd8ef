"""What keeps the serial-C baseline steady while other processes load the CPU: a raised thread priority, or
a CPU of its own (`cudaperf.host_timing`, the default protocol)?

The dataset measurement times the serial C reference in one child while the other children compile on the
same cores. Two answers are compared: `measure --raised-priority` (off by default;
`datasets.measure.task_measurement.raised_priority`) raises the timing thread's priority; the host-timing
protocol keeps every other process off a reserved CPU and pins the timing thread to it. This benchmark
reproduces the situation on any machine: the serial references of a few C tasks (their "large"
configuration) are timed as the measurement times them (fresh copies, calls until `--budget-ms` is
spent, the median), in rounds. Conditions, in one go: an idle CPU (normal and raised priority, the order
alternating), `--load-factor` x cores busy processes at nice 0 on every CPU (the same two modes), and the
same busy processes kept off the reserved CPU with the timing thread pinned to it ("isolated"; on a
machine with fewer CPUs than `host_timing.MIN_CPUS` the highest CPU is reserved for the benchmark
anyway). Per task, condition and mode: the median over rounds and the spread of the round medians
(IQR / median, and max / min).

    python3 benchmarks/serial_priority.py [--rounds 15] [--out FILE.json]

Needs root (or CAP_SYS_NICE) for the raised runs; without it they are reported as not run.

Not covered: memory-bandwidth contention (the busy processes only spin), CPU boost clocks, GPU timing.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from cudaperf.datasets import registry
from cudaperf.datasets.measure.task_measurement import raised_priority, time_serial
from cudaperf.host_timing import pinned, timing_cpus
from cudaperf.tasks import cref
from cudaperf.tasks.ctask import from_json, make_inputs

FAMILIES = ("stencil2d", "map", "reduce_rows", "histogram")


RESERVED = timing_cpus(min_cpus=2)  # the CPU(s) the "isolated" condition keeps for the timing thread


def _spin(keep_off: frozenset[int] = frozenset()) -> None:
    if keep_off:
        os.sched_setaffinity(0, os.sched_getaffinity(0) - keep_off)
    while True:
        pass


def _samples(ctask, build, values, budget_ms: float, mode: str) -> float | None:
    """One median as the measurement takes it: at the normal or a raised priority, or pinned."""
    def run() -> float:
        return statistics.median(time_serial(lambda fresh: cref.call(ctask, build, fresh), values, budget_ms))

    if mode == "normal":
        return run()
    if mode == "pinned":
        with pinned(RESERVED) as cpus:
            return run() if cpus else None
    with raised_priority() as nice:
        return run() if nice is not None else None


def _spread(values: list[float]) -> dict[str, float]:
    q = statistics.quantiles(values, n=4)
    median = statistics.median(values)
    return {"median_ms": median, "iqr_over_median": (q[2] - q[0]) / median,
            "max_over_min": max(values) / min(values)}


def measure_task(task, rounds: int, budget_ms: float, modes: tuple[str, ...]) -> dict[str, list[float]]:
    ctask = from_json(task.text)
    config = ctask.config("large")
    build = cref.build_reference(ctask)
    values = make_inputs(ctask, config, seed=0)
    out: dict[str, list[float]] = {mode: [] for mode in modes}
    for r in range(rounds):
        for mode in modes if r % 2 == 0 else modes[::-1]:
            median = _samples(ctask, build, values, budget_ms, mode)
            if median is not None:
                out[mode].append(median)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--budget-ms", type=float, default=300.0, help="as MeasureOptions.serial_budget_ms")
    parser.add_argument("--load-factor", type=float, default=2.0, help="busy processes per core")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    tasks = [registry.build_index(0, families=[f])[0] for f in FAMILIES]
    cores = os.cpu_count() or 1
    result: dict = {"cores": cores, "rounds": args.rounds, "load_processes": int(args.load_factor * cores),
                    "reserved_cpus": sorted(RESERVED), "tasks": {}}
    conditions = {"idle": ("normal", "raised"), "loaded": ("normal", "raised"), "isolated": ("pinned",)}
    for condition, modes in conditions.items():
        spinners = []
        if condition != "idle":
            keep_off = RESERVED if condition == "isolated" else frozenset()
            spinners = [multiprocessing.Process(target=_spin, args=(keep_off,), daemon=True)
                        for _ in range(result["load_processes"])]
            for p in spinners:
                p.start()
        try:
            for task in tasks:
                runs = measure_task(task, args.rounds, args.budget_ms, modes)
                stats = {mode: _spread(v) for mode, v in runs.items() if len(v) >= 4}
                result["tasks"].setdefault(task.task_id, {})[condition] = stats
                print(f"{condition:8s} {task.task_id:28s} " + "  ".join(
                    f"{mode}: median {s['median_ms']:.3f} ms, IQR/median {s['iqr_over_median']:.1%}, "
                    f"max/min {s['max_over_min']:.2f}" for mode, s in stats.items()), flush=True)
        finally:
            for p in spinners:
                p.kill()
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
