"""Does the L2 state the timing lead leaves behind slow the timed kernel down? A GPU experiment, not a test.

A plain write over >= 2x L2 (torch's fill) leaves L2 full of DIRTY lines: each line the timed kernel
brings in first evicts one that must be written back to DRAM. Nsight Compute's `--cache-control all`
invalidates instead, so after a plain write ncu reads memory-bound kernels faster than a kernel-only
CUPTI time. The lead (cudaperf.lead) therefore ends by reading 2x L2 of its buffer back. Here a read-only
kernel (`torch.sum`) is timed, kernel only (events right around it), after three states:

- `memset`: torch's fill of the same buffer (dirty L2);
- `lead`: the lead as timing.py queues it (write, then the clean read);
- `lead+read`: the lead, then a read of a separate 2x L2 buffer (L2 surely full of clean lines).

States are interleaved call by call; medians over `--calls`. `lead` should match `lead+read`; `memset`
shows what the clean read saves. Results: benchmarks/results/2026-12-03-session7/ (dev/LOG.md, timing).

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
STATES = ("memset", "lead", "lead+read")


def time_states(x, lead, clean, calls: int) -> dict[str, float]:
    """Median kernel time (µs) of `x.sum()` after each state, interleaved call by call."""
    import torch

    samples: dict[str, list[float]] = {s: [] for s in STATES}
    for i in range(calls + 3):
        for state in STATES:
            if state == "memset":
                lead.buffer.zero_()
            else:
                lead()
            if state == "lead+read":
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

    from cudaperf.lead import Lead
    from cudaperf.timing import default_l2_flush_bytes, lead_sized_flush_bytes

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=60)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no GPU: nothing to measure", file=sys.stderr)
        return 2
    l2x2 = default_l2_flush_bytes("cuda:0")
    lead = Lead(torch.device("cuda:0"), lead_sized_flush_bytes("cuda:0"), l2x2)
    clean = torch.ones(l2x2 // 4, dtype=torch.float32, device="cuda")
    rows = []
    print(f"| read (x.sum()), lead {lead.kind} | after memset µs | after lead µs | after lead + read µs | "
          "memset / lead+read | lead / lead+read |")
    print("|---|---|---|---|---|---|")
    for mib in SIZES_MIB:
        x = torch.randn(mib << 18, device="cuda")  # mib MiB of float32
        med = time_states(x, lead, clean, args.calls)
        rows.append({"mib": mib, **{f"{s}_us": v for s, v in med.items()}})
        ref = med["lead+read"]
        print(f"| {mib} MiB | {med['memset']:.1f} | {med['lead']:.1f} | {ref:.1f} | "
              f"{med['memset'] / ref:.3f} | {med['lead'] / ref:.3f} |", flush=True)
    write_result(args.out, {"l2_flush_bytes": l2x2, "lead_kind": lead.kind, "calls": args.calls,
                            "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
