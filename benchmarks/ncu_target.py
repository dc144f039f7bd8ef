"""Run one solution's forward on one configuration inside a profiler range, for Nsight Compute.

    ncu --profile-from-start off ... python ncu_target.py TASK.py SOLUTION.py CONFIG

`load_model` is also used by repeatability.py for its in-process CUPTI kernel times.
"""

from __future__ import annotations

import importlib.util
import sys


def _load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load_model(task_path: str, solution_path: str, config: str):
    """(the solution's ModelNew on the GPU, the configuration's inputs for seed 1)."""
    from cudaperf.tasks import load_task
    from cudaperf.tasks.runtime import load_module, make_init_inputs, make_inputs

    task = load_task(task_path)
    cfg = next(c for c in task.configs if c.name == config)
    problem = load_module(task)
    sol = _load(solution_path, "ncu_solution")
    return sol.ModelNew(*make_init_inputs(problem, cfg)).cuda(), make_inputs(problem, cfg, 1, "cuda")


def main(task_path: str, solution_path: str, config: str, calls: int = 20) -> None:
    import torch

    model, inputs = load_model(task_path, solution_path, config)
    with torch.no_grad():
        for _ in range(3):
            model(*inputs)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        for _ in range(calls):
            model(*inputs)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()


if __name__ == "__main__":
    main(*sys.argv[1:4])
