"""GPU check of the fresh C→CUDA families (compaction, escape_time, polynomial) before their measurement:
for two structurally different tasks per family, every implementation on every configuration (small,
odd, large) against the serial C reference within the task's tolerance, `out` arrays poisoned first; then
called twice more on re-poisoned outputs and compared again (the measurement calls each implementation
many times on the same buffers: the compaction's tile tickets and look-back words and the escape-time's
tile counter must be reset by every call). Each passing case prints its median time of the checked calls.

Run: `python3 -m pytest -q -m gpu tests/gpu/test_fresh_c_families_gpu.py -rA` — a failure names the
implementation, configuration, call and the comparison's message.
"""

from __future__ import annotations

import functools
import statistics

import numpy as np
import pytest

from cudaperf.datasets import registry
from cudaperf.datasets.measure.gpucheck import load_generated

# (family, variant fields that must match): two tasks per family, chosen for different kernel structures
PICKS = (
    ("compaction", {"dtype": "float", "output": "pairs", "share": 0.02}),
    ("compaction", {"dtype": "int", "output": "indices", "share": 0.9}),
    ("escape_time", {"kind": "mandelbrot", "scene": 2, "max_iter": 1024}),
    ("escape_time", {"kind": "julia", "scene": 0, "max_iter": 256}),
    ("polynomial", {"kind": "rational", "degree": 64, "dtype": "float"}),
    ("polynomial", {"kind": "clenshaw", "degree": 3, "dtype": "double"}),
)
CALLS = 3


def _picked() -> list:
    tasks = registry.build_index(0, families=sorted({f for f, _ in PICKS}))
    return [next(t for t in tasks if t.family == fam and all(t.variant[k] == v for k, v in want.items()))
            for fam, want in PICKS]


def _cases() -> list:
    return [pytest.param(task, impl, config, id=f"{impl.impl_id}@{config}")
            for task in _picked() for impl in registry.implementations(task)
            for config in ("small", "odd", "large")]


@functools.lru_cache(maxsize=8)
def _reference(task_text: str, config: str) -> tuple:
    """(task, configuration, inputs, reference outputs), once per (task, configuration): the serial C of a
    large configuration takes up to a second and serves all five implementations."""
    from cudaperf.tasks import cref
    from cudaperf.tasks.ctask import from_json, make_inputs

    ctask = from_json(task_text)
    cfg = ctask.config(config)
    values = make_inputs(ctask, cfg, 0)
    ref = cref.run_reference(ctask, cfg, 0, values=cref.copy_values(values))
    assert ref.ok, ref.message
    return ctask, cfg, values, ref.outputs



@pytest.mark.gpu
@pytest.mark.parametrize(("task", "impl", "config"), _cases())
def test_fresh_implementation_matches_reference_on_repeated_calls(task, impl, config):
    import torch

    from cudaperf.correctness import compare

    ctask, cfg, values, want = _reference(task.text, config)
    dev = {p.name: torch.from_numpy(values[p.name]).cuda() if p.is_array else values[p.name]
           for p in ctask.params}
    fn = getattr(load_generated(impl.source, impl.impl_id.replace("/", "_")), ctask.entry)
    tol = ctask.tolerance_for(cfg)
    times_ms = []
    for call in range(CALLS):
        for p in ctask.outputs:  # a sentinel, not zeros: an element never written fails
            dev[p.name].fill_(float("nan") if dev[p.name].is_floating_point() else 0xAB)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(**dev)
        end.record()
        torch.cuda.synchronize()
        times_ms.append(start.elapsed_time(end))
        for p in ctask.outputs:
            verdict = compare(dev[p.name].cpu(), torch.from_numpy(np.asarray(want[p.name])), tol,
                              path=p.name)
            assert verdict.ok, (impl.impl_id, config, f"call {call}", verdict.message)
    print(f"{impl.impl_id}@{config}: {statistics.median(times_ms):.3f} ms (median of {CALLS} calls)")
