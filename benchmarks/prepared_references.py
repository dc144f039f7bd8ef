"""A refereed C worker's host work before it asks to time (`c_session.CSession.prepare_references`: the
serial C references of a job's timing-only and unseen input sets), on one thread and on
`prepare_threads` threads, side by side in one run, on the tasks whose `timing_prep` stage was longest in
session 38's RL run on the H100 (`results/2026-12-06-s38-h100/C/train/rl_evaluations.jsonl.gz`).

Per task, every timed configuration gets the job's references: one timing-only seed and the RL mode's 5
unseen seeds (`TimingConfig.unseen_sets`), each round with fresh seeds, as every job draws its own. Rounds
alternate one thread and many; printed is a Markdown table of the median seconds per job of each, their
ratio, and the threads. No GPU is needed (the references are numpy draws and host C calls).

    python benchmarks/prepared_references.py --rounds 5 [--tasks c_map_02cc6c49a8c1 ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from types import SimpleNamespace

from cudaperf.execute import c_session

TASKS = ("c_map_02cc6c49a8c1", "c_stencil1d_006cf37e3d5f", "c_map_0109b11c716e")
SETS_PER_CONFIG = 6  # one timing-only seed and 5 unseen ones (jobs.TimingConfig: input_sets=3, seeds=2)


def load_ctask(task_id: str):
    from cudaperf.agent.taskset import tasks_from_generated
    from cudaperf.datasets import registry
    from cudaperf.tasks import ctask

    found, _ = tasks_from_generated([g for g in registry.build_index(0) if g.task_id == task_id])
    if not found:
        sys.exit(f"no task {task_id} in the dataset's index")
    return ctask.from_task(found[0])


def job_seconds(ctask, cache_dir: str, threads: int, first_seed: int) -> float:
    """One job's references on `threads` threads."""
    session = c_session.CSession.__new__(c_session.CSession)
    session.ctask, session.job, session.prepared_references = ctask, SimpleNamespace(cache_dir=cache_dir), {}
    keys = [(name, first_seed + k) for name in ctask.timed_names for k in range(SETS_PER_CONFIG)]
    try:
        start = time.perf_counter()
        session.prepare_references(keys, threads)
        return time.perf_counter() - start
    finally:
        session.drop_prepared()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS))
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    many = c_session.prepare_threads(10**6)
    print(f"CPUs this process may use: {len(os.sched_getaffinity(0))}; threads: 1 against {many}\n")
    print("| task | configurations | one thread, s a job | threads | many threads, s a job | ratio |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as cache_dir:
        for task_id in args.tasks:
            ctask = load_ctask(task_id)
            job_seconds(ctask, cache_dir, 1, 0)  # builds the reference's library once
            one, both = [], []
            for r in range(args.rounds):
                one.append(job_seconds(ctask, cache_dir, 1, 1000 * (2 * r + 1)))
                both.append(job_seconds(ctask, cache_dir, many, 1000 * (2 * r + 2)))
            a, b = statistics.median(one), statistics.median(both)
            print(f"| {task_id} | {len(ctask.timed_names)} | {a:.2f} | {many} | {b:.2f} | {a / b:.2f}x |",
                  flush=True)


if __name__ == "__main__":
    main()
