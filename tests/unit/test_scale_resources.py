"""The pool's view of free GPUs around placement groups, on a real local Ray instance with one logical GPU
(Ray's resources are labels: no GPU is needed to hold or release one). What it guards: a pool opened right
after another one closed on the same Ray instance must see the GPU the closed one gave back (on an H100 a
second pool saw 0 GPUs free and refused to start: Ray removes a placement group asynchronously).
"""

from __future__ import annotations

import time

import pytest

ray = pytest.importorskip("ray")

from cudaperf.scale.pool import _await_removal, _free_gpus  # noqa: E402


@pytest.fixture(scope="module")
def one_gpu():
    ray.init(address="local", num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _hold_the_gpu():
    from ray.util.placement_group import placement_group

    pg = placement_group([{"CPU": 1, "GPU": 1}])
    ray.get(pg.ready(), timeout=60)
    return pg


def test_a_removed_group_is_reported_removed(one_gpu):
    pg = _hold_the_gpu()
    ray.util.remove_placement_group(pg)
    _await_removal(ray, pg, 30.0)
    assert ray.util.placement_group_table(pg)["state"] == "REMOVED"


def test_the_gpu_of_a_group_just_removed_is_seen_free(one_gpu):
    pg = _hold_the_gpu()
    ray.util.remove_placement_group(pg)  # no wait for the removal: the pool's open must wait instead
    assert _free_gpus(ray, 1.0, 30.0) == 1.0


def test_a_gpu_held_throughout_is_reported_taken_after_the_wait(one_gpu):
    pg = _hold_the_gpu()
    try:
        assert _free_gpus(ray, 1.0, 0.5) == 0.0
    finally:
        ray.util.remove_placement_group(pg)
        _await_removal(ray, pg, 30.0)


def test_wanting_more_gpus_than_the_cluster_has_settles_for_all_of_them_at_once(one_gpu):
    started = time.monotonic()
    free = _free_gpus(ray, 4.0, 30.0)
    assert free == 1.0 and time.monotonic() - started < 10.0
