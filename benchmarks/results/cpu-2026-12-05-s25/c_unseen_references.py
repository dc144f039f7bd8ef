import sys, time, statistics, tempfile
sys.path.insert(0, "benchmarks")
from eval_modes import dataset_tasks
from cudaperf.tasks.ctask import from_task
from cudaperf.execute.c_session import compute_reference
cache = tempfile.mkdtemp()
for g, task in dataset_tasks(0, 3):
    ctask = from_task(task)
    for config in ctask.configs:
        compute_reference(ctask, config, 1, cache)
        t = time.perf_counter()
        for seed in range(500, 505):
            compute_reference(ctask, config, seed, cache)
        print(f"{g.task_id} {config.name}: {(time.perf_counter() - t):.2f} s for 5 unseen references")
