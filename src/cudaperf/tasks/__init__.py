"""What to solve: task files and the records they load into.

Covers: the PyTorch→CUDA task format (KernelBench files plus multiple input configurations, see
`kernelbench.py`), running a task's own code in the worker (`runtime.py`), the bundled example tasks
(`examples.py`), and the C→CUDA format (`ctask.py`, `cref.py`).

Not covered: candidates, evaluation, timing. Importing this package does not import torch.
"""

from cudaperf.tasks.kernelbench import TaskError, load_task, load_tasks, task_from_source, timed_configs

__all__ = ["TaskError", "load_task", "load_tasks", "task_from_source", "timed_configs"]
