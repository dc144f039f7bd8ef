"""Properties of cudaperf.sol (CPU only; the device ceilings are measured in tests/gpu)."""

from __future__ import annotations

import pytest
import torch

from cudaperf import sol
from cudaperf.sol import SolEstimate, count_flops, dominant_dtype, min_bytes, speed_flags, speed_of_light
from cudaperf.types import Severity


def test_min_bytes_counts_every_input_and_output():
    a, b = torch.zeros(100), torch.zeros(50, dtype=torch.float64)
    assert min_bytes([a, b], torch.zeros(10)) == 400 + 400 + 40


def test_views_of_one_storage_count_once():
    a = torch.zeros(100)
    assert min_bytes([a, a[:50], a.view(10, 10)], ()) == 400


def test_broadcast_dimensions_count_once():
    row = torch.zeros(1, 64)
    assert min_bytes([row.expand(1000, 64)], ()) == 64 * 4


def test_flops_of_a_linear_layer():
    layer = torch.nn.Linear(16, 8)
    assert count_flops(layer, [torch.randn(4, 16)]) == 2 * 4 * 16 * 8


def test_flops_of_a_failing_model_is_none():
    class Broken(torch.nn.Module):
        def forward(self, x):
            raise RuntimeError("no")

    assert count_flops(Broken(), [torch.randn(2)]) is None


def test_dominant_dtype_is_the_floating_dtype_with_most_bytes():
    tensors = [torch.zeros(10, dtype=torch.float16), torch.zeros(100), torch.zeros(1000, dtype=torch.int64)]
    assert dominant_dtype(tensors) == torch.float32
    assert dominant_dtype([torch.zeros(3, dtype=torch.int32)]) is None


def test_no_speed_of_light_on_cpu():
    assert speed_of_light(1e9, 1e12, torch.float32, "cpu") == (None, None, None)


def test_floors_from_bandwidth_and_peak(monkeypatch):
    monkeypatch.setattr(sol, "bandwidth_gbps", lambda device: 1000.0)
    monkeypatch.setattr(sol, "peak_tflops", lambda device, dtype: 100.0)
    est = sol.estimate(1e9, 1e12, torch.float32, "cpu")
    assert est.memory_floor_ms == pytest.approx(1.0)  # 1 GB at 1000 GB/s
    assert est.compute_floor_ms == pytest.approx(10.0)  # 1 TFLOP at 100 TFLOP/s
    assert est.floor_ms == pytest.approx(10.0)


def _estimate(memory_ms, compute_ms):
    parts = [x for x in (memory_ms, compute_ms) if x is not None]
    return SolEstimate(max(parts) if parts else None, memory_ms, compute_ms, 4000.0, 500.0, 1e9, 1e12)


def test_below_the_memory_floor_is_impossible():
    flags = speed_flags(0.5, 2.0, _estimate(1.0, None))
    assert [f.code for f in flags] == ["impossible_speed"] and flags[0].severity is Severity.ERROR


def test_below_the_compute_floor_only_warns():
    flags = speed_flags(0.5, 20.0, _estimate(0.1, 1.0))
    assert [f.code for f in flags] == ["below_compute_floor"] and flags[0].severity is Severity.WARNING


def test_within_the_margin_is_not_flagged():
    assert speed_flags(0.85, 2.0, _estimate(1.0, None)) == ()


def test_a_reference_below_the_floor_makes_the_floor_unreliable():
    flags = speed_flags(0.1, 0.2, _estimate(1.0, None), config="big")
    assert [f.code for f in flags] == ["sol_floor_unreliable"] and flags[0].config == "big"


def test_no_floor_no_flags():
    assert speed_flags(0.001, 1.0, _estimate(None, None)) == ()
