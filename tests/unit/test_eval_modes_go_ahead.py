"""The RL mode's one-job schedule (`RlScheduler` with a referee's go-ahead) with
`RlSettings.plan_at_go_ahead`: the baselines' plan is made at the go-ahead to time, so a candidate of a
task whose carrier is in flight runs its checks meanwhile and waits only before timing; without it, the
plan is made before the job. Driven by a stand-in for the evaluator's finish that calls the hooks in the
order `execute.sandbox.Worker.run` does with a refereed worker (the real one runs in
test_eval_modes_cpu.py; what the worker and the referee do with the go-ahead's timing, in
test_timing_go_ahead.py)."""

from __future__ import annotations

import threading
import time

from cudaperf.eval_modes import RlScheduler, RlSettings
from cudaperf.evaluate import TimingConfig, with_cached_baselines
from cudaperf.types import ConfigTiming, EvalResult, InputConfig, Outcome, Task, TaskKind, Timing

FULL = TimingConfig()
WAIT_S = 5.0  # longest any step may take before a test calls it stuck


def _task() -> Task:
    return Task("t", TaskKind.PYTORCH, "class Model: pass", (InputConfig("small"), InputConfig("large")))


def _timing(ms: float) -> Timing:
    return Timing(median_ms=ms, iqr_ms=0.0, min_ms=ms, mean_ms=ms, n_samples=40)


class _Sol:
    def __init__(self, solution_id: str):
        self.solution_id = solution_id


class _RefereedFinish:
    """Stands in for `Evaluator._finish_with` on a refereed worker: under `hold()` the checks (logged
    "checks"), then `on_checked()`, then `on_proceed()` (logged "proceed" before, "timing" after; what it
    returns is what the worker times, kept in `asked`) and the timing stage; then, the gate left, the
    verdict and features, and the result ("done"). A candidate in `wrong` fails its checks (no
    go-ahead); one in `fails_timing` fails in its timing stage; one in `paused` waits for that event after
    leaving the gate (a carrier in flight that holds no side of the gate); one in `before_proceed` waits
    for that event before asking. `skip_checked` leaves `on_checked` out, so the job still holds the gate
    shared when it asks."""

    def __init__(self, wrong=(), fails_timing=(), skip_checked: bool = False):
        self.wrong, self.fails_timing, self.skip_checked = set(wrong), set(fails_timing), skip_checked
        self.paused: dict[str, threading.Event] = {}
        self.before_proceed: dict[str, threading.Event] = {}
        self.asked: dict[str, TimingConfig] = {}
        self.events: list[tuple[str, str]] = []
        self.timing_s = 0.0  # how long each timing stage lasts

    def __call__(self, task, solution, start, submitted, timing, hold, on_proceed=None, on_checked=None,
                 on_result=None) -> EvalResult:
        sid = solution.solution_id
        with hold():
            self.events.append(("checks", sid))
            if sid in self.wrong:
                return EvalResult(task.task_id, sid, Outcome.INCORRECT)
            if on_checked is not None and not self.skip_checked:
                on_checked()
            if sid in self.before_proceed:
                assert self.before_proceed[sid].wait(WAIT_S)
            self.events.append(("proceed", sid))
            asked = self.asked[sid] = on_proceed() or timing
            self.events.append(("timing", sid))
            time.sleep(self.timing_s)
        if sid in self.paused:
            assert self.paused[sid].wait(WAIT_S)
        self.events.append(("done", sid))
        if sid in self.fails_timing:
            return EvalResult(task.task_id, sid, Outcome.INCORRECT)
        live = set(asked.baselines)
        timings = tuple(ConfigTiming(c, _timing(1.0), eager=_timing(3.0) if "eager" in live else None,
                                     compiled=_timing(2.0) if "compile" in live else None)
                        for c in ("small", "large"))
        return EvalResult(task.task_id, sid, Outcome.CORRECT, timings=timings)

    def wait_for(self, event: tuple[str, str]) -> None:
        deadline = time.monotonic() + WAIT_S
        while event not in self.events:
            assert time.monotonic() < deadline, (event, self.events)
            time.sleep(0.002)

    def before(self, first: tuple[str, str], then: tuple[str, str]) -> bool:
        return self.events.index(first) < self.events.index(then)


def _scheduler(fake: _RefereedFinish, at_go_ahead: bool = True) -> RlScheduler:
    return RlScheduler(fake, with_cached_baselines, FULL, RlSettings(plan_at_go_ahead=at_go_ahead),
                       one_pass=True)


def _in_thread(scheduler: RlScheduler, solution_id: str, results: dict) -> threading.Thread:
    thread = threading.Thread(target=lambda: results.update(
        {solution_id: scheduler.finish(_task(), _Sol(solution_id), None, None)}), daemon=True)
    thread.start()
    return thread


def _second_behind_a_paused_carrier(fake: _RefereedFinish, at_go_ahead: bool = True,
                                    ) -> tuple[dict, list[threading.Thread], float]:
    """"first" carries and is paused after its timing stage (out of the gate, its result not yet in) while
    "second" runs; "first" is let go once "second" has asked to time (or, planned before its job, after a
    while). The results, both threads (joined) and how long "first" was held then."""
    scheduler, results = _scheduler(fake, at_go_ahead), {}
    fake.paused["first"] = threading.Event()
    threads = [_in_thread(scheduler, "first", results)]
    fake.wait_for(("timing", "first"))
    threads.append(_in_thread(scheduler, "second", results))
    if at_go_ahead:
        fake.wait_for(("proceed", "second"))
    held_s = 0.1
    time.sleep(held_s)
    fake.paused["first"].set()
    for thread in threads:
        thread.join(WAIT_S)
    assert not any(t.is_alive() for t in threads), fake.events
    return results, threads, held_s


def test_a_candidate_whose_task_has_a_carrier_in_flight_runs_its_checks_meanwhile():
    fake = _RefereedFinish()
    _second_behind_a_paused_carrier(fake)
    assert fake.before(("checks", "second"), ("done", "first")), fake.events


def test_that_candidate_is_timed_only_after_the_carrier_is_done():
    fake = _RefereedFinish()
    _second_behind_a_paused_carrier(fake)
    assert fake.before(("done", "first"), ("timing", "second")), fake.events


def test_the_wait_for_the_carrier_at_the_go_ahead_is_reported_as_plan_wait():
    results, _, held_s = _second_behind_a_paused_carrier(_RefereedFinish())
    assert results["second"].stage_durations_s["plan_wait"] >= held_s
    assert results["first"].stage_durations_s["plan_wait"] < held_s


def test_after_a_usable_carrier_the_waiting_candidate_times_only_its_anchor_with_the_ranking_budget():
    fake = _RefereedFinish()
    results, _, _ = _second_behind_a_paused_carrier(fake)
    settings = RlSettings()
    asked = fake.asked["second"]
    assert (asked.baselines, asked.budget_ms, asked.warmup_ms, asked.overhead) == (
        ("eager",), settings.budget_ms, settings.warmup_ms, False)
    assert results["second"].environment["baselines"].startswith("eager live, cached from first")


def test_the_carrier_itself_times_every_baseline_with_the_whole_budget():
    fake = _RefereedFinish()
    results, _, _ = _second_behind_a_paused_carrier(fake)
    assert fake.asked["first"] == FULL and results["first"].environment["baselines"] == "timed (first)"


def test_when_the_carrier_fails_in_its_timing_stage_the_waiting_candidate_carries():
    fake = _RefereedFinish(fails_timing={"first"})
    results, _, _ = _second_behind_a_paused_carrier(fake)
    assert fake.asked["second"] == FULL and results["second"].environment["baselines"] == "timed (first)"


def test_planned_before_the_job_a_candidate_starts_its_checks_only_after_the_carrier_is_done():
    fake = _RefereedFinish()
    results, _, held_s = _second_behind_a_paused_carrier(fake, at_go_ahead=False)
    assert fake.before(("done", "first"), ("checks", "second")), fake.events
    assert results["second"].stage_durations_s["plan_wait"] >= held_s


def test_a_timed_candidate_reports_how_long_it_held_the_gpu_alone_and_a_failed_one_none():
    fake = _RefereedFinish(wrong={"first"})
    fake.timing_s = 0.05
    scheduler = _scheduler(fake)
    failed = scheduler.finish(_task(), _Sol("first"), None, None)
    timed = scheduler.finish(_task(), _Sol("second"), None, None)
    assert failed.stage_durations_s["gate_held"] == 0.0 and timed.stage_durations_s["gate_held"] >= 0.05


def test_a_candidate_that_fails_its_checks_never_carries():
    fake = _RefereedFinish(wrong={"first"})
    scheduler = _scheduler(fake)
    assert scheduler.finish(_task(), _Sol("first"), None, None).outcome is Outcome.INCORRECT
    second = scheduler.finish(_task(), _Sol("second"), None, None)
    assert second.environment["baselines"] == "timed (first)" and scheduler.counts["carriers"] == 1


def test_a_candidate_waiting_for_its_carrier_holds_no_side_of_the_gate():
    """"second" is in its checks (the gate shared) when "first" asks for its exclusive turn as the carrier;
    "second" then asks while still holding the gate shared (no `on_checked`): were it to wait for the
    carrier there, the carrier would wait for it to leave, and neither would finish."""
    fake = _RefereedFinish(skip_checked=True)
    scheduler, results = _scheduler(fake), {}
    fake.before_proceed["first"], fake.before_proceed["second"] = threading.Event(), threading.Event()
    threads = [_in_thread(scheduler, "first", results)]
    fake.wait_for(("checks", "first"))
    threads.append(_in_thread(scheduler, "second", results))
    fake.wait_for(("checks", "second"))
    fake.before_proceed["first"].set()
    fake.wait_for(("proceed", "first"))
    time.sleep(0.05)  # "first" plans as the carrier and waits for the exclusive side
    fake.before_proceed["second"].set()
    for thread in threads:
        thread.join(WAIT_S)
    assert not any(t.is_alive() for t in threads), fake.events
    assert results["first"].environment["baselines"] == "timed (first)"
    assert results["second"].environment["baselines"].startswith("eager live, cached from first")


def test_two_threads_finish_four_candidates_of_one_task_without_a_deadlock():
    fake = _RefereedFinish(skip_checked=True)
    scheduler, results = _scheduler(fake), {}
    todo = [f"c{i}" for i in range(4)]
    lock = threading.Lock()

    def drain() -> None:
        while True:
            with lock:
                if not todo:
                    return
                sid = todo.pop(0)
            results[sid] = scheduler.finish(_task(), _Sol(sid), None, None)

    threads = [threading.Thread(target=drain, daemon=True) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(4 * WAIT_S)
    assert not any(t.is_alive() for t in threads), fake.events
    assert sorted(results) == ["c0", "c1", "c2", "c3"] and scheduler.counts["carriers"] == 1
