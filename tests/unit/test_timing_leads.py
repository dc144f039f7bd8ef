"""The lead's length per function (cudaperf.timing, module docstring): the launch arithmetic as a pure
function, the host paths and host-bound samples in the report, the collector paused in the timed rounds.

No GPU here: where a lead is needed, `LeadClock` stands in for the CUDA clock (the host path is timed
for real, each lead launch "lasts" `LAUNCH_MS`); tests/gpu/test_timing_leads_gpu.py runs the real one."""

from __future__ import annotations

import gc
import time

import pytest
import torch

from cudaperf import timing
from cudaperf.host_timing import LEGACY, PROTOCOL_ENV
from cudaperf.timing import MAX_LEAD_LAUNCHES, bench_interleaved_report, lead_launches, quantile

LAUNCH_MS = 0.2


class LeadClock:
    """The CUDA clock's interface with a simulated lead: every call's host path timed on the host clock,
    the lead's GPU time `LAUNCH_MS` per launch, the sample 0.01 ms."""

    device = "simulated"
    flush_bytes = 1 << 20
    lead_us = LAUNCH_MS * 1e3
    lead_kind = "persistent"

    def __init__(self):
        self.launches: dict[str, list[int]] = {}

    def time_call(self, fn, inputs, leads=1):
        start = time.perf_counter_ns()
        out = fn(inputs)
        host_ms = (time.perf_counter_ns() - start) / 1e6
        self.launches.setdefault(getattr(fn, "__name__", "?"), []).append(leads)
        return timing._Call(out, 0.01, host_ms + LAUNCH_MS * leads, LAUNCH_MS * leads, False, host_ms)


@pytest.fixture
def lead_clock(monkeypatch):
    clock = LeadClock()
    monkeypatch.setattr(timing, "_make_clock", lambda device, flush_bytes, lead_us: clock)
    monkeypatch.delenv(PROTOCOL_ENV, raising=False)
    return clock


def _sets():
    return [[torch.zeros(4)], [torch.ones(4)]]


def fast(inputs):
    return inputs[0]


def slow(inputs):
    end = time.perf_counter() + 0.0006  # a host path three times one launch (a spin: sleeps overshoot)
    while time.perf_counter() < end:
        pass
    return inputs[0]


def _bench(fns, **kw):
    return bench_interleaved_report(fns, _sets(), budget_ms=3, warmup_ms=3, min_reps=5, max_reps=20,
                                    measure_overhead=False, **kw)


# -- the arithmetic --------------------------------------------------------------------------------


def test_one_launch_covers_a_host_path_well_inside_it():
    assert lead_launches(0.05, 0.2) == 1


def test_launches_cover_one_and_a_half_times_the_p90_host_path():
    assert lead_launches(0.5, 0.2) == 4  # 0.75 ms of host path to cover: 4 launches of 0.2 ms


def test_a_host_path_just_inside_one_launch_gets_a_second_for_the_margin():
    assert lead_launches(0.15, 0.2) == 2


def test_launches_are_capped():
    assert lead_launches(50.0, 0.2) == MAX_LEAD_LAUNCHES


def test_no_lead_means_no_launches():
    assert lead_launches(0.5, 0.0) == 0


def test_the_quantile_is_the_nearest_higher_rank():
    values = [float(v) for v in range(1, 11)]
    assert quantile(values, 0.9) == 9.0 and quantile(values, 0.5) == 5.0 and quantile([3.0], 0.9) == 3.0


# -- the report on the CPU clock -------------------------------------------------------------------


def test_the_cpu_clock_reports_each_functions_host_path():
    report = bench_interleaved_report({"fast": fast, "slow": slow}, _sets(), budget_ms=3, warmup_ms=1,
                                      l2_flush_bytes=0, min_reps=5, max_reps=10)
    assert report.host_path_median_ms["slow"] >= 0.6 > report.host_path_median_ms["fast"]
    assert report.host_path_p90_ms["slow"] >= report.host_path_median_ms["slow"]


def test_the_cpu_clock_has_no_lead_and_no_host_bound_samples():
    report = bench_interleaved_report({"slow": slow}, _sets(), budget_ms=3, warmup_ms=1, l2_flush_bytes=0,
                                      min_reps=5, max_reps=10)
    assert report.lead_launches == {"slow": 0, timing.OVERHEAD_NAME: 0}
    assert report.host_bound_samples == {"slow": 0} and report.lead_launch_ms == 0.0


# -- the launches per function (simulated lead) ----------------------------------------------------


def test_a_function_whose_host_path_outlasts_the_lead_gets_more_launches(lead_clock):
    report = _bench({"fast": fast, "slow": slow})
    assert report.lead_launches["slow"] >= 4 > report.lead_launches["fast"]
    assert report.lead_launch_ms == pytest.approx(LAUNCH_MS)


def test_the_timed_calls_queue_the_launches_the_warm_up_chose(lead_clock):
    report = _bench({"slow": slow})
    assert lead_clock.launches["slow"][-1] == report.lead_launches["slow"] >= 4


def test_with_enough_launches_host_bound_samples_are_rare(lead_clock):
    report = _bench({"fast": fast, "slow": slow})  # a preempted call on this shared machine may still be
    assert report.host_bound_samples["slow"] <= report.rounds // 5


def test_the_warm_up_host_path_that_set_the_launches_is_reported(lead_clock):
    report = _bench({"slow": slow})
    assert report.warmup_host_path_p90_ms["slow"] >= 0.6


def test_a_host_bound_timed_sample_lengthens_the_lead_for_the_rest_of_the_run(lead_clock):
    calls = [0]

    def late(inputs):  # fast through the warm-up, then slower than the lead
        calls[0] += 1
        if calls[0] > 40:
            time.sleep(0.0006)
        return inputs[0]

    # max_reps=30 caps the warm-up at 30 rounds: with the estimate's 4 calls, call 41 comes in the timed run
    report = bench_interleaved_report({"late": late}, _sets(), budget_ms=1, warmup_ms=0.5, min_reps=30,
                                      max_reps=30, measure_overhead=False)
    assert report.warmup_host_path_p90_ms["late"] < 0.6
    assert report.host_bound_samples["late"] >= 1 and report.lead_launches["late"] >= 4


def test_the_legacy_protocol_keeps_one_launch(lead_clock, monkeypatch):
    monkeypatch.setenv(PROTOCOL_ENV, LEGACY)
    report = _bench({"slow": slow})
    assert report.lead_launches["slow"] == 1 and set(lead_clock.launches["slow"]) == {1}
    assert report.host_bound_samples["slow"] == report.rounds  # the diagnostic says what it costs


def test_no_garbage_collection_runs_inside_the_timed_rounds(lead_clock):
    enabled = []
    report = _bench({"probe": lambda inputs: enabled.append(gc.isenabled())})
    assert enabled[-report.rounds:] == [False] * report.rounds and gc.isenabled()


def test_no_garbage_collection_runs_inside_the_timed_rounds_of_the_cpu_clock_either():
    enabled = []
    report = bench_interleaved_report({"probe": lambda inputs: enabled.append(gc.isenabled())}, _sets(),
                                      budget_ms=1, warmup_ms=0.5, l2_flush_bytes=0, min_reps=5, max_reps=5)
    assert enabled[-report.rounds:] == [False] * report.rounds and gc.isenabled()
