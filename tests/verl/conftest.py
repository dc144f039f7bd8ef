"""verl tests: they run in verl's own environment (scripts/test_verl.sh); elsewhere they are skipped."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/verl/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.verl)
