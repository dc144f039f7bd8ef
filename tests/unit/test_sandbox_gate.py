"""The go-ahead hook of a worker's job (`Worker.run(..., on_proceed)`) and the gate turn the RL mode builds
on it (`eval_modes.GateTurn`): real CPU-mode workers with and without the referee, the small PyTorch task
of the session tests."""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from pathlib import Path

import pytest

from cudaperf.eval_modes import GpuGate
from cudaperf.execute import Limits, StageTimeouts, WorkerPool

sys.path.insert(0, str(Path(__file__).parent))
from test_referee import _job  # a job of the small task with two seeds and eager timing
from test_session import CORRECT, WRONG

TIMEOUTS = StageTimeouts(default_s=120.0, start_s=180.0)
LIMITS = Limits(address_space_bytes=8 << 30)
HELD_S = 0.3


@pytest.fixture(scope="module")
def refereed():
    with WorkerPool(None, LIMITS, timeouts=TIMEOUTS) as pool:
        pool.warm_up()
        yield pool


@pytest.fixture(scope="module")
def unrefereed():
    with WorkerPool(None, dataclasses.replace(LIMITS, referee=False), timeouts=TIMEOUTS) as pool:
        pool.warm_up()
        yield pool


def _run(pool, source: str) -> tuple[object, list[float]]:
    calls: list[float] = []

    def on_proceed() -> None:
        calls.append(time.monotonic())
        time.sleep(HELD_S)

    return pool.run(_job(source), on_proceed=on_proceed), calls


def test_a_correct_candidate_waits_for_the_go_ahead_before_timing(refereed):
    reply, calls = _run(refereed, CORRECT)
    assert reply.outcome is None, (reply.message, reply.logs[-2000:])
    assert len(calls) == 1 and reply.payload["timings"]
    assert reply.durations_s["gate_wait"] >= HELD_S


def test_a_wait_for_the_go_ahead_longer_than_the_stage_limit_is_not_a_timeout(refereed):
    short = StageTimeouts(default_s=5.0, start_s=180.0)
    calls: list[float] = []
    reply = refereed.run(_job(CORRECT), short, on_proceed=lambda: (calls.append(1), time.sleep(6.0)))
    assert reply.outcome is None, (reply.outcome, reply.message)
    assert calls and reply.payload["timings"] and reply.durations_s["gate_wait"] >= 6.0


def test_the_checks_end_is_told_once_before_the_go_ahead(refereed):
    order: list[str] = []
    reply = refereed.run(_job(CORRECT), on_proceed=lambda: order.append("proceed"),
                         on_checked=lambda: order.append("checked"))
    assert reply.outcome is None and order == ["checked", "proceed"], (order, reply.message)


def test_a_wrong_candidate_s_checks_end_is_not_told(refereed):
    order: list[str] = []
    refereed.run(_job(WRONG), on_proceed=lambda: order.append("proceed"),
                 on_checked=lambda: order.append("checked"))
    assert order == []


def test_the_result_is_told_once_after_the_go_ahead(refereed):
    order: list[str] = []
    reply = refereed.run(_job(CORRECT), on_proceed=lambda: order.append("proceed"),
                         on_checked=lambda: order.append("checked"), on_result=lambda: order.append("result"))
    assert reply.outcome is None and order == ["checked", "proceed", "result"], (order, reply.message)


def test_a_wrong_candidate_s_result_is_told_too(refereed):
    order: list[str] = []
    refereed.run(_job(WRONG), on_result=lambda: order.append("result"))
    assert order == ["result"]


def test_a_job_whose_worker_died_is_not_told_its_result(refereed):
    order: list[str] = []
    head = "def forward(self, x, z):"
    dies = CORRECT.replace(head, head + "\n        import os; os._exit(3)")
    assert dies != CORRECT
    reply = refereed.run(_job(dies), on_result=lambda: order.append("result"))
    assert reply.worker_replaced and order == [], (reply.outcome, reply.message)


def _gate_at_verdict(pool, monkeypatch, release_at_result: bool) -> tuple[object, dict]:
    """A correct candidate's job under a `GateTurn` as the RL mode holds it, and the gate's state when the
    parent asks the referee for its verdict."""
    gate = GpuGate()
    turn, seen = gate.turn(), {}
    for worker in pool.workers:
        link, request = worker.referee, worker.referee.request

        def asked(message, deadline, request=request):
            if message.get("type") == "finish":
                seen.update(exclusive=gate.exclusive_held, readers=gate.readers)
            return request(message, deadline)
        monkeypatch.setattr(link, "request", asked)
    with turn.hold():
        reply = pool.run(_job(CORRECT), on_proceed=turn.upgrade, on_checked=turn.step_aside,
                         on_result=turn.step_aside if release_at_result else None)
    return reply, seen


def test_a_turn_released_at_the_result_leaves_the_gate_before_the_referees_verdict(refereed, monkeypatch):
    reply, seen = _gate_at_verdict(refereed, monkeypatch, release_at_result=True)
    assert reply.outcome is None and reply.payload["timings"], reply.message
    assert reply.payload["correctness"] and seen == {"exclusive": False, "readers": 0}


def test_a_turn_not_released_at_the_result_holds_the_gate_through_the_verdict(refereed, monkeypatch):
    reply, seen = _gate_at_verdict(refereed, monkeypatch, release_at_result=False)
    assert reply.outcome is None and seen == {"exclusive": True, "readers": 0}


def test_a_wrong_candidate_never_asks_for_the_go_ahead(refereed):
    reply, calls = _run(refereed, WRONG)
    assert calls == [] and not reply.payload.get("timings")


def test_without_the_referee_the_whole_job_waits_for_the_go_ahead(unrefereed):
    reply, calls = _run(unrefereed, WRONG)
    assert len(calls) == 1


def test_without_the_referee_the_go_ahead_s_timing_narrows_the_job(unrefereed):
    from cudaperf.jobs import TimingConfig

    reply = unrefereed.run(_job(CORRECT), on_proceed=lambda: TimingConfig(baselines=(), overhead=False))
    assert reply.outcome is None and reply.payload["timings"], (reply.message, reply.logs[-2000:])
    assert all(t["eager"] is None and t["overhead_ms"] is None for t in reply.payload["timings"])


def test_a_turn_upgraded_to_exclusive_waits_for_the_shared_holders_and_keeps_new_ones_out():
    gate, log = GpuGate(), []
    turn = gate.turn()
    other_inside, release_other = threading.Event(), threading.Event()

    def other_job() -> None:
        with gate.shared():
            other_inside.set()
            release_other.wait(5)
            log.append("other leaves")

    def late_job() -> None:
        with gate.shared():
            log.append("late enters")

    with turn.hold():
        first = threading.Thread(target=other_job)
        first.start()
        assert other_inside.wait(5)
        threading.Timer(0.2, release_other.set).start()
        turn.upgrade()
        log.append("exclusive")
        late = threading.Thread(target=late_job)
        late.start()
        time.sleep(0.1)
        log.append("turn leaves")
    late.join(5)
    first.join(5)
    assert log == ["other leaves", "exclusive", "turn leaves", "late enters"]
    assert gate.readers == 0


def test_a_turn_that_stepped_aside_holds_nothing_and_still_gets_its_exclusive_turn():
    gate = GpuGate()
    turn, other = gate.turn(), gate.turn()
    with turn.hold():
        turn.step_aside()
        assert gate.readers == 0
        with other.hold():
            other.upgrade()  # would wait for ever if the first turn still held the shared side
            assert gate.exclusive_held
        turn.upgrade()
        assert gate.exclusive_held
    assert not gate.exclusive_held and gate.readers == 0


def test_a_parent_slow_to_read_the_timing_stage_does_not_make_an_honest_candidate_a_cheat(refereed,
                                                                                           monkeypatch):
    """The parent reads the worker's "timing" stage message only after the timing is over (as on a loaded
    CPU): the window the referee checks the timed calls against still starts at the go-ahead."""
    from cudaperf.execute import sandbox

    worker = refereed.workers[0]
    real = sandbox.Worker._next_event

    def slow(self, deadline):
        event = real(self, deadline)
        if event.kind == "message" and event.message.get("type") == "stage" and \
                event.message.get("name") == "timing":
            time.sleep(3.0)  # the worker times meanwhile; its result is waiting when we read again
        return event

    monkeypatch.setattr(sandbox.Worker, "_next_event", slow)
    reply = worker.run(_job(CORRECT), TIMEOUTS)
    assert reply.outcome is None, (reply.message, reply.logs[-2000:])
    assert reply.durations_s["timing"] < 0.5 and reply.payload["timings"]
    assert "verdict_mismatch" not in {f["code"] for f in reply.payload.get("flags", [])}
