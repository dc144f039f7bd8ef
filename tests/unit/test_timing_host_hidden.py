"""A call whose host path dwarfs its measured GPU time behind a lengthened lead is said plainly
(`BenchReport.host_path_hidden`, flag `host_path_hidden`, a WARNING)."""

from __future__ import annotations

from cudaperf.timing import BenchReport
from cudaperf.types import Severity, Timing


def _report(host_ms: float, gpu_ms: float, launches: int) -> BenchReport:
    timing = Timing(median_ms=gpu_ms, iqr_ms=0.0, min_ms=gpu_ms, mean_ms=gpu_ms, n_samples=20)
    return BenchReport(timings={"candidate": timing}, overhead=None, device="cuda:0", rounds=20,
                       warmup_rounds=3, l2_flush_bytes=1 << 20, host_total_ms=100.0, event_total_ms=1.0,
                       lead_launches={"candidate": launches}, host_path_median_ms={"candidate": host_ms})


def test_a_host_path_far_beyond_the_measured_time_behind_a_long_lead_is_a_warning():
    flags = _report(host_ms=1.2, gpu_ms=0.05, launches=8).flags_for("candidate", "default")
    assert [(f.code, f.severity) for f in flags] == [("host_path_hidden", Severity.WARNING)]


def test_a_host_path_within_twice_the_measured_time_is_not_flagged():
    assert _report(host_ms=0.09, gpu_ms=0.05, launches=2).flags_for("candidate") == ()


def test_one_lead_launch_is_the_protocol_as_it_always_was_and_is_not_flagged():
    assert _report(host_ms=0.15, gpu_ms=0.01, launches=1).flags_for("candidate") == ()
