"""What the baselines' memory mechanism (`cudaperf.execute.baseline_memory`) does to their timed samples,
and what its scrub costs per call. An experiment, not a test.

A refereed worker routes each baseline call (`BaselineMemory.around`: inside the timed window) and
scrubs after it (`BaselineMemory.scrub`, in the disposal: outside it). Here the same eager-like model is
timed three ways in ONE interleaved bench (`timing.bench_interleaved_report`, the worker's protocol),
each a `timing.Disposed` function whose output is overwritten after its call as the worker does:

- `plain`: as an unrefereed worker calls it (the output's fill only);
- `plain_again`: the same again (how far two identical functions differ: the noise);
- `routed`: routed, and scrubbed after each call (the output's fill, then `scrub`, then the wait).

Per model and size: the median of each function's median over `--runs` benches, `routed / plain` beside
`plain_again / plain`, and the scrub's host time per call (and on CUDA the blocks and bytes it wrote).
On the CPU the samples of `routed` include glibc's fills at malloc and free (M_PERTURB): its ratio is what
that does to the eager baseline's CPU median. On CUDA the routing is host work inside the window (hidden
behind the lead), the scrub outside it, so the ratio should stay within the noise.

    python3 benchmarks/baseline_memory.py --device cpu [--runs 7] [--sizes N ...] [--out FILE.json]
    python3 benchmarks/baseline_memory.py --device cuda [--runs 7] [--compile] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import write_result

# (name, elements of each input): an elementwise chain (temporaries as large as the output), a linear
# layer (a matmul's workspace and output), the unit tests' model with its answer copied at the end
CPU_SIZES = (256, 16_384, 1_048_576)
CUDA_SIZES = (4_096, 1_048_576, 67_108_864)


def models(device, elements: int):
    """(name, module, inputs) for one size."""
    import torch
    import torch.nn as nn

    class Chain(nn.Module):
        def forward(self, x):
            return torch.relu(x * 2 + 1) * 3 - x

    class Copied(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.linear = nn.Linear(n, n)

        def forward(self, x, z):
            return (torch.relu(self.linear(x)) * 2 + z).clone()

    n = 256 if elements >= 65_536 else 16
    rows = max(1, elements // n)
    x = torch.randn(elements, device=device)
    pair = [torch.randn(rows, n, device=device), torch.randn(rows, n, device=device)]
    return [("chain", Chain().to(device), [x]), ("linear_copied", Copied(n).to(device), pair)]


def bench_once(fns, sets, device, budget_ms: float):
    from cudaperf.timing import bench_interleaved_report

    return bench_interleaved_report(fns, sets, budget_ms=budget_ms, warmup_ms=budget_ms / 4, device=device,
                                    measure_overhead=False, min_reps=50, max_reps=400)


def measure(name, module, inputs, device, runs: int, budget_ms: float, compiled: bool) -> dict:
    import torch

    from cudaperf.correctness import clone_inputs, flatten_tensors
    from cudaperf.execute.baseline_memory import BaselineMemory
    from cudaperf.execute.device_state import synchronize
    from cudaperf.execute.torch_judge import scrub
    from cudaperf.timing import Disposed, compile_baseline

    memory = BaselineMemory.for_device(device)
    if not memory.available:
        raise SystemExit(f"the mechanism is not in effect here: {memory.failure}")
    model = compile_baseline(module) if compiled else module  # the worker's compile baseline
    sets = [clone_inputs(inputs) for _ in range(3)]

    def call(given):
        return model(*given)

    def dispose_plain(out):
        scrub(list(flatten_tensors(out)))
        synchronize(device)

    def dispose_routed(out):
        scrub(list(flatten_tensors(out)))
        memory.scrub()
        synchronize(device)

    fns = {"plain": Disposed(call, dispose_plain), "plain_again": Disposed(call, dispose_plain),
           "routed": Disposed(memory.around(call), dispose_routed)}
    with torch.no_grad():
        bench_once(fns, sets, device, budget_ms)  # first calls, compile, allocator segments
        medians = {k: [] for k in fns}
        began, calls_before, seconds_before = time.perf_counter(), memory.calls, memory.seconds
        for _ in range(runs):
            report = bench_once(fns, sets, device, budget_ms)
            for k in fns:
                medians[k].append(report.timings[k].median_ms)
        wall_s = time.perf_counter() - began
    calls = memory.calls - calls_before
    med = {k: statistics.median(v) for k, v in medians.items()}
    row = {"model": name + ("+compile" if compiled else ""), "elements": inputs[0].numel(),
           **{f"{k}_ms": v for k, v in med.items()},
           "routed_over_plain": med["routed"] / med["plain"],
           "noise_plain_again_over_plain": med["plain_again"] / med["plain"],
           "scrub_us_per_call": 1e6 * (memory.seconds - seconds_before) / max(calls, 1),
           "blocks_per_scrub": memory.blocks / max(memory.calls, 1),
           "bytes_per_scrub": memory.nbytes / max(memory.calls, 1), "bench_wall_s": wall_s,
           "mechanism": memory.describe()}
    memory.close()
    return row


def main() -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--budget-ms", type=float, default=None, help="per function and bench (default: "
                    "20 on the CPU, 50 on CUDA)")
    ap.add_argument("--compile", action="store_true", help="also the torch.compile'd models")
    ap.add_argument("--sizes", type=int, nargs="*", default=None, help="elements per input (default: "
                    f"{CPU_SIZES} on the CPU, {CUDA_SIZES} on CUDA)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no GPU: nothing to measure", file=sys.stderr)
        return 2
    budget = args.budget_ms or (50.0 if device.type == "cuda" else 20.0)
    sizes = args.sizes or (CUDA_SIZES if device.type == "cuda" else CPU_SIZES)
    rows = []
    print("| model | elements | plain ms | plain_again / plain | routed / plain | scrub µs per call | "
          "blocks, MB per scrub |")
    print("|---|---|---|---|---|---|---|")
    for elements in sizes:
        for name, module, inputs in models(device, elements):
            for compiled in (False, True) if args.compile else (False,):
                row = measure(name, module, inputs, device, args.runs, budget, compiled)
                rows.append(row)
                print(f"| {row['model']} | {row['elements']} | {row['plain_ms']:.4f} | "
                      f"{row['noise_plain_again_over_plain']:.3f} | {row['routed_over_plain']:.3f} | "
                      f"{row['scrub_us_per_call']:.0f} | {row['blocks_per_scrub']:.1f}, "
                      f"{row['bytes_per_scrub'] / 1e6:.3f} |", flush=True)
    print(f"[baseline-memory] {rows[0]['mechanism'] if rows else ''}")
    write_result(args.out, {"device": str(device), "runs": args.runs, "budget_ms": budget, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
