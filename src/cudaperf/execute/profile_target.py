"""The process Nsight Compute profiles for the evaluator's dynamic stage: one candidate, one configuration.

    ncu ... python -m cudaperf.execute.profile_target JOB.json

JOB.json holds a `jobs.ProfileJob` (`to_dict`). Before candidate code runs, the evaluator worker's audit
hook is installed, with the candidate scope around import, construction and forward. The network
namespace is not this process's own: `analysis.dynamic` starts ncu and this process together in one
(`execute.netns_exec`), because ncu talks to its target over local sockets. Only the candidate's calls sit
inside the profiler range, so ncu sees only its kernels.

Not covered: correctness (the evaluator has already judged the candidate); timing (ncu's replay is not a
timing method here).
"""

from __future__ import annotations

import json
import sys


def main(job_path: str) -> int:
    import torch

    from cudaperf.execute import guards
    from cudaperf.execute.child import preload
    from cudaperf.execute.sandbox import DEFAULT_PRELOAD
    from cudaperf.execute.session import preload_lazy_modules
    from cudaperf.jobs import ProfileJob
    from cudaperf.tasks.runtime import load_module, make_init_inputs, make_inputs
    from cudaperf.tasks.task_module import exec_task_source
    from cudaperf.types import from_dict

    with open(job_path) as fh:
        job = from_dict(ProfileJob, json.load(fh))
    task, solution = job.task, job.solution
    config = next(c for c in task.configs if c.name == job.config)
    # No network namespace of its own: ncu reaches this process over local sockets, so the launcher put
    # ncu and this process into one private namespace already (execute.netns_exec).
    # What a sandbox worker loads before its hook: lazy torch imports reach modules a scope refuses (such
    # as multiprocessing), so without it the candidate's first call fails inside the scope.
    preload(DEFAULT_PRELOAD)
    preload_lazy_modules()
    guards.install_audit_hook(temp_root=job.temp_dir)
    problem = load_module(task)
    inputs = make_inputs(problem, config, 1, "cuda")
    init = make_init_inputs(problem, config)
    with guards.candidate_scope():
        module = exec_task_source(solution.source, module_name="cudaperf_profiled_candidate",
                                  filename=solution.path or "<solution>", keep=True)
        model = module.ModelNew(*init).to("cuda")
    with torch.no_grad():
        with guards.candidate_scope():
            model(*inputs)  # warm-up outside the profiled range
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        for _ in range(job.calls):
            with guards.candidate_scope():
                model(*inputs)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
