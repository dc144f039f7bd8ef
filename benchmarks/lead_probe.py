"""Where does side-stream work run relative to the timing lead? A GPU probe, not a test.

The lead (cudaperf.lead) is meant to hold every SM slot until its blocks exit, yet a kernel queued on a
stream that does not wait for the timing stream is still timed shorter than its true time. This probe
finds out when such side work runs. Each pass queues, on the timing stream, a marker kernel (one thread
writes the GPU's globaltimer), the lead, and a second marker (it runs when the lead is done, where timing.py
records its start event); then, at once, a side kernel (our own elementwise kernel, 32 Mi floats, one
block per 256 elements) on a stream that does not wait. Recorded with globaltimer (ns):

- both markers; the side kernel's first block entry and last block exit;
- for the persistent lead, per block: entry, exit and SM id (`Lead(trace=...)`).

Printed per case, as medians over passes in µs from the first marker: the lead's end (second marker), the
side kernel's first entry and last exit; for the persistent lead also the spread of block entries, the
first and last block exit, and the fewest and most lead blocks seen on one SM. Cases: `persistent`,
`memset` (torch's fill), and `persistent+gate`: the host launches the side kernel only once every lead
block is on an SM (`Lead(wait_resident_s=...)`; `gate_wait_us` is how long the host waited). A side
entry before the lead's end means the side kernel got SM slots during the lead; if `persistent+gate`
keeps it out and `persistent` does not, the side kernel was getting in before the lead's blocks were.

The second table: the timed call itself (_CudaClock.time_call's sequence) with a torch.mul of the test's
size between two markers, on the timing stream (honest) or an unjoined side stream (sneaky), once with the
lead as it is and once with `exit_together` (a grid barrier before exit, so no SM slot frees before the
lead is done): where the start and end events fall against the lead's block exits and the work's markers.
The third table times the test's call alone (no markers), with the timing stream at default and at the
highest priority (the side stream at default): the lead (lead event to start event) and the timed call.

Results and what they showed: benchmarks/results/2026-12-03-session8/ and dev/LOG.md (evaluation: timing).

    python3 benchmarks/lead_probe.py [--passes 30] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import write_result

PROBE_SOURCE = r"""
__device__ __forceinline__ unsigned long long now_ns() {
    unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t;
}
extern "C" __global__ void probe_marker(unsigned long long* out) { out[0] = now_ns(); }
extern "C" __global__ void probe_side(const float* x, float* y, long long n, unsigned long long* t) {
    if (threadIdx.x == 0) atomicMin(&t[0], now_ns());
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
    __syncthreads();
    if (threadIdx.x == 0) atomicMax(&t[1], now_ns());
}
"""
SIDE_ELEMENTS = 1 << 25
SIDE_THREADS = 256


def one_pass(kind: str, lead, kernels, side_stream, x, y):
    """Marker, lead, marker on the current stream, the side kernel on `side_stream`; synchronised.
    Returns (markers ns [2], side ns [first entry, last exit], lead trace [blocks x 3] or None, the
    host's wait for the lead's blocks in s or None)."""
    import torch

    marker, side = kernels
    marks = torch.zeros(2, dtype=torch.int64, device="cuda")
    side_t = torch.tensor([-1, 0], dtype=torch.int64, device="cuda")  # -1: UINT64_MAX for atomicMin
    trace = (torch.zeros(lead.shape.grid_blocks * 3, dtype=torch.int64, device="cuda")
             if kind.startswith("persistent") else None)
    torch.cuda.synchronize()
    marker(1, 1, marks[0:1])
    waited_s = None
    if kind == "memset":
        lead.buffer.zero_()
    else:
        waited_s = lead(trace, wait_resident_s=0.01 if kind == "persistent+gate" else 0.0)
    marker(1, 1, marks[1:2])
    with torch.cuda.stream(side_stream):  # no wait on the current stream, like the sneaky candidate
        side(SIDE_ELEMENTS // SIDE_THREADS, SIDE_THREADS, x, y, SIDE_ELEMENTS, side_t)
    torch.cuda.synchronize()
    return (marks.tolist(), side_t.tolist(), (trace.view(-1, 3).tolist() if trace is not None else None),
            waited_s)


TIMED_ELEMENTS = 1 << 23  # the size of tests/gpu/test_timing_gpu.py's unjoined side kernel


def timed_pass(where: str, lead, marker, side_stream, src, dst):
    """_CudaClock.time_call's sequence (lead event, lead, start event, call, device sync, end event) with
    a marker before it and the call's torch.mul between two markers, on the timing stream (`where` ==
    "honest") or on an unjoined side stream ("sneaky"). Returns (markers ns [before, work start, work
    end], lead trace, ms from the lead event to the start event, ms from start to end)."""
    import torch

    marks = torch.zeros(3, dtype=torch.int64, device="cuda")
    trace = torch.zeros(lead.shape.grid_blocks * 3, dtype=torch.int64, device="cuda")
    lead_ev, start, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
    torch.cuda.synchronize()
    marker(1, 1, marks[0:1])
    lead_ev.record()
    lead(trace)
    start.record()
    with torch.cuda.stream(side_stream if where == "sneaky" else torch.cuda.current_stream()):
        marker(1, 1, marks[1:2])
        torch.mul(src, 2.0, out=dst)
        marker(1, 1, marks[2:3])
    torch.cuda.synchronize()
    end.record()
    end.synchronize()
    return marks.tolist(), trace.view(-1, 3).tolist(), lead_ev.elapsed_time(start), start.elapsed_time(end)


def bare_pass(where: str, lead, side_stream, src, dst) -> tuple[float, float]:
    """_CudaClock.time_call's sequence around the test's call alone (no markers) on the current stream:
    (ms from the lead event to the start event, ms from start to end)."""
    import torch

    lead_ev, start, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
    torch.cuda.synchronize()
    lead_ev.record()
    lead()
    start.record()
    with torch.cuda.stream(side_stream if where == "sneaky" else torch.cuda.current_stream()):
        torch.mul(src, 2.0, out=dst)
    torch.cuda.synchronize()
    end.record()
    end.synchronize()
    return lead_ev.elapsed_time(start), start.elapsed_time(end)


def bare_cases(leads: dict, side_stream, src, dst, passes: int) -> list[dict[str, float]]:
    """Every lead x (honest, sneaky) x (timing stream of default priority, of the highest priority):
    medians of the lead (event to start event) and of the timed call, µs."""
    import torch

    high = torch.cuda.Stream(priority=-100)  # clamped to the device's highest
    rows = []
    for priority, stream in (("default", torch.cuda.current_stream()), ("high", high)):
        for name, one in leads.items():
            for where in ("honest", "sneaky"):
                with torch.cuda.stream(stream):
                    got = [bare_pass(where, one, side_stream, src, dst) for _ in range(passes + 3)][3:]
                rows.append({"kind": f"{where}, {name}, {priority}",
                             "lead_us": statistics.median(g[0] for g in got) * 1e3,
                             "timed_us": statistics.median(g[1] for g in got) * 1e3})
    return rows


def summarise_timed(kind: str, passes: list) -> dict[str, float]:
    """Medians over passes, µs from the marker before the lead event (the start and end events placed by
    their elapsed times from the lead event, which follows that marker at once)."""
    rows: dict[str, list[float]] = {}
    for marks, trace, lead_ms, timed_ms in passes:
        t0 = marks[0]
        exits = [r[1] for r in trace]
        for key, us in (("lead_first_exit_us", (min(exits) - t0) / 1e3),
                        ("lead_last_exit_us", (max(exits) - t0) / 1e3),
                        ("start_event_us", lead_ms * 1e3), ("work_start_us", (marks[1] - t0) / 1e3),
                        ("work_end_us", (marks[2] - t0) / 1e3), ("end_event_us", (lead_ms + timed_ms) * 1e3),
                        ("timed_us", timed_ms * 1e3)):
            rows.setdefault(key, []).append(us)
    return {"kind": kind, **{k: statistics.median(v) for k, v in rows.items()}}


def summarise(kind: str, passes: list) -> dict[str, float]:
    """Medians over passes, µs from the first marker."""
    rows: dict[str, list[float]] = {}

    def add(key: str, ns: float) -> None:
        rows.setdefault(key, []).append(ns / 1e3)

    for marks, side_t, trace, waited_s in passes:
        t0 = marks[0]
        if waited_s is not None:
            rows.setdefault("gate_wait_us", []).append(waited_s * 1e6)
        add("lead_end_us", marks[1] - t0)
        add("side_first_entry_us", side_t[0] - t0)
        add("side_last_exit_us", side_t[1] - t0)
        if trace:
            entries, exits = [r[0] for r in trace], [r[1] for r in trace]
            per_sm: dict[int, int] = {}
            for r in trace:
                per_sm[r[2]] = per_sm.get(r[2], 0) + 1
            add("lead_first_entry_us", min(entries) - t0)
            add("lead_last_entry_us", max(entries) - t0)
            add("lead_first_exit_us", min(exits) - t0)
            add("lead_last_exit_us", max(exits) - t0)
            rows.setdefault("blocks_per_sm_min", []).append(min(per_sm.values()))
            rows.setdefault("blocks_per_sm_max", []).append(max(per_sm.values()))
            rows.setdefault("sms_used", []).append(len(per_sm))
    return {"kind": kind, **{k: statistics.median(v) for k, v in rows.items()}}


def print_table(title: str, results: list[dict]) -> None:
    keys = sorted({k for r in results for k in r if k != "kind"})
    print(f"| {title} | " + " | ".join(r["kind"] for r in results) + " |")
    print("|---|" + "---|" * len(results))
    for k in keys:
        print(f"| {k} | " + " | ".join(f"{r[k]:.1f}" if k in r else "" for r in results) + " |")


def main() -> int:
    import torch

    from cudaperf import cuda
    from cudaperf.lead import LEAD_CHUNK_BYTES, Lead
    from cudaperf.timing import default_l2_flush_bytes, lead_sized_flush_bytes

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passes", type=int, default=30)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no GPU: nothing to measure", file=sys.stderr)
        return 2
    lead = Lead(torch.device("cuda:0"), lead_sized_flush_bytes("cuda:0"), default_l2_flush_bytes("cuda:0"))
    mod = cuda.load(PROBE_SOURCE)
    kernels = (mod.probe_marker, mod.probe_side)
    side_stream = torch.cuda.Stream()
    x = torch.randn(SIDE_ELEMENTS, device="cuda")
    y = torch.empty_like(x)
    kinds = ("persistent", "memset", "persistent+gate") if lead.kind == "persistent" else ("memset",)
    results = []
    for kind in kinds:
        passes = [one_pass(kind, lead, kernels, side_stream, x, y) for _ in range(args.passes + 3)][3:]
        results.append(summarise(kind, passes))
    print_table("probe (µs from the marker before the lead)", results)
    timed, bare = [], []
    if lead.kind == "persistent":
        together = Lead(torch.device("cuda:0"), lead.flush_bytes, lead.clean_chunks * LEAD_CHUNK_BYTES,
                        exit_together=True)
        src, dst = x[:TIMED_ELEMENTS], y[:TIMED_ELEMENTS]
        for name, one in (("lead", lead), ("together", together)):
            for where in ("honest", "sneaky"):
                passes = [timed_pass(where, one, kernels[0], side_stream, src, dst)
                          for _ in range(args.passes + 3)][3:]
                timed.append(summarise_timed(f"{where}, {name}", passes))
        print_table("timed call (µs from the marker before the lead event)", timed)
        bare = bare_cases({"lead": lead, "together": together}, side_stream, src, dst, args.passes)
        print_table("timed call alone (µs)", bare)
    print(f"lead: {lead.kind}, shape {lead.shape}, {lead.flush_bytes >> 20} MiB, "
          f"clean {lead.clean_chunks} chunks")
    write_result(args.out, {"lead_kind": lead.kind,
                            "grid_blocks": lead.shape.grid_blocks if lead.shape else 0,
                            "passes": args.passes, "results": results, "timed": timed,
                            "bare": bare})
    return 0


if __name__ == "__main__":
    sys.exit(main())
