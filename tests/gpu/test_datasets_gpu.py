"""GPU check of the generated implementations (issue 4): for one task per family, every implementation
is run on every configuration and compared with the reference (serial C or PyTorch).

Run: `python3 -m pytest -q -m gpu tests/gpu/test_datasets_gpu.py -rA` — each failing parameter prints
the implementation id, configuration, max error and message.
"""

from __future__ import annotations

from collections import Counter

import pytest

from cudaperf.datasets import registry
from cudaperf.datasets.gpucheck import check


def _cases() -> list[tuple]:
    seen: Counter = Counter()
    cases = []
    for task in registry.build_index(0):
        if seen[task.family]:
            continue
        seen[task.family] += 1
        for impl in registry.implementations(task):
            for config in ("small", "odd", "large"):
                cases.append(pytest.param(task, impl, config, id=f"{impl.impl_id}@{config}"))
    return cases


@pytest.mark.gpu
@pytest.mark.parametrize(("task", "impl", "config"), _cases())
def test_generated_implementation_matches_reference(task, impl, config):
    result = check(task, impl, config)
    assert result.correct, (result.impl_id, result.config, result.max_abs_error, result.message)
