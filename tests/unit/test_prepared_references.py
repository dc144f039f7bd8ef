"""`c_session.CSession.prepare_references` and `prepare_threads`: a refereed C worker's host work before it
asks to time (the serial C references of its timing-only and unseen input sets) runs on several threads,
gives the references one at a time would, and keeps what it computed when one fails, so the job's scrub
zeroes it. The session is bare (`CSession.__new__` with the two fields the method reads); the real
worker's run of it is in test_timing_go_ahead.py."""

from __future__ import annotations

import os
import threading
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("torch")

from test_c_session import SQUARE

from cudaperf.execute import c_session


@pytest.fixture
def session(tmp_path):
    bare = c_session.CSession.__new__(c_session.CSession)
    bare.ctask, bare.job, bare.prepared_references = SQUARE, SimpleNamespace(cache_dir=str(tmp_path)), {}
    return bare


@pytest.fixture
def four_cpus(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})


KEYS = [(config.name, seed) for config in SQUARE.configs for seed in (7, 8)]


def test_threads_are_at_most_the_cap_the_references_and_the_cpus(four_cpus, monkeypatch):
    assert c_session.prepare_threads(100) == min(c_session.PREPARE_THREADS_MAX, 4)
    assert c_session.prepare_threads(2) == 2
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert c_session.prepare_threads(100) == 1


def test_no_reference_still_gets_one_thread():
    assert c_session.prepare_threads(0) == 1


def test_references_are_computed_on_two_threads_at_once(session, monkeypatch):
    both = threading.Barrier(2, timeout=30)  # broken (raised) unless two computations overlap
    real = c_session.compute_reference

    def meeting(*args):
        both.wait()
        return real(*args)

    monkeypatch.setattr(c_session, "compute_reference", meeting)
    session.prepare_references(KEYS[:2], threads=2)
    assert set(session.prepared_references) == set(KEYS[:2])


def test_threaded_references_equal_those_computed_one_at_a_time(session):
    session.prepare_references(KEYS, threads=4)
    for name, seed in KEYS:
        alone = c_session.compute_reference(SQUARE, SQUARE.config(name), seed, session.job.cache_dir)
        got = session.prepared_references[(name, seed)]
        assert np.array_equal(got.outputs["out"], alone.outputs["out"]) and np.array_equal(
            got.values["x"], alone.values["x"])


def test_a_failure_is_raised_with_the_other_references_kept_for_the_scrub(session, monkeypatch):
    real = c_session.compute_reference

    def one_fails(ctask, config, seed, cache_dir):
        if (config.name, seed) == KEYS[1]:
            raise RuntimeError("the serial C reference failed")
        return real(ctask, config, seed, cache_dir)

    monkeypatch.setattr(c_session, "compute_reference", one_fails)
    with pytest.raises(RuntimeError, match="reference failed"):
        session.prepare_references(KEYS, threads=4)
    assert set(session.prepared_references) == set(KEYS) - {KEYS[1]}


@pytest.mark.parametrize(("physical_gib", "budget_gib"), [(0, 2), (24, 2), (128, 4), (1024, 8)])
def test_the_host_budget_before_the_turn_is_a_share_of_the_machine_within_bounds(physical_gib, budget_gib):
    assert c_session.prepared_host_bytes(physical_gib << 30) == budget_gib << 30


def test_a_gemv_configurations_timing_sets_fit_the_budget_of_a_gpu_host():
    sets = 6 * 8192 * 8192 * 8  # RL's 2 timing-only and 4 unseen sets of an 8192 x 8192 double matrix
    assert sets > c_session.PREPARED_HOST_MIN_BYTES and sets < c_session.prepared_host_bytes(128 << 30)


def test_an_unseen_set_is_held_without_a_copy_of_its_arrays():
    array = np.arange(1024, dtype=np.float64)
    array.setflags(write=False)
    view = c_session.host_view(array)
    assert view.data_ptr() == array.ctypes.data and view[3].item() == 3.0


def test_a_set_past_the_budget_is_left_to_the_stage_and_a_later_smaller_one_is_still_prepared(monkeypatch):
    from cudaperf.execute.memory_plan import Footprint

    bare = c_session.CSession.__new__(c_session.CSession)
    sizes = {"small": 10, "large": 600, "odd": 100}
    bare.timed_names, bare.seeds, bare.timing_seeds, bare.unseen_seeds = list(sizes), (1,), (1, 2), (3, 4)
    bare.ctask = SimpleNamespace(config=lambda name: SimpleNamespace(name=name))
    monkeypatch.setattr(bare, "set_footprint", lambda config: Footprint(sizes[config.name], 0), raising=False)
    monkeypatch.setattr(bare, "unseen_count", lambda config: 2, raising=False)
    monkeypatch.setattr(c_session, "PREPARED_HOST_BYTES", 1000)
    keys = bare.prepared_keys()  # three sets each: 30 + 600 fit, then the second large one would pass 1000
    assert [k for k in keys if k[0] == "large"] == [("large", 2)]
    assert [k for k in keys if k[0] == "odd"] == [("odd", 2), ("odd", 3), ("odd", 4)]
