"""Sandboxed execution of candidate code: worker processes, one per GPU, and what runs inside them.

Covers: `WorkerPool` / `Worker` (parent side, sandbox.py), the child's loop (child.py), the guards the
child installs (guards.py). The evaluation recipe run inside a worker is `session.py` (not imported here).
Importing this package loads neither torch nor CUDA.
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
