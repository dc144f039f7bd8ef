"""Host-side timing on a CPU of its own (`cudaperf.host_timing`): which CPUs are reserved, the machine-wide
lock, the pinning, and the legacy switch."""

from __future__ import annotations

import fcntl
import os
import stat

import pytest

from cudaperf import host_timing
from cudaperf.host_timing import (
    LEGACY,
    PROTOCOL_ENV,
    baseline_protocol,
    ensure_lock_file,
    isolated_host_timing,
    lock_path,
    pinned,
    timing_cpus,
)

EIGHT = frozenset(range(8))


@pytest.fixture(autouse=True)
def _stable(monkeypatch, tmp_path):
    monkeypatch.delenv(PROTOCOL_ENV, raising=False)
    monkeypatch.setenv("CUDAPERF_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(host_timing, "_siblings", lambda cpu: frozenset({cpu}))  # no SMT in these tests


def test_the_highest_allowed_cpu_is_reserved():
    assert timing_cpus(EIGHT) == {7}


def test_its_smt_siblings_are_reserved_with_it(monkeypatch):
    monkeypatch.setattr(host_timing, "_siblings", lambda cpu: frozenset({cpu, cpu - 4}))
    assert timing_cpus(EIGHT) == {3, 7}


def test_nothing_is_reserved_on_a_small_machine():
    assert timing_cpus(frozenset({0, 1})) == frozenset()


def test_nothing_is_reserved_under_the_legacy_protocol(monkeypatch):
    monkeypatch.setenv(PROTOCOL_ENV, "legacy")
    assert baseline_protocol() == LEGACY and timing_cpus(EIGHT) == frozenset()


def test_the_timing_lock_is_held_for_the_block():
    with isolated_host_timing() as slot:
        other = os.open(lock_path(), os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(other)
    assert slot.locked


def test_the_timing_lock_is_released_after_the_block():
    with isolated_host_timing():
        pass
    other = os.open(lock_path(), os.O_RDONLY)
    try:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(other)


def test_the_legacy_protocol_takes_no_lock(monkeypatch):
    monkeypatch.setenv(PROTOCOL_ENV, "legacy")
    with isolated_host_timing() as slot:
        assert not slot.locked and slot.cpus == ()


def test_a_pinned_block_runs_on_its_cpus_and_restores_the_set():
    before = os.sched_getaffinity(0)
    target = frozenset({max(before)})
    with pinned(target) as cpus:
        assert os.sched_getaffinity(0) == target == cpus
    assert os.sched_getaffinity(0) == before


def test_the_lock_file_is_readable_by_sandboxed_workers(tmp_path):
    path = ensure_lock_file(tmp_path)
    assert path.exists() and stat.S_IMODE(path.stat().st_mode) & 0o044 == 0o044
