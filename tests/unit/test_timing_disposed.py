"""`timing.Disposed` on the CPU fallback: every output of such a function goes to its `dispose` after its
re-check and before the next call of any function, and its `settle` runs once before the next call of a
function that is not `Disposed`, and at the end, outside the timed window (the GPU twin, with the
refereed worker's baselines: tests/gpu/test_referee_timing_answers_gpu.py)."""

from __future__ import annotations

import time

import pytest
import torch

from cudaperf.timing import Disposed, FunctionFailed, bench_interleaved_report


def _busy(seconds: float) -> None:
    """Wait without sleeping (a sleep lets the core go cold, and the next call is slower for it)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _sets(n: int = 3) -> list[list[torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [[torch.randn(64, generator=g)] for _ in range(n)]


def _logged(log: list, name: str):
    """A function to time that logs each call."""
    def call(inputs):
        log.append(("call", name))
        return inputs[0] * 2
    return call


def _run(log: list, dispose_s: float = 0.0, **options):
    def dispose(out):
        log.append(("dispose", "baseline"))
        _busy(dispose_s)
        out.fill_(float("nan"))

    def check(name, index, out):
        log.append(("check", name))
        return not bool(torch.isnan(out).any())

    fns = {"candidate": _logged(log, "candidate"), "baseline": Disposed(_logged(log, "baseline"), dispose)}
    return bench_interleaved_report(fns, _sets(), budget_ms=1, warmup_ms=0.5, check=check,
                                    measure_overhead=False, **options)


def test_every_output_of_a_disposed_function_is_disposed():
    log: list = []
    _run(log)
    assert log.count(("dispose", "baseline")) == log.count(("call", "baseline")) > 10


def test_a_disposed_output_is_re_checked_before_it_is_disposed():
    log: list = []
    report = _run(log)
    assert report.checks["baseline"] > 0 and report.check_failures["baseline"] == 0


def test_a_disposed_output_is_gone_before_the_next_call_of_any_function():
    log: list = []
    _run(log)
    calls = [(i, who) for i, (what, who) in enumerate(log) if what == "call"]
    for (i, who), (j, _) in zip(calls, calls[1:], strict=False):
        if who == "baseline":
            assert ("dispose", "baseline") in log[i + 1:j], log[i:j + 1]


def test_disposing_is_outside_the_timed_window():
    report = _run([], dispose_s=0.005, min_reps=10, max_reps=10)
    assert report.timings["baseline"].median_ms < 2.0, report.timings["baseline"]
    assert report.dispose_ms >= 10 * 5.0  # it was spent, elsewhere


def test_disposals_count_neither_in_the_number_of_rounds_nor_in_the_loop_s_host_time():
    slow = Disposed(lambda inputs: inputs[0] * 2, lambda out: _busy(0.002))
    report = bench_interleaved_report({"a": slow}, _sets(), budget_ms=20, warmup_ms=0, measure_overhead=False,
                                      max_reps=100000)
    # counted, 2 ms a disposal would leave 10 rounds (20 ms of budget) and a host total of 2 ms a round
    assert report.rounds > 100 and report.dispose_ms > 100 * 2.0, (report.rounds, report.dispose_ms)
    assert report.host_total_ms < 0.1 * report.dispose_ms, (report.host_total_ms, report.dispose_ms)


def _settled_run(log: list, measure_overhead: bool = False, **options):
    """A candidate and two baselines sharing one `settle` (as a worker's eager and compiled baselines do)."""
    def dispose(out):
        log.append(("dispose", "baseline"))

    def settle():
        log.append(("settle", "baselines"))

    fns = {"candidate": _logged(log, "candidate"), "eager": Disposed(_logged(log, "eager"), dispose, settle),
           "compile": Disposed(_logged(log, "compile"), dispose, settle)}
    return bench_interleaved_report(fns, _sets(), budget_ms=1, warmup_ms=0.5,
                                    measure_overhead=measure_overhead, **options)


def test_every_candidate_call_after_a_disposal_comes_after_a_settle():
    log: list = []
    _settled_run(log)
    owed = False
    for what, who in log:
        owed = (owed or what == "dispose") and what != "settle"
        if (what, who) == ("call", "candidate"):
            assert not owed, log
    assert log.count(("call", "candidate")) > 10


def test_baselines_sharing_a_settle_settle_once_between_candidate_calls():
    log: list = []
    report = _settled_run(log)
    settles = log.count(("settle", "baselines"))
    assert report.settles == settles <= log.count(("call", "candidate")) + 1
    assert report.disposals == log.count(("dispose", "baseline")) > 1.5 * settles, (report.disposals, settles)


def test_the_empty_function_owes_no_settle():
    log: list = []
    report = _settled_run(log, measure_overhead=True)
    assert report.overhead is not None and report.settles <= log.count(("call", "candidate")) + 1


def test_nothing_is_owed_when_the_run_returns():
    log: list = []
    _settled_run(log)
    last_dispose = max(i for i, entry in enumerate(log) if entry[0] == "dispose")
    assert ("settle", "baselines") in log[last_dispose:]


def test_nothing_is_owed_when_a_function_raises():
    log: list = []
    calls = {"n": 0}

    def failing(inputs):
        calls["n"] += 1
        if calls["n"] > 5:
            raise RuntimeError("a baseline failed")
        return inputs[0]

    fns = {"candidate": lambda inputs: inputs[0],
           "eager": Disposed(lambda inputs: inputs[0] * 2, lambda out: log.append("dispose"),
                             lambda: log.append("settle")),
           "compile": Disposed(failing, lambda out: log.append("dispose"), lambda: log.append("settle"))}
    with pytest.raises(FunctionFailed):
        bench_interleaved_report(fns, _sets(), budget_ms=1, warmup_ms=0.5, measure_overhead=False)
    assert "dispose" in log and log[-1] == "settle", log[-6:]


def test_settling_is_outside_the_timed_window():
    fns = {"candidate": lambda inputs: inputs[0],
           "baseline": Disposed(lambda inputs: inputs[0] * 2, lambda out: None, lambda: _busy(0.005))}
    report = bench_interleaved_report(fns, _sets(), budget_ms=1, warmup_ms=0.5, measure_overhead=False,
                                      min_reps=10, max_reps=10)
    assert report.timings["candidate"].median_ms < 2.0, report.timings["candidate"]
    assert report.dispose_ms >= 5.0 * report.settles and report.settles >= 10


def test_a_settle_given_as_a_bound_method_twice_is_one_settle():
    class Owner:
        settled = 0

        def settle(self):
            self.settled += 1

    owner, log = Owner(), []
    fns = {"candidate": lambda inputs: inputs[0],
           "eager": Disposed(lambda inputs: inputs[0] * 2, log.append, owner.settle),
           "compile": Disposed(lambda inputs: inputs[0] * 3, log.append, owner.settle)}  # a new bound method
    report = bench_interleaved_report(fns, _sets(), budget_ms=1, warmup_ms=0.5, measure_overhead=False)
    assert owner.settled == report.settles and report.disposals > 1.5 * report.settles
