"""GPU check of the generated implementations (issue 4): for one task per family, every implementation
is run on every configuration and compared with the reference (serial C or PyTorch); and the C matmul's
tensor-core implementation for each of its structures.

Run: `python3 -m pytest -q -m gpu tests/gpu/test_datasets_gpu.py -rA` — each failing parameter prints
the implementation id, configuration, max error and message.
"""

from __future__ import annotations

from collections import Counter

import pytest

from cudaperf.datasets import registry
from cudaperf.datasets.measure.gpucheck import check


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


def _tensor_core_cases() -> list:
    """The C matmul's tensor-core implementation for every element type x layout x batching x in-place
    structure (the first task of the family covers one of them)."""
    seen, cases = set(), []
    for task in registry.build_index(0, families=["matmul"]):
        v = task.variant
        key = (v["dtype"], v["layout"], v["batched"], v["epi"] == "axpby")
        if key in seen:
            continue
        seen.add(key)
        impl = next(i for i in registry.implementations(task) if i.strategy == "tensor_core")
        cases += [pytest.param(task, impl, config, id=f"{impl.impl_id}-{'-'.join(map(str, key))}@{config}")
                  for config in ("small", "odd", "large")]
    return cases


@pytest.mark.gpu
@pytest.mark.parametrize(("task", "impl", "config"), _cases() + _tensor_core_cases())
def test_generated_implementation_matches_reference(task, impl, config):
    result = check(task, impl, config)
    assert result.correct, (result.impl_id, result.config, result.max_abs_error, result.message)
