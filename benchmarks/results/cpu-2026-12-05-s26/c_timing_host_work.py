"""Host work a refereed C job's timing stage does before it asks for the GPU (per job, every timed config):
inputs of 2 correctness seeds, serial C references of 1 timing-only and 5 unseen seeds."""
import sys, time, tempfile
sys.path.insert(0, "benchmarks")
from eval_modes import dataset_tasks
from cudaperf.tasks.ctask import from_task, make_inputs
from cudaperf.execute.c_session import compute_reference
cache = tempfile.mkdtemp()
for g, task in dataset_tasks(0, 3):
    ctask = from_task(task)
    total = 0.0
    for config in ctask.configs:
        compute_reference(ctask, config, 1, cache)  # builds the reference library once
        t = time.perf_counter()
        for seed in (11, 12):
            make_inputs(ctask, config, seed)
        for seed in range(500, 506):
            compute_reference(ctask, config, seed, cache)
        dt = time.perf_counter() - t
        total += dt
        print(f"{g.task_id} {config.name}: {dt:.2f} s", flush=True)
    print(f"{g.task_id} all configs: {total:.2f} s", flush=True)
