"""datasets.measure.pool.GpuLock: the readers-writer flock that orders the GPU phases of children sharing a
GPU.

Each holder is its own GpuLock on the same path (its own open file description, as in separate children:
flocks conflict between descriptions even inside one process), driven from a thread so the tests stay
fast. Times are relative to the test's start, in seconds.
"""

from __future__ import annotations

import threading
import time

from cudaperf.datasets.measure.pool import GpuLock

HOLD_S = 0.3


def _hold(path, mode: str, delay_s: float, t0: float, spans: dict, name: str) -> threading.Thread:
    def run():
        time.sleep(delay_s)
        lock = GpuLock(path)
        with getattr(lock, mode)():
            start = time.perf_counter() - t0
            time.sleep(HOLD_S)
            spans[name] = (start, time.perf_counter() - t0, lock.wait_s[mode])

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _run(path, plan: list[tuple[str, str, float]]) -> dict:
    spans: dict = {}
    t0 = time.perf_counter()
    for thread in [_hold(path, mode, delay, t0, spans, name) for name, mode, delay in plan]:
        thread.join(timeout=10)
    return spans


def test_shared_holders_overlap(tmp_path):
    spans = _run(tmp_path / "gpu0.lock", [("a", "shared", 0.0), ("b", "shared", 0.05)])
    assert spans["b"][0] < spans["a"][1]


def test_an_exclusive_holder_waits_for_the_shared_one(tmp_path):
    spans = _run(tmp_path / "gpu0.lock", [("check", "shared", 0.0), ("timing", "exclusive", 0.05)])
    assert spans["timing"][0] >= spans["check"][1]


def test_a_shared_holder_waits_for_the_exclusive_one(tmp_path):
    spans = _run(tmp_path / "gpu0.lock", [("timing", "exclusive", 0.0), ("check", "shared", 0.05)])
    assert spans["check"][0] >= spans["timing"][1]


def test_a_waiting_exclusive_holder_is_not_overtaken_by_later_shared_ones(tmp_path):
    spans = _run(tmp_path / "gpu0.lock", [("first", "shared", 0.0), ("timing", "exclusive", 0.05),
                                          ("later", "shared", 0.1)])
    assert spans["first"][1] <= spans["timing"][0] and spans["later"][0] >= spans["timing"][1]


def test_the_wait_is_counted(tmp_path):
    spans = _run(tmp_path / "gpu0.lock", [("check", "shared", 0.0), ("timing", "exclusive", 0.05)])
    assert spans["timing"][2] >= HOLD_S - 0.05 - 0.02


def test_without_a_path_the_lock_never_waits():
    lock = GpuLock(None)
    with lock.exclusive(), lock.exclusive():
        pass
    assert lock.wait_s == {"shared": 0.0, "exclusive": 0.0}
