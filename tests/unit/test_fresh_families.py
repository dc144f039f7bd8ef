"""Fresh families (held out of the dataset) never change the dataset's tasks or splits, and are indexed
only when asked for."""

from __future__ import annotations

import dataclasses

import pytest

from cudaperf.datasets import registry, splits


@pytest.fixture
def with_fresh(monkeypatch):
    """A stand-in fresh family made from a dataset family under a new name (its tasks are real tasks)."""
    base = registry.family("elementwise")
    fresh = dataclasses.replace(base, name="fresh_elementwise_copy", group="")
    monkeypatch.setattr(registry, "FRESH_TORCH_FAMILIES", (fresh,))
    monkeypatch.setattr(registry, "FRESH_C_FAMILIES", ())
    return fresh


def test_the_default_index_holds_no_fresh_task(with_fresh):
    assert not any(t.family == with_fresh.name for t in registry.build_index(0))


def test_naming_a_fresh_family_indexes_only_it(with_fresh):
    tasks = registry.build_index(0, families=[with_fresh.name])
    assert tasks and {t.family for t in tasks} == {with_fresh.name}


def test_fresh_true_adds_the_fresh_families_beside_the_dataset(with_fresh):
    dataset = registry.build_index(0)
    both = registry.build_index(0, fresh=True)
    assert [t.task_id for t in both[:len(dataset)]] == [t.task_id for t in dataset]
    assert {t.family for t in both[len(dataset):]} == {with_fresh.name}


def test_fresh_tasks_leave_the_dataset_splits_as_they_were(with_fresh):
    dataset = registry.build_index(0)
    before = splits.split_tasks(dataset, 0)
    after = splits.split_tasks(registry.build_index(0, fresh=True), 0)
    assert {k: after[k] for k in before} == before


def test_fresh_tasks_get_the_fresh_split(with_fresh):
    assigned = splits.split_tasks(registry.build_index(0, families=[with_fresh.name]), 0)
    assert set(assigned.values()) == {splits.FRESH_SPLIT}
