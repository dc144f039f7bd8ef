"""The RL evaluation mode's pure parts: the GPU gate, the cache of baselines (carriers, drift, age, a carrier
in flight), filling cached baselines into a result, and the two-pass schedule of one candidate driven by a
stand-in for the evaluator's finish (the real one runs in test_eval_modes_cpu.py and tests/gpu/)."""

from __future__ import annotations

import argparse
import json
import pickle
import threading
import time
import types

import pytest

from cudaperf.eval_modes import (
    RL_GPU_STAGE_TIMEOUTS_S,
    RL_STAGE_TIMEOUTS_S,
    BaselineCache,
    CachedBaselines,
    GpuGate,
    RlScheduler,
    RlSettings,
    fill_timings,
    median_ci95_rel,
    through_anchor,
    timed_baselines,
)
from cudaperf.evaluate import EvalConfig, Evaluator, TimingConfig, with_cached_baselines
from cudaperf.types import ConfigTiming, EvalResult, InputConfig, Outcome, Task, TaskKind, Timing


def _timing(ms: float, n: int = 40, iqr: float = 0.0) -> Timing:
    return Timing(median_ms=ms, iqr_ms=iqr, min_ms=ms, mean_ms=ms, n_samples=n)


def _task(task_id: str = "t", source: str = "class Model: pass") -> Task:
    return Task(task_id, TaskKind.PYTORCH, source, (InputConfig("small"), InputConfig("large")))


def _carried(eager_ms: float = 2.0, outcome: Outcome = Outcome.CORRECT) -> EvalResult:
    timings = tuple(ConfigTiming(c, _timing(1.0), eager=_timing(eager_ms), compiled=_timing(eager_ms / 2))
                    for c in ("small", "large"))
    return EvalResult("t", "carrier", outcome, timings=timings)


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


FULL = TimingConfig()


# -- the gate ---------------------------------------------------------------------------------------

def test_shared_holders_of_the_gate_overlap():
    gate, inside, both = GpuGate(), threading.Barrier(2, timeout=5), []

    def check() -> None:
        with gate.shared():
            inside.wait()  # returns only when the other holder is inside too
            both.append(True)

    threads = [threading.Thread(target=check) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert both == [True, True]


def test_an_exclusive_holder_waits_for_the_shared_ones_to_leave():
    gate, events = GpuGate(), []
    release = threading.Event()

    def check() -> None:
        with gate.shared():
            events.append("check in")
            release.wait(5)
            events.append("check out")

    checker = threading.Thread(target=check)
    checker.start()
    while gate.readers == 0:
        time.sleep(0.001)
    timer = threading.Thread(target=lambda: gate.exclusive().__enter__() or events.append("timing"))
    timer.start()
    time.sleep(0.05)
    release.set()
    checker.join(5)
    timer.join(5)
    assert events == ["check in", "check out", "timing"]


def test_a_waiting_exclusive_taker_keeps_new_shared_holders_out():
    gate, order = GpuGate(), []
    first_in, release = threading.Event(), threading.Event()

    def first() -> None:
        with gate.shared():
            first_in.set()
            release.wait(5)

    def timing() -> None:
        with gate.exclusive():
            order.append("timing")

    def late_check() -> None:
        with gate.shared():
            order.append("late check")

    threads = [threading.Thread(target=first)]
    threads[0].start()
    first_in.wait(5)
    threads.append(threading.Thread(target=timing))
    threads[1].start()
    time.sleep(0.05)  # the timing thread now waits for the first check
    threads.append(threading.Thread(target=late_check))
    threads[2].start()
    time.sleep(0.05)
    release.set()
    for t in threads:
        t.join(5)
    assert order == ["timing", "late check"]


def test_the_gate_adds_its_wall_time_to_the_state_it_was_in():
    clock = _Clock()
    gate = GpuGate(clock=clock)
    release, timing, done = threading.Event(), threading.Event(), threading.Event()

    def check() -> None:
        with gate.shared():
            release.wait(5)

    def timed_pass() -> None:
        with gate.exclusive():
            timing.set()
            done.wait(5)

    checker, timer = threading.Thread(target=check), threading.Thread(target=timed_pass)
    checker.start()
    while gate.readers == 0:
        time.sleep(0.001)
    clock.now = 1.0  # one second shared
    timer.start()
    while gate._writers_waiting == 0:
        time.sleep(0.001)
    clock.now = 4.0  # three seconds draining: the check runs on while the timed pass waits
    release.set()
    timing.wait(5)
    clock.now = 6.0  # two seconds exclusive
    done.set()
    for t in (checker, timer):
        t.join(5)
    clock.now = 6.5  # half a second free
    assert gate.states() == {"free": 0.5, "shared": 1.0, "draining": 3.0, "exclusive": 2.0, "paused": 0.0}


def test_timed_passes_queued_behind_one_run_before_a_waiting_check():
    gate, order = GpuGate(), []
    holding, release = threading.Event(), threading.Event()

    def first_timing() -> None:
        with gate.exclusive():
            holding.set()
            release.wait(5)

    def check() -> None:
        with gate.shared():
            order.append("check")

    def second_timing() -> None:
        with gate.exclusive():
            order.append("second timing")

    threads = [threading.Thread(target=first_timing)]
    threads[0].start()
    holding.wait(5)
    for target in (check, second_timing):  # the check queues first
        threads.append(threading.Thread(target=target))
        threads[-1].start()
        time.sleep(0.05)
    release.set()
    for t in threads:
        t.join(5)
    assert order == ["second timing", "check"]

# -- the cache of baselines ---------------------------------------------------------------------------

def test_the_first_timed_candidate_of_a_task_carries_the_baselines():
    plan = BaselineCache(RlSettings()).plan(_task(), FULL)
    assert plan.carrier and plan.timing == FULL and plan.why == "first"


def test_later_candidates_time_only_the_anchor_with_the_ranking_budget():
    cache = BaselineCache(RlSettings(budget_ms=7.0, warmup_ms=3.0))
    cache.plan(_task(), FULL)
    cache.settle(_task(), "carrier", _carried())
    plan = cache.plan(_task(), FULL)
    assert not plan.carrier and plan.anchor == "eager"
    assert (plan.timing.baselines, plan.timing.budget_ms, plan.timing.warmup_ms) == (("eager",), 7.0, 3.0)


def test_anchored_candidates_may_be_cut_short_and_a_carrier_may_not():
    cache = BaselineCache(RlSettings(slow_cut_ratio=8.0, slow_cut_floor_ms=40.0))
    carrier = cache.plan(_task(), FULL)
    cache.settle(_task(), "carrier", _carried())
    anchored = cache.plan(_task(), FULL).timing
    assert carrier.timing.slow_cut_ratio == 0
    assert (anchored.slow_cut_ratio, anchored.slow_cut_floor_ms) == (8.0, 40.0)


def test_rl_settings_refuse_a_slow_cut_of_one_or_less():
    with pytest.raises(ValueError, match="slow_cut_ratio"):
        RlSettings(slow_cut_ratio=1.0)


def test_the_ranking_budget_times_no_empty_function_and_a_carrier_does():
    cache = BaselineCache(RlSettings())
    carrier = cache.plan(_task(), FULL)
    cache.settle(_task(), "carrier", _carried())
    assert carrier.timing.overhead and not cache.plan(_task(), FULL).timing.overhead


def test_without_the_live_anchor_later_candidates_time_no_baseline():
    cache = BaselineCache(RlSettings(live_anchor=False))
    cache.plan(_task(), FULL)
    cache.settle(_task(), "carrier", _carried())
    assert cache.plan(_task(), FULL).timing.baselines == ()


def test_the_anchor_of_a_c_task_is_its_naive_port():
    c_task = Task("c", TaskKind.C, "", (InputConfig("n"),))
    assert timed_baselines(c_task, FULL.baselines) == ("serial_c", "naive_cuda")
    assert BaselineCache(RlSettings()).plan(c_task, FULL).why == "first"
    assert timed_baselines(c_task, ("serial_c",)) == ("serial_c",) and timed_baselines(c_task, ()) == ()


def test_when_the_anchor_is_the_only_baseline_nothing_is_cached():
    cache = BaselineCache(RlSettings())
    plans = [cache.plan(_task(), TimingConfig(baselines=("eager",))) for _ in range(2)]
    assert [(p.carrier, p.why, p.timing.baselines) for p in plans] == [(False, "live only", ("eager",))] * 2


def _anchored(cache: BaselineCache, carrier_eager_ms: float = 2.0) -> str:
    """A task carried with eager at `carrier_eager_ms`; returns the anchor later candidates time."""
    cache.plan(_task(), FULL)
    cache.settle(_task(), "carrier", _carried(eager_ms=carrier_eager_ms))
    return cache.plan(_task(), FULL).anchor


def _live(small_ms: float, large_ms: float) -> EvalResult:
    """An anchored candidate's result: its live eager per configuration."""
    live = (("small", small_ms), ("large", large_ms))
    return EvalResult("t", "live", Outcome.CORRECT,
                      timings=tuple(ConfigTiming(c, _timing(1.0), eager=_timing(ms)) for c, ms in live))


def test_the_first_live_anchor_sets_the_reference_and_records_its_offset_from_the_carrier():
    cache = BaselineCache(RlSettings(drift_tolerance=0.1))
    anchor = _anchored(cache, carrier_eager_ms=2.0)
    first = cache.observe(_task(), _live(2.6, 2.6), anchor)
    assert {(d.config, d.reference, round(d.ratio, 3)) for d in first} == {("small", "carrier", 1.3),
                                                                         ("large", "carrier", 1.3)}
    assert len(cache.anchor_offset) == 2 and not cache.live_drift


def test_an_offset_between_the_protocols_alone_makes_no_candidate_carry():
    cache = BaselineCache(RlSettings(drift_tolerance=0.1))
    anchor = _anchored(cache, carrier_eager_ms=2.0)
    for small in (2.6, 2.7, 2.5, 2.65, 2.55):  # 25-35% above the carrier's median, within 10% of each other
        cache.observe(_task(), _live(small, 2.6), anchor)
        assert not cache.plan(_task(), FULL).carrier


def test_live_anchors_past_the_tolerance_of_the_reference_twice_in_a_row_make_the_next_candidate_carry():
    cache = BaselineCache(RlSettings(drift_tolerance=0.1))
    anchor = _anchored(cache)
    cache.observe(_task(), _live(2.0, 2.0), anchor)
    near = cache.observe(_task(), _live(2.1, 2.1), anchor)
    assert not cache.plan(_task(), FULL).carrier
    assert {(d.baseline, d.reference) for d in near} == {("eager", "live")}
    cache.observe(_task(), _live(2.5, 2.5), anchor)
    assert not cache.plan(_task(), FULL).carrier  # once past it: within the spread between candidates
    cache.observe(_task(), _live(2.4, 2.4), anchor)
    assert cache.plan(_task(), FULL).why == "drift" and len(cache.live_drift) == 6


def test_live_anchors_past_the_tolerance_on_either_side_in_turn_are_not_drift():
    cache = BaselineCache(RlSettings(drift_tolerance=0.1))
    anchor = _anchored(cache)
    cache.observe(_task(), _live(2.0, 2.0), anchor)
    for ms in (2.5, 1.6, 2.5, 1.6):
        cache.observe(_task(), _live(ms, ms), anchor)
        assert not cache.plan(_task(), FULL).carrier


def test_one_configuration_past_the_tolerance_is_not_drift_of_the_task():
    cache = BaselineCache(RlSettings(drift_tolerance=0.1))
    configs = ("small", "odd", "large")
    task = Task("t", TaskKind.PYTORCH, "class Model: pass", tuple(InputConfig(c) for c in configs))
    cache.plan(task, FULL)
    carried = EvalResult("t", "carrier", Outcome.CORRECT, timings=tuple(
        ConfigTiming(c, _timing(1.0), eager=_timing(2.0), compiled=_timing(1.0)) for c in configs))
    cache.settle(task, "carrier", carried)
    anchor = cache.plan(task, FULL).anchor

    def live(small_ms: float) -> EvalResult:
        return EvalResult("t", "live", Outcome.CORRECT, timings=tuple(
            ConfigTiming(c, _timing(1.0), eager=_timing(small_ms if c == "small" else 2.0))
            for c in configs))

    cache.observe(task, live(2.0), anchor)
    for _ in range(2):
        cache.observe(task, live(2.6), anchor)  # the small configuration alone 30% off: the median is not
        assert not cache.plan(task, FULL).carrier


def test_a_new_carrier_makes_the_next_live_anchor_the_reference_again():
    cache = BaselineCache(RlSettings(drift_tolerance=0.1, drift_every=2))
    anchor = _anchored(cache)
    cache.observe(_task(), _live(2.0, 2.0), anchor)
    cache.plan(_task(), FULL)
    assert cache.plan(_task(), FULL).carrier  # the drift check
    cache.settle(_task(), "again", _carried(eager_ms=3.0))
    again = cache.observe(_task(), _live(3.9, 3.9), cache.plan(_task(), FULL).anchor)
    assert {d.reference for d in again} == {"carrier"} and not cache.plan(_task(), FULL).carrier


def test_a_speedup_through_the_anchor_chains_two_interleaved_ratios_per_configuration():
    cached = {"small": CachedBaselines(eager=_timing(2.0), compiled=_timing(1.0)),
              "large": CachedBaselines(eager=_timing(8.0), compiled=_timing(2.0))}
    live = (ConfigTiming("small", _timing(0.5), eager=_timing(2.5)),
            ConfigTiming("large", _timing(1.0), eager=_timing(8.0)))
    # small: (1.0 / 2.0) x (2.5 / 0.5) = 2.5; large: (2.0 / 8.0) x (8.0 / 1.0) = 2.0; geometric mean sqrt(5)
    assert through_anchor(live, cached, "eager") == {"compile": pytest.approx(5 ** 0.5)}


def test_a_c_task_chains_its_serial_baseline_through_the_naive_port():
    cached = {"n": CachedBaselines(baselines={"serial_c": _timing(40.0), "naive_cuda": _timing(4.0)})}
    live = (ConfigTiming("n", _timing(1.0), baselines={"naive_cuda": _timing(5.0)}),)
    assert through_anchor(live, cached, "naive_cuda") == {"serial_c": pytest.approx(50.0)}


def test_the_ranking_budget_never_exceeds_the_configured_one():
    cache = BaselineCache(RlSettings(budget_ms=50.0))
    small = TimingConfig(budget_ms=5.0, warmup_ms=1.0)
    cache.plan(_task(), small)
    cache.settle(_task(), "carrier", _carried())
    assert cache.plan(_task(), small).timing.budget_ms == 5.0


def test_every_nth_timed_candidate_carries_again_and_the_drift_is_recorded():
    cache = BaselineCache(RlSettings(drift_every=2))
    cache.plan(_task(), FULL)
    cache.settle(_task(), "carrier", _carried(eager_ms=2.0))
    assert [cache.plan(_task(), FULL).carrier for _ in range(3)] == [False, False, True]
    drift = cache.settle(_task(), "again", _carried(eager_ms=2.2))
    eager = {(d.config, d.baseline): d.ratio for d in drift}[("small", "eager")]
    assert eager == pytest.approx(1.1) and cache.drift == drift


def test_cached_baselines_older_than_the_limit_are_timed_again():
    clock = _Clock()
    cache = BaselineCache(RlSettings(drift_max_age_s=60.0), clock=clock)
    cache.plan(_task(), FULL)
    cache.settle(_task(), "carrier", _carried())
    clock.now = 61.0
    assert cache.plan(_task(), FULL).why == "age"


def test_a_carrier_that_fails_leaves_the_next_candidate_to_carry():
    cache = BaselineCache(RlSettings())
    cache.plan(_task(), FULL)
    cache.settle(_task(), "carrier", _carried(outcome=Outcome.INCORRECT))
    assert cache.plan(_task(), FULL).carrier and cache.lookup(_task()) is None


def test_while_a_carrier_is_in_flight_the_next_plan_of_its_task_waits_for_it():
    cache, plans = BaselineCache(RlSettings()), []
    cache.plan(_task(), FULL)
    waiter = threading.Thread(target=lambda: plans.append(cache.plan(_task(), FULL)))
    waiter.start()
    time.sleep(0.05)
    assert plans == []
    cache.settle(_task(), "carrier", _carried())
    waiter.join(5)
    assert len(plans) == 1 and not plans[0].carrier


def test_tasks_sharing_an_id_but_not_a_source_do_not_share_baselines():
    cache = BaselineCache(RlSettings())
    cache.plan(_task(), FULL)
    cache.settle(_task(), "carrier", _carried())
    assert cache.plan(_task(source="class Model: x = 1"), FULL).carrier


def test_without_baselines_requested_no_candidate_carries():
    cache = BaselineCache(RlSettings())
    timing = TimingConfig(baselines=())
    plans = [cache.plan(_task(), timing) for _ in range(2)]
    assert [(p.carrier, p.timing.baselines) for p in plans] == [(False, ())] * 2


# -- cached baselines in a result ---------------------------------------------------------------------

def test_cached_baselines_are_written_into_the_timings_and_the_speedups_follow():
    alone = EvalResult("t", "s", Outcome.CORRECT, timings=(ConfigTiming("small", _timing(0.5)),))
    cached = {"small": CachedBaselines(eager=_timing(2.0), compiled=_timing(1.0))}
    result = with_cached_baselines(alone, cached)
    assert (result.speedup_vs_eager, result.speedup_vs_compile) == (4.0, 2.0)
    assert result.speedups == {"eager": 4.0, "compile": 2.0}


def test_a_baseline_the_job_timed_itself_keeps_its_own_value():
    own = ConfigTiming("small", _timing(1.0), baselines={"inout_restore": _timing(0.1)})
    cached = {"small": CachedBaselines(baselines={"inout_restore": _timing(9.0), "serial_c": _timing(5.0)})}
    (filled,) = fill_timings((own,), cached)
    assert filled.baselines["inout_restore"].median_ms == 0.1
    assert filled.baselines["serial_c"].median_ms == 5.0


def test_the_confidence_interval_of_a_median_narrows_with_more_samples():
    few, many = median_ci95_rel(_timing(1.0, n=16, iqr=0.04)), median_ci95_rel(_timing(1.0, n=64, iqr=0.04))
    assert few == pytest.approx(1.57 * 0.04 / 4) and many == pytest.approx(few / 2)


# -- the schedule of one candidate --------------------------------------------------------------------

class _FakeFinish:
    """Stands in for `Evaluator._finish_with`: records each pass (its timing and the gate mode it held)
    and answers with the outcomes it was given, per pass."""

    def __init__(self, gate_of, *outcomes: Outcome):
        self.gate_of, self.outcomes, self.passes = gate_of, list(outcomes), []
        self.exclusive_s = 0.0  # how long a pass holding the gate exclusively lasts

    def __call__(self, task, solution, start, submitted, timing, hold) -> EvalResult:
        with hold():
            gate = self.gate_of()
            mode = "exclusive" if gate.exclusive_held else "shared"
            if mode == "exclusive":
                time.sleep(self.exclusive_s)
        self.passes.append((timing.enabled, timing.baselines, mode))
        timings = ()
        if timing.enabled:
            live = set(timing.baselines)
            timings = tuple(ConfigTiming(c, _timing(1.0), eager=_timing(3.0) if "eager" in live else None,
                                         compiled=_timing(2.0) if "compile" in live else None)
                            for c in ("small", "large"))
        return EvalResult(task.task_id, solution.solution_id, self.outcomes.pop(0), timings=timings)


class _Sol:
    def __init__(self, solution_id: str):
        self.solution_id = solution_id


def _scheduler(*outcomes: Outcome, timing: TimingConfig = FULL) -> tuple[RlScheduler, _FakeFinish]:
    holder: list[RlScheduler] = []
    fake = _FakeFinish(lambda: holder[0].gate, *outcomes)
    holder.append(RlScheduler(fake, with_cached_baselines, timing, RlSettings()))
    return holder[0], fake


def test_an_incorrect_candidate_gets_only_the_check_pass():
    scheduler, fake = _scheduler(Outcome.INCORRECT)
    result = scheduler.finish(_task(), _Sol("s"), None, None)
    assert result.outcome is Outcome.INCORRECT and fake.passes == [(False, FULL.baselines, "shared")]


def test_a_correct_candidate_is_checked_shared_then_timed_exclusively():
    scheduler, fake = _scheduler(Outcome.CORRECT, Outcome.CORRECT)
    result = scheduler.finish(_task(), _Sol("s"), None, None)
    assert [p[2] for p in fake.passes] == ["shared", "exclusive"]
    assert fake.passes[1][:2] == (True, FULL.baselines) and result.environment["baselines"] == "timed (first)"


def test_an_anchored_candidate_gets_the_carriers_costly_baselines_and_its_own_anchor():
    scheduler, fake = _scheduler(*[Outcome.CORRECT] * 4)
    scheduler.finish(_task(), _Sol("first"), None, None)
    result = scheduler.finish(_task(), _Sol("second"), None, None)
    assert fake.passes[3][1] == ("eager",) and result.speedup_vs_compile == pytest.approx(2.0)
    assert result.environment["baselines"].startswith("eager live, cached from first")
    assert json.loads(result.environment["anchor_offset"]) == {"small": 1.0, "large": 1.0}
    assert json.loads(result.environment["speedups_through_anchor"]) == {"compile": pytest.approx(2.0)}


def test_a_timed_pass_reports_how_long_it_held_the_gpu_alone():
    scheduler, fake = _scheduler(Outcome.CORRECT, Outcome.CORRECT)
    fake.exclusive_s = 0.05
    result = scheduler.finish(_task(), _Sol("s"), None, None)
    assert result.stage_durations_s["gate_held"] >= 0.05


def test_with_timing_off_every_candidate_gets_one_pass():
    scheduler, fake = _scheduler(Outcome.CORRECT, timing=TimingConfig(enabled=False))
    assert scheduler.finish(_task(), _Sol("s"), None, None).outcome is Outcome.CORRECT
    assert len(fake.passes) == 1


def test_a_timed_pass_that_disagrees_decides_and_the_check_verdict_is_kept():
    scheduler, _ = _scheduler(Outcome.CORRECT, Outcome.INCORRECT)
    result = scheduler.finish(_task(), _Sol("s"), None, None)
    assert result.outcome is Outcome.INCORRECT and result.environment["rl_check_outcome"] == "correct"
    assert scheduler.counts["verdict_changed"] == 1


def test_a_carrier_whose_pass_raises_lets_the_next_candidate_carry():
    scheduler, fake = _scheduler(Outcome.CORRECT)  # the timed pass finds no outcome left: it raises
    with pytest.raises(IndexError):
        scheduler.finish(_task(), _Sol("s"), None, None)
    assert scheduler.baselines.plan(_task(), FULL).carrier


# -- configuration and entry points -------------------------------------------------------------------

def test_an_unknown_mode_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="'default' or 'rl'"):
        EvalConfig(mode="fast")


@pytest.mark.parametrize("bad", [{"workers_per_gpu": 0}, {"budget_ms": 0.0}, {"drift_every": 0},
                                 {"drift_tolerance": 0.0}, {"stage_timeouts_s": {"correctness": 0.0}}])
def test_impossible_rl_settings_are_refused(bad):
    with pytest.raises(ValueError, match="RlSettings"):
        RlSettings(**bad)


def test_the_rl_mode_gives_candidate_stages_its_own_deadlines():
    assert EvalConfig(mode="rl").deadlines_s()["correctness"] == RL_STAGE_TIMEOUTS_S["correctness"] < 300


def test_the_rl_mode_on_a_gpu_gives_the_correctness_stage_a_shorter_deadline():
    assert EvalConfig(mode="rl").deadlines_s(gpu=True)["correctness"] \
        == RL_GPU_STAGE_TIMEOUTS_S["correctness"] < RL_STAGE_TIMEOUTS_S["correctness"]


def test_named_stage_deadlines_override_the_rl_modes_gpu_ones():
    config = EvalConfig(mode="rl", stage_timeouts_s={"correctness": 40.0})
    assert config.deadlines_s(gpu=True)["correctness"] == 40.0


def test_a_non_positive_gpu_deadline_is_refused():
    with pytest.raises(ValueError, match="gpu_stage_timeouts_s"):
        RlSettings(gpu_stage_timeouts_s={"correctness": -1.0})


def test_the_default_mode_keeps_the_sandbox_deadlines():
    assert EvalConfig().deadlines_s() == {} == EvalConfig().deadlines_s(gpu=True)


def test_named_stage_deadlines_override_the_rl_modes():
    config = EvalConfig(mode="rl", stage_timeouts_s={"correctness": 5.0})
    assert config.deadlines_s()["correctness"] == 5.0
    assert config.deadlines_s()["timing"] == RL_STAGE_TIMEOUTS_S["timing"]


def test_the_rl_mode_starts_several_workers_per_gpu():
    ev = Evaluator(EvalConfig(device="cpu", mode="rl", rl=RlSettings(workers_per_gpu=3, cpu_workers=2)))
    assert ev._worker_devices() == [None, None]
    ev.mode, ev.devices = "cuda", [0, 1]
    assert ev._worker_devices() == [0, 0, 0, 1, 1, 1]


def test_the_default_mode_keeps_one_worker_per_gpu():
    ev = Evaluator(EvalConfig(device="cpu"))
    assert ev._worker_devices() is None
    ev.mode, ev.devices = "cuda", [0, 1]
    assert ev._worker_devices() == [0, 1]


def test_the_agents_local_evaluator_takes_the_mode_and_keeps_it_when_pickled():
    from cudaperf.agent.evaluation import LocalEvaluator

    local = pickle.loads(pickle.dumps(LocalEvaluator(EvalConfig(device="none"), mode="rl")))
    assert local.config.mode == "rl" and local.config.device == "none"


def test_cudaperf_eval_passes_the_mode_to_the_evaluator():
    from cudaperf.commands import eval_cmd

    parser = argparse.ArgumentParser()
    eval_cmd.add_arguments(parser)
    assert eval_cmd._config(parser.parse_args(["t.py", "s.py", "--mode", "rl"])).mode == "rl"


def test_cudaperf_optimize_passes_the_mode_to_the_evaluator():
    from cudaperf.commands import optimize_cmd

    parser = argparse.ArgumentParser()
    optimize_cmd.add_arguments(parser)
    _, eval_config, _ = optimize_cmd._configs(parser.parse_args(["examples", "--mode", "rl"]))
    assert eval_config.mode == "rl"


# -- task affinity: the queue of a batch whose threads are bound to workers ------------------------------

def _pair(task_id: str, n: int) -> tuple:
    return (types.SimpleNamespace(task_id=task_id), n, None, None)


def test_a_bound_thread_takes_the_oldest_pair_of_its_workers_last_task_first():
    from cudaperf.evaluate import TaskQueue

    jobs = TaskQueue()
    for pair in (_pair("a", 0), _pair("b", 1), _pair("b", 2), _pair("a", 3)):
        jobs.put(pair)
    jobs.close()  # every pair is in: an empty queue then answers None rather than waiting
    assert [jobs.take("b")[1], jobs.take("a")[1], jobs.take("c")[1], jobs.take(None)[1]] == [1, 0, 2, 3]
    assert jobs.take("a") is None
