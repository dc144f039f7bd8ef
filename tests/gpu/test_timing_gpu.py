"""GPU properties of cudaperf.timing, cudaperf.sol and the allocator poison (H200; marker `gpu`).

What each test shows, and what to print on failure, is in its docstring. Run:
    python3 -m pytest -q -s tests/gpu/test_timing_gpu.py
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from cudaperf.correctness import compare, poison_allocator
from cudaperf.lead import Lead
from cudaperf.sol import bandwidth_gbps, peak_tflops, speed_of_light
from cudaperf.timing import (
    DEFAULT_LEAD_US,
    MAX_LEAD_LAUNCHES,
    BenchReport,
    bench_interleaved_report,
    default_l2_flush_bytes,
)

pytestmark = [pytest.mark.gpu, pytest.mark.timing]

DEVICE = "cuda:0"


def test_timing_of_a_known_kernel_is_stable():
    """A 256 MiB copy timed twice: each run's IQR is under 10% of its median, and the medians agree
    within 5%. (Prints both medians and spreads.)"""
    src = torch.randn(1 << 26, device=DEVICE)
    dst = torch.empty_like(src)
    runs = [bench_interleaved_report({"copy": lambda inputs: dst.copy_(inputs[0])}, [[src]], budget_ms=200,
                                     warmup_ms=20, device=DEVICE, seed=k) for k in range(2)]
    medians = [r.timings["copy"].median_ms for r in runs]
    print("copy medians ms", medians, "spreads", [r.timings["copy"].spread for r in runs],
          "overhead ms", [r.overhead.median_ms for r in runs])
    assert all(r.timings["copy"].spread < 0.10 for r in runs)
    assert abs(medians[0] - medians[1]) / min(medians) < 0.05
    # 2 x 256 MiB moved: within 0.5x..1.1x of the ceiling measured by sol
    achieved_gbps = 2 * src.nbytes / (medians[0] * 1e-3) / 1e9
    assert 0.5 * bandwidth_gbps(DEVICE) < achieved_gbps < 1.1 * bandwidth_gbps(DEVICE)


CHASE = r"""
extern "C" __global__ void chase(const int* __restrict__ next, int hops, int* out) {
  int j = 0;
  for (int h = 0; h < hops; ++h) j = __ldcg(next + j);  // L2-cached load: no L1 reuse inside the chain
  *out = j;
}
"""


def _pointer_chain(n_words: int, hops: int, seed: int = 0) -> torch.Tensor:
    """A cycle through `hops` distinct 128-byte lines of an `n_words` int32 buffer, in random order."""
    words_per_line = 32
    g = torch.Generator().manual_seed(seed)
    # not line 0
    lines = (torch.randperm(n_words // words_per_line - 1, generator=g)[:hops] + 1) * words_per_line
    chain = torch.zeros(n_words, dtype=torch.int32)
    chain[lines] = torch.roll(lines, -1).to(torch.int32)
    chain[0] = int(lines[0])  # the kernel starts at word 0
    return chain


def test_l2_flush_evicts_an_l2_resident_input():
    """The timing protocol's flush evicts data from L2. One thread follows a chain of 4,096 dependent
    loads through distinct lines of a 16 MiB buffer, so the kernel's time is load latency: after the
    flush every load goes to DRAM; after the flush and an untimed run of the same chain, every load hits
    L2. Latency, unlike bandwidth, is not hidden by launch overhead (an earlier version timed a 16 MiB
    `x.sum()`, which is overhead-bound: 14 us flushed against 17 us resident, see dev/LOG.md).
    Prints both medians in microseconds."""
    import statistics

    from cudaperf import cuda
    from cudaperf.timing import _CudaClock

    clock = _CudaClock(torch.device(DEVICE), default_l2_flush_bytes(DEVICE))
    hops = 4096
    chain = _pointer_chain(1 << 22, hops).to(DEVICE)
    out = torch.empty(1, dtype=torch.int32, device=DEVICE)
    kernel = cuda.compile(CHASE, "chase")
    samples: dict[str, list[float]] = {"flushed": [], "resident": []}
    for i in range(60):
        case = "flushed" if i % 2 == 0 else "resident"
        clock.lead()
        if case == "resident":
            kernel(1, 1, chain, hops, out)  # untimed: brings the chain's lines into L2
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        kernel(1, 1, chain, hops, out)
        end.record()
        end.synchronize()
        if i >= 4:
            samples[case].append(start.elapsed_time(end) * 1e3)
    cold, warm = statistics.median(samples["flushed"]), statistics.median(samples["resident"])
    print(f"4096 dependent loads after the flush: {cold:.1f} us; "
          f"after the flush and a warming run: {warm:.1f} us")
    assert cold > 1.3 * warm


def test_side_stream_work_is_not_faster_than_its_true_time():
    """Hack #4: a matmul launched on a side stream, returning at once. The full device synchronise before
    the end event makes it cost what the same matmul costs on the current stream; events on the current
    stream alone (shown for contrast) would report almost nothing."""
    a = torch.randn(4096, 4096, device=DEVICE)
    side = torch.cuda.Stream()

    def honest(inputs):
        return inputs[0] @ inputs[0]

    def sneaky(inputs):
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            out = inputs[0] @ inputs[0]
        return out

    report = bench_interleaved_report({"honest": honest, "sneaky": sneaky}, [[a]], budget_ms=100,
                                      warmup_ms=10, device=DEVICE)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    sneaky([a])
    end.record()  # what a current-stream-only harness would measure
    torch.cuda.synchronize()
    naive_ms = start.elapsed_time(end)
    honest_ms, sneaky_ms = report.timings["honest"].median_ms, report.timings["sneaky"].median_ms
    print(f"honest {honest_ms:.3f} ms, sneaky {sneaky_ms:.3f} ms, naive events {naive_ms:.3f} ms")
    assert report.timings["sneaky"].median_ms >= 0.9 * report.timings["honest"].median_ms
    assert report.clock_consistent


def _unjoined_side_kernel_report():
    """One run of a ~30 us elementwise kernel on the timing stream and the same kernel on a side stream
    that does not wait for the timing stream, so it is queued during the lead, before the start event."""
    src = torch.randn(1 << 23, device=DEVICE)
    dst = torch.empty_like(src)
    side = torch.cuda.Stream()

    def honest(inputs):
        return torch.mul(inputs[0], 2.0, out=dst)

    def sneaky(inputs):
        with torch.cuda.stream(side):  # no side.wait_stream(current): free to start at once
            torch.mul(inputs[0], 2.0, out=dst)
        return dst

    return bench_interleaved_report({"honest": honest, "sneaky": sneaky}, [[src]], budget_ms=100,
                                    warmup_ms=10, device=DEVICE)


@pytest.mark.xfail(strict=True, reason="known limit of CUDA-event timing, measured in sessions 7-8 (H200): "
                   "an unjoined side-stream kernel is timed at 16-24 us against 32-45 us; refused instead by "
                   "the static rule and the profiler's stream check (test_anticheat_gpu.py)")
def test_unjoined_side_stream_kernels_cannot_hide_in_the_lead():
    """What the timing protocol would ideally guarantee and does not (strict xfail: kept visible, and a
    pass would be reported): a kernel queued on an unjoined side stream costs at least 90% of the same
    kernel on the timing stream. H200, sessions 7-8: 11.3-18.6 us against 27.6-32.0 us. Measured by
    benchmarks/lead_probe.py: the side kernel cannot enter while the lead runs (every block resident,
    the side kernel's first block enters 3 us after the first lead block exits), but the start event
    comes 7-11 us later when a side grid waits for the lead's slots, and neither a lead whose blocks
    exit together nor a highest-priority timing stream changes that. Such candidates are refused by the
    static rule and the profiler's stream check (tests/gpu/test_anticheat_gpu.py). Prints both medians
    and the leads."""
    report = _unjoined_side_kernel_report()
    honest_ms, sneaky_ms = report.timings["honest"].median_ms, report.timings["sneaky"].median_ms
    print(f"honest {honest_ms * 1e3:.1f} us, sneaky {sneaky_ms * 1e3:.1f} us, lead {report.lead_kind}, "
          f"median lead ms {report.lead_median_ms}")
    assert sneaky_ms >= 0.9 * honest_ms


def test_timing_uses_the_persistent_lead():
    """On a GPU with cuda-core the lead is the persistent kernel, not the memset fallback."""
    report = _unjoined_side_kernel_report()
    assert report.lead_kind == "persistent"


def _lead_passes(flush_mib: int, clean_mib: int, calls: int):
    """A Lead of `flush_mib` reading back `clean_mib`, called `calls` times; synchronised."""
    lead = Lead(torch.device(DEVICE), flush_mib << 20, clean_mib << 20)
    for _ in range(calls):
        lead()
    torch.cuda.synchronize()
    return lead


def test_the_lead_writes_every_word_of_its_buffer():
    """Two passes: every word holds the second pass's value (a counter left over from the first pass
    would make the second write nothing)."""
    lead = _lead_passes(64, 32, 2)
    assert bool((lead.buffer == 2).all())


def test_the_lead_resets_its_counters_for_the_next_launch():
    lead = _lead_passes(64, 32, 3)
    assert lead.counters[:2].tolist() == [0, 0]


def test_the_lead_tells_the_host_when_all_its_blocks_are_on_the_gpu():
    """`wait_resident_s`: the pinned gate word gets the pass's value once every block has entered, within
    10 ms; the entry counter is reset for the next pass. Prints the wait in microseconds."""
    lead = Lead(torch.device(DEVICE), 64 << 20, 32 << 20)
    waits = [lead(wait_resident_s=0.01) for _ in range(3)]
    torch.cuda.synchronize()
    print("gate waits us", [w and round(w * 1e6, 1) for w in waits])
    assert all(w is not None for w in waits) and lead.counters[3].item() == 0


def test_blocks_of_a_lead_that_exits_together_leave_within_2_us():
    """`exit_together`: the grid barrier holds every block until the last is done. Prints the spread of
    the blocks' exit times (globaltimer)."""
    lead = Lead(torch.device(DEVICE), 64 << 20, 32 << 20, exit_together=True)
    trace = torch.zeros(lead.shape.grid_blocks * 3, dtype=torch.int64, device=DEVICE)
    lead(trace)
    torch.cuda.synchronize()
    exits_ns = trace.view(-1, 3)[:, 1]
    spread_us = (exits_ns.max() - exits_ns.min()).item() / 1e3
    print(f"exit spread {spread_us:.2f} us")
    assert spread_us <= 2.0


def test_the_timing_lead_lasts_about_its_target():
    """The write is sized to last 200 us; with the clean read and launch latency the timed lead is
    within 0.8x..1.6x of that. Prints the medians."""
    report = _unjoined_side_kernel_report()
    print("median lead ms", report.lead_median_ms, "lead bytes", report.l2_flush_bytes)
    assert all(0.8 * 0.2 <= m <= 1.6 * 0.2 for m in report.lead_median_ms.values())


def _host_busy(us: float) -> None:
    """Spin the host for `us` microseconds (a slow Python forward before its launch)."""
    import time

    end = time.perf_counter_ns() + int(us * 1e3)
    while time.perf_counter_ns() < end:
        pass


def _copy_after_host_time(host_us: float) -> BenchReport:
    """One run timing a ~20 us copy launched at once ("prompt") and the same copy launched after
    `host_us` on the host ("slow_host")."""
    src = torch.randn(1 << 23, device=DEVICE)
    dst = torch.empty_like(src)

    def prompt(inputs):
        return dst.copy_(inputs[0])

    def slow_host(inputs):
        _host_busy(host_us)
        return dst.copy_(inputs[0])

    return bench_interleaved_report({"prompt": prompt, "slow_host": slow_host}, [[src]], budget_ms=100,
                                    warmup_ms=10, device=DEVICE)


def _medians_ms(report: BenchReport) -> tuple[float, float]:
    return report.timings["prompt"].median_ms, report.timings["slow_host"].median_ms


def test_the_lead_hides_a_host_path_shorter_than_it():
    """The flush is sized to last DEFAULT_LEAD_US, so a function that spends 60 us on the host before
    launching a ~20 us copy is timed like the copy launched at once (session 6: the host path of a
    cuda-core forward, ~35-50 us, showed up in every sample). Medians within 10% + 3 us. Prints both."""
    report = _copy_after_host_time(60)
    fast_ms, slow_ms = _medians_ms(report)
    print(f"copy {fast_ms * 1e3:.1f} us; after 60 us on the host {slow_ms * 1e3:.1f} us; "
          f"lead write {report.l2_flush_bytes / 2**20:.0f} MiB")
    assert slow_ms <= 1.1 * fast_ms + 0.003


def test_a_host_path_the_leads_can_cover_is_hidden_and_flagged():
    """1 ms on the host before the copy: the leads are lengthened to cover it (under MAX_LEAD_LAUNCHES
    launches), so the sample is the copy's GPU time, and the report says so (`host_path_hidden`, the
    host path being over HOST_HIDDEN_RATIO x the measured time). Prints both medians and the launches."""
    report = _copy_after_host_time(1000)
    fast_ms, slow_ms = _medians_ms(report)
    print(f"copy {fast_ms * 1e3:.1f} us; after 1 ms on the host {slow_ms * 1e3:.1f} us; "
          f"{report.lead_launches['slow_host']} lead launches of {report.lead_launch_ms * 1e3:.0f} us")
    assert slow_ms <= 1.1 * fast_ms + 0.003
    assert "host_path_hidden" in {f.code for f in report.flags_for("slow_host")}


def test_host_time_beyond_the_longest_lead_is_counted():
    """The lead is not a free pass: a host path of twice what MAX_LEAD_LAUNCHES launches last leaves the
    GPU idle inside the sample once the leads are done, so at least half of the uncovered host time
    (host path less the leads queued) shows in the median over the prompt copy's. Prints the figures."""
    report = _copy_after_host_time(2 * MAX_LEAD_LAUNCHES * DEFAULT_LEAD_US)
    fast_ms, slow_ms = _medians_ms(report)
    covered_ms = report.lead_launches["slow_host"] * report.lead_launch_ms
    uncovered_ms = 2 * MAX_LEAD_LAUNCHES * DEFAULT_LEAD_US / 1e3 - covered_ms
    print(f"copy {fast_ms * 1e3:.1f} us; after {2 * MAX_LEAD_LAUNCHES * DEFAULT_LEAD_US / 1e3:.1f} ms on the "
          f"host {slow_ms * 1e3:.1f} us; leads cover {covered_ms * 1e3:.0f} us")
    assert report.lead_launches["slow_host"] == MAX_LEAD_LAUNCHES
    assert slow_ms >= fast_ms + 0.5 * uncovered_ms


def test_poison_makes_the_uninitialised_empty_hack_fail():
    """Hack #1: an answer computed and freed leaves its block in the caching allocator; `torch.empty` of
    the same size gets that block back, holding the right answer. The first half shows the threat on
    this machine (it may legitimately not reproduce if the allocator picks another block: then it only
    prints), the second half that after poison_allocator the output is NaN and fails."""
    x = torch.randn(1 << 20, device=DEVICE)
    expected = x * 2
    freed = x * 2
    del freed
    hack = torch.empty_like(x)
    threat = compare(hack, expected).ok
    print("without poison the empty() hack passes:", threat)
    del hack
    freed = x * 2
    del freed
    poisoned_bytes = poison_allocator(DEVICE, x.nbytes)
    hack = torch.empty_like(x)
    result = compare(hack, expected)
    print("poisoned bytes", poisoned_bytes, "->", result.message[:200])
    assert poisoned_bytes >= x.nbytes
    assert not result.ok and "allocator poison" in result.message


def test_device_ceilings_are_plausible_for_an_h200():
    """Measured once per process: copy bandwidth (read + write) and matmul peaks. Printed; bounds are
    loose (H200: ~4.3 TB/s, bf16 ~790 TFLOP/s measured in docs/gpu-machine.md)."""
    bw = bandwidth_gbps(DEVICE)
    peaks = {str(d): peak_tflops(DEVICE, d) for d in (torch.bfloat16, torch.float16, torch.float32)}
    print("bandwidth GB/s", bw, "peaks TFLOP/s", peaks)
    assert 1000 < bw < 6000
    assert 200 < peaks["torch.bfloat16"] < 1200
    assert peaks["torch.float32"] > 50  # TF32 tensor cores (see sol.py why)
    floor_ms, _, _ = speed_of_light(bw * 1e9 * 1e-3, None, torch.float32, DEVICE)  # 1 ms of traffic
    assert floor_ms == pytest.approx(1.0)
