"""tests/gpu/conftest.py's grouping: tests that share a module-scoped fixture instance, directly or through
another test, land in one xdist group; tests with none get no group."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_PATH = Path(__file__).resolve().parents[1] / "gpu" / "conftest.py"
_SPEC = importlib.util.spec_from_file_location("gpu_conftest_under_test", _PATH)
gpu_conftest = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(gpu_conftest)


def test_tests_sharing_an_instance_through_a_third_are_one_group():
    groups = gpu_conftest.shared_instance_groups({"t1": ["a", "b"], "t2": ["b"], "t3": ["a"]})
    assert groups["t1"] == groups["t2"] == groups["t3"]


def test_tests_with_disjoint_instances_are_separate_groups():
    groups = gpu_conftest.shared_instance_groups({"t1": ["pool"], "t2": ["verdicts"]})
    assert groups["t1"] != groups["t2"]


def test_each_parameter_of_a_module_fixture_is_its_own_group():
    groups = gpu_conftest.shared_instance_groups({"t1": ["probe=copied"], "t2": ["probe=sliced"]})
    assert groups["t1"] != groups["t2"]


def test_a_test_without_module_fixtures_has_no_group():
    assert "t2" not in gpu_conftest.shared_instance_groups({"t1": ["a"], "t2": []})
