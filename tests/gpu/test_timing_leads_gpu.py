"""The lead outlasts each function's host path on a real GPU (cudaperf.timing, module docstring; marker
`gpu`). Run:
    python3 -m pytest -q -s tests/gpu/test_timing_leads_gpu.py
Each test prints the figures it checks (medians, host paths, launches, host-bound samples)."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")

from cudaperf.host_timing import LEGACY, PROTOCOL_ENV
from cudaperf.timing import bench_interleaved_report, compile_baseline

pytestmark = [pytest.mark.gpu, pytest.mark.timing]

DEVICE = "cuda:0"
HOST_MS = 1.0


def _slow_host(inputs):
    """1 ms of host work (a spin), then one tiny kernel: the sample should hold the kernel only."""
    end = time.perf_counter() + HOST_MS / 1e3
    while time.perf_counter() < end:
        pass
    return inputs[0] + 1


def _bench(fns, sets):
    return bench_interleaved_report(fns, sets, budget_ms=100, warmup_ms=20, device=DEVICE)


def _show(label, report, name):
    print(f"{label}: median {report.timings[name].median_ms * 1e3:.1f} us, host path "
          f"{report.host_path_median_ms[name] * 1e3:.1f}/{report.host_path_p90_ms[name] * 1e3:.1f} us "
          f"(median/p90), {report.lead_launches[name]} launches of {report.lead_launch_ms * 1e3:.1f} us, "
          f"{report.host_bound_samples[name]} of {report.rounds} samples host-bound")


def test_a_slow_host_path_stays_out_of_the_sample(monkeypatch):
    """Stable protocol: the 1 ms host path is covered (>= 6 launches of ~200 us), at most 10% of the
    samples are host-bound and the median is under 0.1 ms. Legacy (one launch): the median holds most of
    the host path (>= 0.5 ms) and most samples are host-bound."""
    sets = [[torch.randn(1024, device=DEVICE)]]
    monkeypatch.delenv(PROTOCOL_ENV, raising=False)
    stable = _bench({"slow_host": _slow_host}, sets)
    monkeypatch.setenv(PROTOCOL_ENV, LEGACY)
    legacy = _bench({"slow_host": _slow_host}, sets)
    _show("stable", stable, "slow_host")
    _show("legacy", legacy, "slow_host")
    assert stable.lead_launches["slow_host"] >= 6
    assert stable.host_bound_samples["slow_host"] <= stable.rounds // 10
    assert stable.timings["slow_host"].median_ms < 0.1
    assert legacy.timings["slow_host"].median_ms >= 0.5
    assert legacy.host_bound_samples["slow_host"] > legacy.rounds // 2


def test_the_compile_baseline_is_not_host_bound():
    """torch.compile of a small model (the dataset's compile baseline): at most 10% of its samples
    host-bound, and its median within 2x eager's (both a few kernels of a 1M-element tensor)."""
    model = torch.nn.Sequential(torch.nn.LayerNorm(1024), torch.nn.GELU()).to(DEVICE).eval()
    compiled = compile_baseline(model, dynamic=False)
    sets = [[torch.randn(1024, 1024, device=DEVICE)] for _ in range(2)]
    with torch.no_grad():
        compiled(*sets[0])
        report = _bench({"eager": lambda inputs: model(*inputs), "compile": lambda inputs: compiled(*inputs)},
                        sets)
    _show("eager", report, "eager")
    _show("compile", report, "compile")
    assert report.host_bound_samples["compile"] <= report.rounds // 10
    assert report.timings["compile"].median_ms < 2 * report.timings["eager"].median_ms
