"""benchmarks/repeatability.py: splitting a CUPTI event stream into calls (the profiling itself runs on the
GPU machine, in the benchmark)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from repeatability import net_medians_ms, per_call_ms

FLUSH, MARKER = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>>",
                 "spin_kernel")


def test_each_call_is_what_follows_its_marker_less_the_next_flush():
    events = [(FLUSH, 30.0), (MARKER, 1.0), ("k1", 100.0), ("k2", 50.0),
              (FLUSH, 30.0), (MARKER, 1.0), ("k1", 101.0), ("k2", 49.0)]
    assert per_call_ms(events) == pytest.approx([0.150, 0.150])


def test_the_persistent_lead_is_taken_off_the_call_before_it():
    events = [("cudaperf_lead", 200.0), (MARKER, 1.0), ("k", 100.0), ("cudaperf_lead", 200.0), (MARKER, 1.0)]
    assert per_call_ms(events) == pytest.approx([0.100, 0.0])


def test_a_fill_inside_the_call_stays_in_it():
    events = [(FLUSH, 30.0), (MARKER, 1.0), ("FillFunctor<float>", 5.0), ("k", 100.0),
              (FLUSH, 30.0), (MARKER, 1.0), ("FillFunctor<float>", 5.0), ("k", 100.0)]
    assert per_call_ms(events) == pytest.approx([0.105, 0.105])


def test_events_before_the_first_marker_are_ignored():
    assert per_call_ms([("warm-up", 500.0), (FLUSH, 30.0), (MARKER, 1.0),
                        ("k", 10.0)]) == pytest.approx([0.010])


def test_each_evaluation_loses_its_own_timer_cost():
    row = {"medians_ms": [0.100, 0.110], "timer_overhead_ms": [0.010, None]}
    assert net_medians_ms(row) == [pytest.approx(0.090), None]
