"""A bench cut short after its estimate rounds (`timing.SlowCut`, the RL mode's): on the CPU clock, a
function far slower than its anchor and past the floor is timed from the estimate rounds alone, with no
output re-checked, and the report says so (`BenchReport.cut_slow`, INFO `timing_cut_slow`); one under
the floor or under the ratio runs the bench's rounds."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")

from cudaperf.timing import ESTIMATE_ROUNDS, SlowCut, bench_interleaved_report
from cudaperf.types import Severity

SLOW_S = 0.02


def _slow(inputs):
    time.sleep(SLOW_S)
    return inputs[0] + 1


def _fast(inputs):
    return inputs[0] + 1


def _bench(cut: SlowCut | None, checked: list | None = None):
    checks = checked if checked is not None else []
    return bench_interleaved_report(
        {"candidate": _slow, "anchor": _fast}, [[torch.ones(4)] for _ in range(3)], budget_ms=1.0,
        warmup_ms=0.1, device="cpu", check=lambda name, index, out: checks.append(name) or True,
        measure_overhead=False, slow_cut=cut)


CUT = SlowCut("candidate", "anchor", ratio=10.0, floor_ms=5.0)


def test_a_function_far_slower_than_its_anchor_is_timed_from_the_estimate_rounds():
    report = _bench(CUT)
    assert report.rounds == ESTIMATE_ROUNDS and report.timings["candidate"].n_samples == ESTIMATE_ROUNDS
    assert report.timings["candidate"].median_ms >= SLOW_S * 1e3


def test_a_cut_run_re_checks_no_output():
    checked: list = []
    _bench(CUT, checked)
    assert checked == []


def test_the_cut_is_an_info_flag_of_the_function_cut_short():
    flags = _bench(CUT).flags_for("candidate", "large")
    assert [(f.code, f.severity, f.config) for f in flags] == [("timing_cut_slow", Severity.INFO, "large")]


def test_the_cut_report_s_clocks_agree():
    assert _bench(CUT).clock_consistent


def test_under_the_floor_the_bench_runs_its_rounds():
    report = _bench(SlowCut("candidate", "anchor", ratio=10.0, floor_ms=1000.0))
    assert report.rounds >= 10 and not report.cut_slow


def test_under_the_ratio_the_bench_runs_its_rounds():
    report = _bench(SlowCut("anchor", "candidate", ratio=10.0, floor_ms=0.0))  # the anchor is the fast one
    assert report.rounds >= 10 and not report.cut_slow


def test_without_a_cut_the_bench_runs_its_rounds():
    assert _bench(None).rounds >= 10


@pytest.mark.parametrize("ratio, floor_ms", [(1.0, 10.0), (10.0, -1.0)])
def test_a_cut_needs_a_ratio_above_one_and_a_floor_of_at_least_zero(ratio, floor_ms):
    with pytest.raises(ValueError, match="SlowCut"):
        SlowCut("candidate", "anchor", ratio, floor_ms)


def _session_cut(kind: str, ratio: float, fns: dict):
    from types import SimpleNamespace

    from cudaperf.execute import c_session, torch_session
    from cudaperf.jobs import TimingConfig

    cls = c_session.CSession if kind == "c" else torch_session.TorchSession
    bare = cls.__new__(cls)
    bare.job = SimpleNamespace(timing=TimingConfig(slow_cut_ratio=ratio, slow_cut_floor_ms=30.0))
    return bare.slow_cut(fns, "naive_cuda")


def test_a_c_job_with_a_slow_cut_cuts_its_candidate_against_the_anchor():
    assert _session_cut("c", 10.0, {"candidate": _slow, "naive_cuda": _fast}) == SlowCut(
        "candidate", "naive_cuda", 10.0, 30.0)


@pytest.mark.parametrize("kind, ratio, fns", [("c", 0.0, {"candidate": _slow, "naive_cuda": _fast}),
                                              ("c", 10.0, {"candidate": _slow}),
                                              ("torch", 10.0, {"candidate": _slow, "naive_cuda": _fast})])
def test_no_cut_without_a_ratio_an_anchor_or_a_task_kind_that_may_cut(kind, ratio, fns):
    assert _session_cut(kind, ratio, fns) is None
