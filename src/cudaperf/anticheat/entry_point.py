"""Whether a solution defines what the harness calls, read from its text (never run).

Covers: `entry_point_problem(source, task)`: '' when the solution defines its task's entry point, else the
reason in one line. The entry point of a PyTorch task is `class ModelNew` (KernelBench's contract, both
solution formats); that of a C→CUDA task is a function named like the C entry point
(`cudaperf.tasks.ctask`, "the candidate contract"). An empty file, or one with no code but comments and a
docstring, has none. The evaluator decides on this before building anything, so a missing entry point is
the same error on a CPU machine (where nothing runs) as on a GPU one.

Not covered: whether the entry point works (constructor arguments, the signature of `forward`): that is
found by running it, in the worker. A syntax error is `static.check_source`'s finding, not this module's.
"""

from __future__ import annotations

import ast

from cudaperf.types import Task, TaskKind

PYTORCH_ENTRY_POINT = "ModelNew"


def entry_point_problem(source: str, task: Task) -> str:
    """'' when `source` defines the task's entry point at module level, else why not."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return ""  # the static checker reports the syntax error itself
    if not _has_code(tree):
        return "the solution is empty: it defines nothing"
    if task.kind is TaskKind.C:
        name = str(task.spec.get("entry", ""))
        if name and name not in _defined_functions(tree):
            return f"no function `{name}` (the C entry point this task calls) is defined at module level"
        return ""
    if PYTORCH_ENTRY_POINT not in _defined_classes(tree):
        return f"no `class {PYTORCH_ENTRY_POINT}` is defined at module level (the harness constructs it)"
    return ""


def _has_code(tree: ast.Module) -> bool:
    body = list(tree.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the module docstring
    return bool(body)


def _defined_classes(tree: ast.Module) -> set[str]:
    names = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    return names | _assigned_names(tree)


def _defined_functions(tree: ast.Module) -> set[str]:
    names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return names | _assigned_names(tree)


def _assigned_names(tree: ast.Module) -> set[str]:
    """Names bound by module-level assignment (`ModelNew = SomeClass`) or import-as; a conditional
    definition counts (it may well run)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.col_offset == 0:
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {a.asname or a.name for a in node.names}
    return names
