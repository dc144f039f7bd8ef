"""The pool's share of CPU threads (`execute.cpu_share`, `Limits.cpu_threads`): the CPUs split evenly, at
least one each; a real worker's environment carries it; a user's OMP_NUM_THREADS is kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from cudaperf.execute import Limits, StageTimeouts, WorkerPool
from cudaperf.execute.cpu_share import cpu_threads_per_process, thread_settings

HANDLERS = str(Path(__file__).with_name("sandbox_handlers.py"))


@pytest.mark.parametrize(("processes", "cpus", "threads"), [(2, 2, 1), (4, 2, 1), (8, 16, 2), (2, 16, 8),
                                                             (0, 4, 4)])
def test_the_cpus_are_shared_out_evenly_with_at_least_one_each(processes, cpus, threads):
    assert cpu_threads_per_process(processes, cpus) == threads


def test_a_users_omp_num_threads_is_kept(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert thread_settings(1) == {}


def test_no_share_sets_nothing(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert thread_settings(None) == {}


def test_a_pools_worker_gets_its_share_in_its_environment(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    with WorkerPool(None, Limits(boundary=False, cpu_threads=1), timeouts=StageTimeouts(start_s=60.0),
                    preload=()) as pool:
        reply = pool.run({"handler": f"{HANDLERS}:report_environment"})
    environ = reply.payload["environ"]
    assert (environ["OMP_NUM_THREADS"], environ["MKL_NUM_THREADS"]) == ("1", "1")


def test_a_referee_gets_the_same_share(monkeypatch):
    from cudaperf.execute.referee import RefereeLink

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    link = RefereeLink(None, 4096)
    link.cpu_threads = 2
    assert link._environment()["OMP_NUM_THREADS"] == "2"
