"""Properties of cudaperf.timing on the CPU fallback (the GPU protocol is in tests/gpu/test_timing_gpu.py)."""

from __future__ import annotations

import time

import pytest
import torch

from cudaperf.timing import (
    OVERHEAD_NAME,
    SILENT_CHECKS_MIN,
    FunctionFailed,
    bench_interleaved,
    bench_interleaved_report,
    default_l2_flush_bytes,
    lead_flush_bytes,
    summarize,
)


def _sets(n: int = 3, size: int = 256) -> list[list[torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [[torch.randn(size, generator=g)] for _ in range(n)]


def _double(inputs):
    return inputs[0] * 2


# -- summary math ----------------------------------------------------------------------------------


def test_summary_of_known_samples():
    t = summarize([5.0, 1.0, 3.0, 2.0, 4.0], host_ms_per_call=3.5)
    assert (t.median_ms, t.min_ms, t.mean_ms, t.iqr_ms) == (3.0, 1.0, 3.0, 2.0)
    assert t.n_samples == 5 and t.host_ms_per_call == 3.5
    assert t.samples_ms == (5.0, 1.0, 3.0, 2.0, 4.0)  # raw order kept


def test_summary_of_one_sample_has_no_spread():
    t = summarize([2.0])
    assert t.median_ms == 2.0 and t.iqr_ms == 0.0


def test_summary_of_nothing_is_an_error():
    with pytest.raises(ValueError):
        summarize([])


def test_no_l2_flush_on_cpu():
    assert default_l2_flush_bytes("cpu") == 0


MIB = 1 << 20


def test_the_lead_write_is_scaled_to_last_the_lead():
    # 120 MiB written in 30 us: 200 us needs 800 MiB
    assert lead_flush_bytes(120 * MIB, 30.0, 200.0, cap_bytes=4096 * MIB) == 800 * MIB


def test_the_lead_write_is_never_smaller_than_the_l2_flush():
    assert lead_flush_bytes(120 * MIB, 300.0, 200.0, cap_bytes=4096 * MIB) == 120 * MIB


def test_the_lead_write_is_capped():
    assert lead_flush_bytes(120 * MIB, 30.0, 200.0, cap_bytes=500 * MIB) == 500 * MIB


def test_no_flush_means_no_lead():
    assert lead_flush_bytes(0, 30.0, 200.0, cap_bytes=500 * MIB) == 0


# -- the interleaved run ---------------------------------------------------------------------------


def test_every_function_gets_a_timing_with_bounded_samples():
    timings = bench_interleaved({"a": _double, "b": _double}, _sets(), budget_ms=5, warmup_ms=1,
                                l2_flush_bytes=0, check=None, min_reps=10, max_reps=50)
    assert set(timings) == {"a", "b"}
    assert all(10 <= t.n_samples <= 50 for t in timings.values())
    assert timings["a"].n_samples == timings["b"].n_samples  # interleaved: one sample each per round


def test_a_slower_function_measures_slower():
    def slow(inputs):
        time.sleep(0.002)
        return inputs[0] * 2

    timings = bench_interleaved({"fast": _double, "slow": slow}, _sets(), budget_ms=20, warmup_ms=1,
                                min_reps=10, max_reps=20)
    assert timings["slow"].median_ms >= 2.0
    assert timings["slow"].median_ms > 5 * timings["fast"].median_ms


def test_tiny_budget_still_gives_min_reps_and_huge_budget_stops_at_max_reps():
    small = bench_interleaved({"a": _double}, _sets(), budget_ms=0.0, warmup_ms=0.0, min_reps=12)
    big = bench_interleaved({"a": _double}, _sets(), budget_ms=1e9, warmup_ms=0.0, max_reps=40)
    assert small["a"].n_samples == 12 and big["a"].n_samples == 40


def test_the_empty_function_overhead_is_measured_and_kept_apart():
    report = bench_interleaved_report({"a": _double}, _sets(), budget_ms=2, warmup_ms=0)
    assert report.overhead is not None and report.overhead.n_samples == report.rounds
    assert OVERHEAD_NAME not in report.timings


def test_every_input_set_is_used_and_rechecked():
    seen_ptrs, checked = set(), set()

    def fn(inputs):
        seen_ptrs.add(inputs[0].data_ptr())
        return inputs[0] * 2

    sets = _sets(4)
    bench_interleaved({"a": fn}, sets, budget_ms=2, warmup_ms=0, min_reps=10,
                      check=lambda name, i, out: checked.add(i) or True)
    assert seen_ptrs == {s[0].data_ptr() for s in sets}
    assert checked == {0, 1, 2, 3}


def test_order_is_shuffled_between_rounds():
    order: list[str] = []

    def recorder(name):
        return lambda inputs: order.append(name)

    fns = {name: recorder(name) for name in "abcd"}
    bench_interleaved(fns, _sets(1), budget_ms=0, warmup_ms=0, min_reps=20, max_reps=20,
                      measure_overhead=False)
    rounds = {tuple(order[i:i + 4]) for i in range(0, len(order), 4)}
    assert len(rounds) > 1


def test_honest_function_passes_the_rechecks():
    sets = _sets()
    expected = [s[0] * 2 for s in sets]
    report = bench_interleaved_report({"a": _double}, sets, budget_ms=2, warmup_ms=0,
                                      check=lambda name, i, out: torch.equal(out, expected[i]))
    assert report.checks["a"] > 0 and report.check_failures["a"] == 0
    assert report.flags_for("a") == ()


def test_result_cached_by_data_pointer_fails_the_rechecks():
    sets = _sets()
    expected = [s[0] * 2 for s in sets]
    cache: dict[int, torch.Tensor] = {}

    def cached(inputs):  # hack #3: keyed on the pointer, stale once the contents change
        return cache.setdefault(inputs[0].data_ptr(), inputs[0] * 2)

    report = bench_interleaved_report({"cheat": cached}, sets, budget_ms=2, warmup_ms=0,
                                      check=lambda name, i, out: torch.equal(out, expected[i]))
    assert report.check_failures["cheat"] > 0
    assert "timed_output_mismatch" in {f.code for f in report.flags_for("cheat")}


def _skips_unchecked_rounds():
    """Hack #14's variant: the sampled re-check rounds copy contents in, which moves the inputs' version
    counters; when a tensor comes back as last seen, the work is skipped."""
    seen: dict[int, int] = {}

    def fn(inputs):
        x = inputs[0]
        if seen.get(id(x)) == x._version:
            return torch.zeros_like(x)
        seen[id(x)] = x._version
        return x * 2
    return fn


def _recheck_double(sets):
    expected = [s[0] * 2 for s in sets]
    return lambda name, i, out: torch.equal(out, expected[i])


def test_skipping_the_rounds_not_sampled_passes_the_sampled_rechecks():
    sets = _sets()
    report = bench_interleaved_report({"cheat": _skips_unchecked_rounds()}, sets, budget_ms=2, warmup_ms=0,
                                      check=_recheck_double(sets), min_reps=60)
    assert report.check_failures["cheat"] == 0  # why every round of a candidate is re-checked


@pytest.mark.parametrize("seed", range(5))
def test_silent_checks_catch_skipping_the_unsampled_rounds(seed):
    sets = _sets()
    report = bench_interleaved_report({"cheat": _skips_unchecked_rounds()}, sets, budget_ms=2, warmup_ms=0,
                                      check=_recheck_double(sets), min_reps=60, seed=seed,
                                      silent_checks=frozenset({"cheat"}))
    assert report.check_failures["cheat"] > 0


def test_silent_checks_recheck_at_least_their_minimum_of_plain_rounds():
    sets = _sets()
    report = bench_interleaved_report({"a": _double, "b": _double}, sets, budget_ms=0, warmup_ms=0,
                                      check=_recheck_double(sets), min_reps=10, max_reps=10,
                                      silent_checks=frozenset({"a"}))
    assert report.checks["a"] == report.checks["b"] + SILENT_CHECKS_MIN


def test_input_sets_are_restored_after_checked_rounds():
    sets = _sets()
    before = [s[0].clone() for s in sets]
    bench_interleaved({"a": _double}, sets, budget_ms=2, warmup_ms=0, check=lambda *a: True)
    assert all(torch.equal(s[0], b) for s, b in zip(sets, before, strict=True))


def test_mutating_inputs_during_timing_is_counted():
    def mutating(inputs):
        inputs[0].mul_(1.0001)
        return inputs[0]

    report = bench_interleaved_report({"m": mutating}, _sets(), budget_ms=2, warmup_ms=0,
                                      check=lambda *a: True)
    assert report.input_mutations["m"] > 0


def test_a_raising_function_is_named():
    def boom(inputs):
        raise ValueError("nope")

    with pytest.raises(FunctionFailed) as info:
        bench_interleaved({"ok": _double, "boom": boom}, _sets(), budget_ms=1, warmup_ms=0)
    assert info.value.name == "boom" and isinstance(info.value.error, ValueError)


def test_cpu_clock_is_consistent_with_the_host_clock():
    report = bench_interleaved_report({"a": _double}, _sets(), budget_ms=2, warmup_ms=0)
    assert report.clock_consistent and report.device == "cpu" and report.l2_flush_bytes == 0
    assert report.timings["a"].host_ms_per_call is not None


def test_compile_baseline_leaves_no_thread_behind():
    """Inductor compiles in the calling process: no compile-pool thread can appear later inside a
    candidate's watched window."""
    import threading

    from cudaperf.timing import compile_baseline

    before = {t.ident for t in threading.enumerate()}
    compiled = compile_baseline(torch.nn.ReLU())
    compiled(torch.randn(8))
    compiled(torch.randn(16))  # a new shape: a recompile
    assert [t.name for t in threading.enumerate() if t.ident not in before and t.is_alive()] == []


def test_only_the_first_compile_on_gpu_tensors_needs_inductors_set_up_held(monkeypatch):
    """The process's first compile with a CUDA example input is held whole; CPU inputs never are, and once
    set up, later GPU compiles are not."""
    import types

    from cudaperf import timing

    monkeypatch.setattr(timing, "_INDUCTOR_SET_UP_ON_GPU", [])
    on_gpu = [types.SimpleNamespace(device=torch.device("cuda", 0)), 3]
    assert not timing._needs_inductor_set_up([torch.randn(2), 3])
    assert timing._needs_inductor_set_up(on_gpu)
    timing._INDUCTOR_SET_UP_ON_GPU.append(True)
    assert not timing._needs_inductor_set_up(on_gpu)


def test_a_cpu_run_reports_no_lead():
    report = bench_interleaved_report({"a": _double}, _sets(), budget_ms=1, warmup_ms=0, min_reps=2,
                                      max_reps=3)
    assert report.lead_us == 0.0 and report.lead_kind == ""


def _graphs_for_three_shapes(monkeypatch, protocol: str) -> int:
    from torch._dynamo.utils import counters

    from cudaperf.timing import compile_baseline

    monkeypatch.setenv("CUDAPERF_BASELINE_PROTOCOL", protocol)
    torch._dynamo.reset()
    counters.clear()

    class Scale(torch.nn.Module):
        def forward(self, x):
            return x * 2.0 + 1.0

    compiled = compile_baseline(Scale())
    for n in (8, 9, 10):
        compiled(torch.randn(n))
    return counters["stats"]["unique_graphs"]


@pytest.mark.slow
def test_the_stable_compile_baseline_gives_every_shape_a_static_graph(monkeypatch):
    """Each configuration's shapes are compiled for themselves: the order of configurations cannot decide
    which kernels are timed."""
    assert _graphs_for_three_shapes(monkeypatch, "stable") == 3


@pytest.mark.slow
def test_the_legacy_compile_baseline_turns_dynamic_after_the_first_shape(monkeypatch):
    assert _graphs_for_three_shapes(monkeypatch, "legacy") == 2


def test_the_stable_inductor_options_are_known_to_this_torch():
    from torch._inductor import config

    from cudaperf.timing import STABLE_INDUCTOR_OPTIONS, stable_inductor_options

    assert stable_inductor_options() == STABLE_INDUCTOR_OPTIONS
    assert set(STABLE_INDUCTOR_OPTIONS) <= set(config.get_config_copy())
