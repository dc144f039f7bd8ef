"""Sandboxed execution of candidate code: worker processes, one per GPU, and what runs inside them.

Covers: `WorkerPool` / `Worker` (parent side, sandbox.py), the child's loop (child.py), the guards the
child installs (guards.py). What runs inside a worker for an evaluation job (none of it imported here):
`dispatch.py` (the default handler) picks the recipe of the task's kind, `torch_session.py` (PyTorch
tasks) or `c_session.py` (C->CUDA tasks), both built on `session.py` (the stages and safety steps they
share). The verdict of an evaluation comes from the referee beside each worker (`referee.py`, a process the
candidate never runs in), which judges the outputs the worker ships to it (`outputs.py`) against references
of its own (`judge.py`, `torch_judge.py`, `c_judge.py`). The job and its payload are the records of
`cudaperf.jobs`. Importing this package loads neither torch nor CUDA.
"""

from cudaperf.execute.sandbox import (
    DEFAULT_HANDLER,
    DEFAULT_PRELOAD,
    Limits,
    StageTimeouts,
    Worker,
    WorkerPool,
    WorkerReply,
    describe_exit,
)

__all__ = [
    "DEFAULT_HANDLER",
    "DEFAULT_PRELOAD",
    "Limits",
    "StageTimeouts",
    "Worker",
    "WorkerPool",
    "WorkerReply",
    "describe_exit",
]
