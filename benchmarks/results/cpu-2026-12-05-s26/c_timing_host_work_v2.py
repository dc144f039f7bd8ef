"""A refereed C job's timing host work, per job (every timed configuration), as the code before this session
did it inside the GPU turn (the timing-only seed's inputs drawn, then its serial C reference, then five
unseen seeds' references) and as `CSession.prepare_timing` now does it before the turn (the six references;
the timing-only seed's inputs are its reference's). The correctness seeds' inputs are on the device from the
correctness stage in both. The three C tasks of the evaluation-mode benchmark's GPU run."""
import sys, time, tempfile
sys.path.insert(0, "benchmarks")
from eval_modes import dataset_tasks
from cudaperf.tasks.ctask import from_task, make_inputs
from cudaperf.execute.c_session import compute_reference
cache = tempfile.mkdtemp()
for g, task in dataset_tasks(0, 3):
    ctask = from_task(task)
    before = now = 0.0
    for config in ctask.configs:
        compute_reference(ctask, config, 1, cache)  # builds the reference library once
        t = time.perf_counter()
        make_inputs(ctask, config, 13)
        draw = time.perf_counter() - t
        t = time.perf_counter()
        for seed in range(500, 506):
            compute_reference(ctask, config, seed, cache)
        refs = time.perf_counter() - t
        before, now = before + draw + refs, now + refs
    print(f"{g.task_id}: before (in the turn) {before:.2f} s, now (before the turn) {now:.2f} s", flush=True)
