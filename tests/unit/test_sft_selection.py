"""Which implementations of a dataset task SFT trains on (`train.sft_data.task_impls`): verified by the
GPU measurements, and with `SftConfig.fastest_per_task` only the fastest by measured time. The task and its
implementations are the real dataset's; the measurement rows are written in `dataset measure`'s format."""

from __future__ import annotations

import json
import math

import pytest

from cudaperf.datasets import registry
from cudaperf.datasets.measure.results import impl_hash
from cudaperf.train.config import ConfigError, SftConfig
from cudaperf.train.sft_data import task_impls, verified_impls


@pytest.fixture(scope="module")
def task():
    return next(g for g in registry.build_index(0) if g.family == "elementwise")


def write_rows(directory, rows):
    with open(directory / "measurements-test.jsonl", "w") as f:
        for impl, config, status, median_ms, source_hash in rows:
            f.write(json.dumps({"record": "row", "impl_id": impl.impl_id, "config": config, "status": status,
                                "median_ms": median_ms, "source_hash": source_hash or impl_hash(impl.source)})
                    + "\n")
    return str(directory)


def measured(task, tmp_path, times_ms):
    """Every implementation of the task correct on two configurations, with the given times (ms)."""
    impls = registry.implementations(task)
    sizes = (("small", 1), ("large", 4))
    rows = [(impl, config, "ok", t * scale, None)
            for impl, t in zip(impls, times_ms, strict=True) for config, scale in sizes]
    return impls, verified_impls(write_rows(tmp_path, rows))


def config(tmp_path, **changes):
    return SftConfig(model="tiny", output_dir=str(tmp_path / "run"), measurements=str(tmp_path), **changes)


def test_the_fastest_implementations_are_kept_in_order_of_measured_time(task, tmp_path):
    impls, verified = measured(task, tmp_path, [4.0, 1.0, 3.0, 2.0])
    kept = task_impls(task, config(tmp_path, fastest_per_task=2), verified)
    assert [i.impl_id for i in kept] == [impls[1].impl_id, impls[3].impl_id]


def test_without_fastest_per_task_every_verified_implementation_is_kept(task, tmp_path):
    impls, verified = measured(task, tmp_path, [4.0, 1.0, 3.0, 2.0])
    assert task_impls(task, config(tmp_path), verified) == impls


def test_the_measured_time_is_the_geometric_mean_over_configurations(task, tmp_path):
    impls, verified = measured(task, tmp_path, [4.0, 1.0, 3.0, 2.0])
    assert verified[impls[0].impl_id].geomean_ms == pytest.approx(math.sqrt(4.0 * 16.0))


def test_an_implementation_failing_one_configuration_is_not_verified(task, tmp_path):
    impl = registry.implementations(task)[0]
    verified = verified_impls(write_rows(tmp_path, [(impl, "small", "ok", 1.0, None),
                                                    (impl, "large", "incorrect", 1.0, None)]))
    assert impl.impl_id not in verified


def test_an_implementation_measured_with_another_source_is_not_kept(task, tmp_path):
    impl = registry.implementations(task)[0]
    verified = verified_impls(write_rows(tmp_path, [(impl, "small", "ok", 1.0, "0123456789ab")]))
    assert task_impls(task, config(tmp_path), verified) == []


def test_fastest_per_task_without_measurements_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="fastest_per_task"):
        SftConfig(model="tiny", output_dir=str(tmp_path), fastest_per_task=1)
