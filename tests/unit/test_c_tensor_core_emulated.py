"""The C matmul family's tensor-core implementation (WMMA TF32 tiles with the 3xTF32 split for float, DMMA
tiles for double) run on the CPU through the `cpu_cuda` emulator and compared with the serial C reference
within the task's tolerance: one task per element type x layout x batching x epilogue kind (in/out or
in-place `c`), on the small configuration and on a tail size that crosses every 64-wide tile and 16-deep
slice with a partial one.

Marked slow: each kernel is compiled by g++ and its 256 threads per block run as fibers.
"""

from __future__ import annotations

import dataclasses
import types

import numpy as np
import pytest

from cudaperf.correctness import compare
from cudaperf.datasets import registry
from cudaperf.tasks import cref
from cudaperf.tasks.ctask import CConfig, from_json, make_inputs

torch = pytest.importorskip("torch")

TAIL = {"m": 70, "n": 67, "kk": 77}


def _picked() -> list:
    seen, out = set(), []
    for task in registry.build_index(0, families=["matmul"]):
        v = task.variant
        key = (v["dtype"], v["layout"], v["batched"], v["epi"] == "axpby")
        if key not in seen:
            seen.add(key)
            out.append(task)
    return out


def _run(task, config: CConfig) -> tuple[bool, str]:
    from cpu_cuda import CpuCuda

    ctask = from_json(task.text)
    impl = next(i for i in registry.implementations(task) if i.strategy == "tensor_core")
    values = make_inputs(ctask, config, seed=0)
    want = cref.run_reference(ctask, config, 0, values={k: np.copy(v) if hasattr(v, "copy") else v
                                                        for k, v in values.items()})
    module = types.ModuleType("tc_" + task.task_id)
    exec(compile(impl.source, impl.impl_id, "exec"), module.__dict__)  # noqa: S102 - our own generated code
    module.cuda = CpuCuda()
    kwargs = {k: torch.from_numpy(np.copy(v)) if isinstance(v, np.ndarray) else v for k, v in values.items()}
    for p in ctask.outputs:
        if p.kind.value == "out":
            kwargs[p.name].fill_(float("nan"))  # an element never written fails
    getattr(module, ctask.entry)(**kwargs)
    tol = ctask.tolerance_for(config)
    for name, ref in want.outputs.items():
        verdict = compare(kwargs[name], torch.from_numpy(ref), tol, path=name)
        if not verdict.ok:
            return False, verdict.message
    return True, ""


@pytest.mark.slow
@pytest.mark.parametrize("task", _picked(), ids=lambda t: "-".join(str(x) for x in t.variant.values()))
def test_tensor_core_matmul_matches_the_serial_reference(task):
    ctask = from_json(task.text)
    small = ctask.config("small")
    tail = dataclasses.replace(small, name="tail", scalars={**small.scalars, **TAIL})
    for config in (small, tail):
        ok, message = _run(task, config)
        assert ok, (task.task_id, config.name, message)
