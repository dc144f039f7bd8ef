"""The degenerate-task filter, on the CPU: run the reference (PyTorch on the CPU, or the serial C) on
the small configuration with two seeds and flag outputs that a kernel could fake (docs/evaluation.md,
"Degenerate problems"): a constant output, an output that does not change with the inputs, tiny
magnitudes that zeros would match within tolerance, non-finite values, a reference that fails.

These checks are our own and run on numpy arrays (both task kinds); the GPU harness's
`correctness.degenerate_flags` guards the same properties at evaluation time.

Not covered: the large configurations (too slow for the CPU filter), stochastic references (two runs
of a stochastic reference on the same seed would be needed; none of our generators makes one).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cudaperf.datasets.records import GeneratedTask
from cudaperf.types import TaskKind

SEEDS = (0, 1)
TINY_FACTOR = 10.0  # magnitudes under 10 x atol: an all-zero answer would pass the comparison


@dataclass(frozen=True)
class DegenerateReport:
    task_id: str
    # constant_output | input_independent | tiny_magnitude | non_finite | reference_error
    flags: tuple[str, ...]
    message: str = ""

    @property
    def ok(self) -> bool:
        return not self.flags


def check_outputs(runs: list[list[np.ndarray]], atol: float) -> tuple[str, ...]:
    """Flags for the outputs of one task under two seeds (`runs[seed][output]`)."""
    flags = []
    first = runs[0]
    if any(not np.all(np.isfinite(o)) for run in runs for o in run):
        return ("non_finite",)
    if all(o.size > 1 and np.ptp(o) == 0 for o in first):
        flags.append("constant_output")
    if all(np.array_equal(a, b) for a, b in zip(runs[0], runs[1], strict=True)):
        flags.append("input_independent")
    if atol > 0 and max(float(np.max(np.abs(o))) if o.size else 0.0 for o in first) < TINY_FACTOR * atol:
        flags.append("tiny_magnitude")
    return tuple(flags)


def check_task(task: GeneratedTask, cache_dir: str | None = None) -> DegenerateReport:
    try:
        runs, atol = (_c_runs(task, cache_dir) if task.kind is TaskKind.C else _torch_runs(task))
    except Exception as exc:  # noqa: BLE001 - a failing reference is a finding about the task, not a crash
        return DegenerateReport(task.task_id, ("reference_error",), f"{type(exc).__name__}: {exc}"[:500])
    return DegenerateReport(task.task_id, check_outputs(runs, atol))


def _c_runs(task: GeneratedTask, cache_dir: str | None) -> tuple[list[list[np.ndarray]], float]:
    from cudaperf.tasks import cref
    from cudaperf.tasks.ctask import from_json

    ctask = from_json(task.text)
    config = ctask.configs[0]
    runs = []
    for seed in SEEDS:
        run = cref.run_reference(ctask, config, seed, cache_dir=cache_dir)
        if not run.ok:
            raise RuntimeError(run.message)
        runs.append([np.asarray(v, dtype=np.float64) for v in run.outputs.values()])
    return runs, ctask.tolerance_for(config).atol


def _torch_runs(task: GeneratedTask) -> tuple[list[list[np.ndarray]], float]:
    import torch

    from cudaperf.tasks import runtime, task_from_source

    record = task_from_source(task.text, task.task_id)
    module = runtime.load_module(record)
    config = record.configs[0]
    torch.manual_seed(0)  # the same weights for both input seeds: only the inputs change
    model = module.Model(*runtime.make_init_inputs(module, config)).eval()
    runs = []
    for seed in SEEDS:
        with torch.no_grad():
            out = model(*runtime.make_inputs(module, config, seed, "cpu"))
        outs = out if isinstance(out, (list, tuple)) else [out]
        runs.append([o.detach().double().numpy() for o in outs])
    tol = record.tolerances.get("float32")
    return runs, tol.atol if tol else 1e-4
