"""Throughput of the structural analysis (kernels per second), single process, on this machine.

    python3 scripts/bench_analysis.py [--repeat 3] [--out DIR]

Inputs: the labelled validation suite (src/cudaperf/analysis/validation) and the example solutions
(fast and load_inline formats). Three modes, each timed end to end through `analyze_source`:
- static: tree-sitter analysis only (`compile=False`);
- ptxas: plus NVRTC + ptxas -v for registers, shared memory, spills and occupancy (`sass=False`), with the
  compile cache off so every kernel is really compiled;
- ptxas+sass: plus one `cuobjdump -sass` per unit.
Targets (issue 3): >= 50 kernels/s static, >= 10 kernels/s with ptxas, on the 2-core CPU machine.
Writes bench_analysis.md/.json under --out (default $OUT or benchmarks/results).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from cudaperf.analysis import analyze_source  # after the path setup: bare checkouts work
from cudaperf.analysis.validation import all_cases

MODES = {"static": {"compile": False}, "ptxas": {"compile": True, "sass": False},
         "ptxas+sass": {"compile": True, "sass": True}}


def inputs() -> list[tuple[str, dict]]:
    """(source, analyze_source keyword arguments) for every unit of work."""
    out = [(c.source, {"kind": "cuda", "launch": c.launch, "sizes": c.sizes}) for c in all_cases()]
    for fmt in ("fast", "inline"):
        for path in sorted((ROOT / "src" / "cudaperf" / "examples" / "solutions" / fmt).glob("*.py")):
            out.append((path.read_text(), {"kind": "auto"}))
    return out


def run_mode(work: list[tuple[str, dict]], options: dict) -> tuple[int, float, int]:
    """(kernels analysed, seconds, reports with any diagnostic)."""
    kernels, noisy = 0, 0
    t0 = time.perf_counter()
    for source, kwargs in work:
        report = analyze_source(source, use_cache=False, **kwargs, **options)
        kernels += len(report.kernels)
        noisy += bool(report.diagnostics)
    return kernels, time.perf_counter() - t0, noisy


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3,
                        help="timed repetitions per mode (the median run is reported, with min and max)")
    parser.add_argument("--modes", default=",".join(MODES),
                        help="comma-separated subset of " + ", ".join(MODES))
    parser.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args()
    work = inputs()
    analyze_source(work[0][0], compile=True, sass=False, **work[0][1])  # imports, NVRTC load: not timed
    results = {}
    for mode in [m for m in args.modes.split(",") if m in MODES]:
        runs = sorted((run_mode(work, MODES[mode]) for _ in range(max(1, args.repeat))), key=lambda r: r[1])
        kernels, seconds, _noisy = runs[len(runs) // 2]
        results[mode] = {"kernels": kernels, "seconds": round(seconds, 3), "repeats": len(runs),
                         "kernels_per_s": round(kernels / seconds, 1), "units": len(work),
                         "seconds_min": round(runs[0][1], 3), "seconds_max": round(runs[-1][1], 3)}
    header = [f"# Structural analysis throughput ({time.strftime('%Y-%m-%d')})", "",
              (f"- machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
              f"Python {platform.python_version()}"),
              f"- inputs: {len(work)} units (validation suite + examples)",
              "", "| mode | kernels | median s (min-max) | kernels/s (median run) |", "|---|---|---|---|"]
    rows = [f"| {m} | {r['kernels']} | {r['seconds']} ({r['seconds_min']}-{r['seconds_max']}) | "
            f"{r['kernels_per_s']} |" for m, r in results.items()]
    text = "\n".join(header + rows)
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_analysis.md").write_text(text + "\n")
    (out / "bench_analysis.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
