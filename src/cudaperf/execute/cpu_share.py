"""How many CPU threads torch gets in each process a worker pool starts (`sandbox.Limits.cpu_threads`).

Covers the share (`cpu_threads_per_process`: the evaluator's CPUs split evenly between the pool's workers
and referees) and the environment that applies it in a child (`thread_settings`: OMP_NUM_THREADS and
MKL_NUM_THREADS, read by torch's OpenMP and MKL when the child starts). Not covered: threads a candidate
starts itself, and the build pool's compilers (their own processes, sized by the build pool).
"""

from __future__ import annotations

import os


def cpu_threads_per_process(processes: int, cpus: int) -> int:
    """The CPUs shared out evenly between `processes`, at least one each."""
    return max(1, cpus // max(1, processes))


def thread_settings(threads: int | None) -> dict[str, str]:
    """The environment that gives a child `threads` CPU threads; nothing when `threads` is None or the
    evaluator was started with OMP_NUM_THREADS (the user's choice is kept)."""
    if threads is None or "OMP_NUM_THREADS" in os.environ:
        return {}
    return {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
