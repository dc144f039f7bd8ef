"""Does the L2 state our flush leaves behind slow the timed kernel down? A GPU experiment, not a test.

The timing protocol (cudaperf.timing) writes zeros over >= 2x L2 before every timed call, so the timed
kernel starts with L2 full of DIRTY lines: each line it brings in first evicts one that must be written
back to DRAM. Nsight Compute's `--cache-control all` invalidates instead, and on the H200 ncu read some
memory-bound kernels 4-10% faster than our CUPTI kernel-only time (dev/LOG.md, session 6). Here a
read-only kernel (`torch.sum`) is timed, kernel only (events right around it), after two states:

- `dirty`: the protocol's lead write, as is (it also hides the host's launch path);
- `clean`: the same write, then a read of a separate 2x L2 buffer (L2 ends full of clean lines).

States are interleaved call by call; medians over `--calls`. If `dirty` is slower than `clean` by the
write-back of up to one L2 (~60 MB, ~15 µs at 4 TB/s), the protocol should end its lead with a read pass.

    python3 benchmarks/flush_state.py [--calls 60] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import write_result

SIZES_MIB = (16, 64, 256)
STATES = ("dirty", "clean")


def time_states(x, lead, clean, calls: int) -> dict[str, float]:
    """Median kernel time (µs) of `x.sum()` after each state, interleaved call by call."""
    import torch

    samples: dict[str, list[float]] = {s: [] for s in STATES}
    for i in range(calls + 3):
        for state in STATES:
            lead.zero_()  # the protocol's lead: evicts L2, keeps the GPU busy while the host queues the rest
            if state == "clean":
                clean.sum()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            x.sum()
            end.record()
            end.synchronize()
            if i >= 3:
                samples[state].append(start.elapsed_time(end) * 1e3)
    return {s: statistics.median(v) for s, v in samples.items()}


def main() -> int:
    import torch

    from cudaperf.timing import default_l2_flush_bytes, lead_sized_flush_bytes

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=60)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no GPU: nothing to measure", file=sys.stderr)
        return 2
    l2x2 = default_l2_flush_bytes("cuda:0")
    lead = torch.empty(lead_sized_flush_bytes("cuda:0") // 4, dtype=torch.int32, device="cuda")
    clean = torch.ones(l2x2 // 4, dtype=torch.float32, device="cuda")
    rows = []
    print("| read (x.sum()) | dirty L2 (our lead) µs | clean L2 µs | dirty / clean |")
    print("|---|---|---|---|")
    for mib in SIZES_MIB:
        x = torch.randn(mib << 18, device="cuda")  # mib MiB of float32
        med = time_states(x, lead, clean, args.calls)
        rows.append({"mib": mib, **{f"{s}_us": v for s, v in med.items()}})
        print(f"| {mib} MiB | {med['dirty']:.1f} | {med['clean']:.1f} | {med['dirty'] / med['clean']:.3f} |",
              flush=True)
    write_result(args.out, {"l2_flush_bytes": l2x2, "calls": args.calls, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
