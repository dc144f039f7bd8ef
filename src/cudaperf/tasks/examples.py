"""Where the bundled example tasks and their reference solutions live.

`examples/tasks/<task_id>.py` are PyTorch→CUDA tasks with several input configurations each;
`examples/solutions/fast/<task_id>.py` solve them with NVRTC kernels through `cudaperf.cuda`, and
`examples/solutions/inline/<task_id>.py` with `torch.utils.cpp_extension.load_inline` (KernelBench style).
They are the smoke tests of the whole pipeline and the known-correct inputs of the GPU tests.

Not covered: loading them (`cudaperf.tasks.load_tasks`) or evaluating them.
"""

from __future__ import annotations

from pathlib import Path

from cudaperf.types import SolutionFormat

EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "examples"
EXAMPLE_TASK_IDS = ("layernorm", "matmul", "relu", "row_sum", "softmax", "vector_add")
SOLUTION_FORMATS = (SolutionFormat.FAST.value, SolutionFormat.INLINE.value)


def example_tasks_dir() -> Path:
    return EXAMPLES_DIR / "tasks"


def example_solutions_dir(fmt: str | SolutionFormat) -> Path:
    """`fmt` is 'fast' or 'inline'."""
    value = fmt.value if isinstance(fmt, SolutionFormat) else str(fmt)
    if value not in SOLUTION_FORMATS:
        raise ValueError(f"no example solutions in format {value!r}; have {list(SOLUTION_FORMATS)}")
    return EXAMPLES_DIR / "solutions" / value
