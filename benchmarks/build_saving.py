"""CPU time of the build pool on a batch where some candidates are statically rejected, before and after the
static verdict moved ahead of the build (issue 18, item 4).

One run, two batches of the same candidates, each on a cold cache of its own: "before" with
`EvalConfig(static_gate_first=False)` (every build submitted up front, the verdict waiting for it, as
before the change) and "after" with the default (a rejected candidate is never built). The candidates are
the example solutions of `--format` (load_inline by default: ~50 s of CPU each on the H200), each a
distinct variant so no build is shared; `--rejected` of them get a forbidden import added at the top (the
static policy rejects them; their CUDA is unchanged, so "before" builds them in full). The evaluator runs
with `device="none"`: only the build pool and the static checks run, so the CPU time of the evaluator's
finished child processes (`getrusage(RUSAGE_CHILDREN)`: the pool's processes and the compilers they ran,
counted once the pool shuts down) is the build pool's.

    python3 benchmarks/build_saving.py [--format inline|fast] [--candidates 4] [--rejected 2] [--out FILE]

Prints per batch: CPU seconds, wall seconds, builds run, and the outcome of every candidate.

Not covered: GPU work (no worker runs), builds shared through the cache (each batch is cold).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import example_pairs, write_result

from cudaperf.evaluate import EvalConfig, Evaluator
from cudaperf.solutions import solution_from_text

REJECTION = "import subprocess  # the static policy's forbidden_import: rejected before anything runs\n"


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def candidates(fmt: str, n: int, rejected: int) -> list[tuple]:
    """n distinct example candidates; every other one of the first 2 x `rejected` made rejectable."""
    pairs = example_pairs(fmt, n)
    out = []
    for i, (task, sol) in enumerate(pairs):
        if i % 2 == 1 and i // 2 < rejected:
            sol = solution_from_text(REJECTION + sol.source, f"{sol.solution_id}-rejected")
        out.append((task, sol))
    return out


def run_batch(pairs: list[tuple], gate_first: bool, workers: int) -> dict:
    """The batch on a cold cache; CPU seconds of the build pool (its processes end at close)."""
    with tempfile.TemporaryDirectory(prefix="build-saving-") as cache:
        cpu0, wall0 = _children_cpu_s(), time.perf_counter()
        config = EvalConfig(device="none", cache_dir=cache, build_workers=workers, analyze=False,
                            static_gate_first=gate_first)
        with Evaluator(config) as ev:
            results = list(ev.evaluate_many(pairs))
        wall, cpu = time.perf_counter() - wall0, _children_cpu_s() - cpu0
    return {
        "static_gate_first": gate_first, "cpu_s": round(cpu, 2), "wall_s": round(wall, 2),
        "builds_run": sum(r.build is not None for r in results),
        "outcomes": {r.solution_id: r.outcome.value for r in results},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--format", default="inline", choices=("inline", "fast"))
    parser.add_argument("--candidates", type=int, default=4)
    parser.add_argument("--rejected", type=int, default=2)
    parser.add_argument("--workers", type=int, default=0, help="build processes (0: one per candidate)")
    parser.add_argument("--out", default=None, help="write the figures as JSON here")
    args = parser.parse_args()
    pairs = candidates(args.format, args.candidates, args.rejected)
    workers = args.workers or min(len(pairs), os.cpu_count() or 1)
    batches = [run_batch(pairs, gate_first=False, workers=workers),
               run_batch(pairs, gate_first=True, workers=workers)]
    for b in batches:
        label = "after (verdict first)" if b["static_gate_first"] else "before (build first)"
        print(f"{label:24s} build-pool CPU {b['cpu_s']:8.2f} s   wall {b['wall_s']:7.2f} s   "
              f"builds run {b['builds_run']}/{len(pairs)}")
    for sid, outcome in batches[1]["outcomes"].items():
        print(f"  {sid}: {outcome}")
    saved = batches[0]["cpu_s"] - batches[1]["cpu_s"]
    print(f"saved {saved:.2f} CPU s of {batches[0]['cpu_s']:.2f} ({args.rejected} of {len(pairs)} rejected; "
          f"format {args.format}, {workers} build processes)")
    write_result(args.out, {"benchmark": "build_saving", "format": args.format, "candidates": len(pairs),
                            "rejected": args.rejected, "batches": batches, "saved_cpu_s": round(saved, 2)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
