"""The GPU gate lent outside the evaluator (`GpuGate.paused`, the policy's generation in RL): no timed
pass starts while it is held, checks go on beside it even with a timed pass waiting, it waits for a timed
pass under way, and its wall time is its own state."""

from __future__ import annotations

import threading
import time

from cudaperf.eval_modes import GpuGate


def _wait_until(condition, timeout_s: float = 5.0) -> None:
    end = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > end:
            raise AssertionError("timed out")
        time.sleep(0.001)


def test_no_timed_pass_starts_while_the_gate_is_paused():
    gate, order = GpuGate(), []
    with gate.paused():
        timer = threading.Thread(target=lambda: gate.exclusive().__enter__() or order.append("timing"))
        timer.start()
        time.sleep(0.05)
        order.append("pause over")
    timer.join(5)
    assert order == ["pause over", "timing"]


def test_checks_start_during_a_pause_though_a_timed_pass_waits():
    gate, order = GpuGate(), []
    with gate.paused():
        timer = threading.Thread(target=lambda: gate.exclusive().__enter__() or order.append("timing"))
        timer.start()
        _wait_until(lambda: gate._writers_waiting == 1)
        with gate.shared():
            order.append("check")
        order.append("pause over")
    timer.join(5)
    assert order == ["check", "pause over", "timing"]


def test_a_pause_waits_for_a_timed_pass_under_way():
    gate, order = GpuGate(), []
    timing, release = threading.Event(), threading.Event()

    def timed_pass() -> None:
        with gate.exclusive():
            timing.set()
            release.wait(5)
            order.append("timing over")

    def pause() -> None:
        with gate.paused():
            order.append("paused")

    timer = threading.Thread(target=timed_pass)
    timer.start()
    timing.wait(5)
    pauser = threading.Thread(target=pause)
    pauser.start()
    time.sleep(0.05)
    release.set()
    for t in (timer, pauser):
        t.join(5)
    assert order == ["timing over", "paused"]


def test_a_pause_does_not_wait_for_checks():
    gate, release = GpuGate(), threading.Event()

    def check() -> None:
        with gate.shared():
            release.wait(5)

    checker = threading.Thread(target=check)
    checker.start()
    _wait_until(lambda: gate.readers == 1)
    with gate.paused():
        paused_beside_a_check = gate.readers == 1
    release.set()
    checker.join(5)
    assert paused_beside_a_check


def test_the_paused_time_is_its_own_state():
    clock = type("Clock", (), {"now": 0.0, "__call__": lambda self: self.now})()
    gate = GpuGate(clock=clock)
    with gate.paused():
        with gate.shared():
            clock.now = 2.0
        clock.now = 3.0
    clock.now = 3.5
    assert gate.states() == {"free": 0.5, "shared": 0.0, "draining": 0.0, "exclusive": 0.0, "paused": 3.0}
