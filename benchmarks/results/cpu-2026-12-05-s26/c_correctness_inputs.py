"""What drawing a correctness seed's inputs again for timing cost per job (two seeds, every configuration),
for the three C tasks of the evaluation-mode benchmark's GPU run."""
import sys, time
sys.path.insert(0, "benchmarks")
from eval_modes import dataset_tasks
from cudaperf.tasks.ctask import from_task, make_inputs
for g, task in dataset_tasks(0, 3):
    ctask = from_task(task)
    t = time.perf_counter()
    for config in ctask.configs:
        for seed in (11, 12):
            make_inputs(ctask, config, seed)
    print(f"{g.task_id}: {time.perf_counter() - t:.2f} s for two seeds' inputs, every configuration", flush=True)
