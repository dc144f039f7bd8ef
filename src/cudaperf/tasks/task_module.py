"""Running a task's source as a Python module: a unique module name per content, and the execution itself.

Task files (and, in the worker, candidate solutions) are Python modules given as text; this is the one
place that turns such text into a module. Not covered: validating what the module defines
(`cudaperf.tasks.kernelbench`), making inputs or running models (`cudaperf.tasks.runtime`).
"""

from __future__ import annotations

import hashlib
import linecache
import re
import sys
import types


def module_name_for(task_id: str, source: str) -> str:
    """A unique, importable-looking module name: the id plus a content hash (two versions never clash)."""
    safe = re.sub(r"\W", "_", task_id)
    return f"cudaperf_task_{safe}_{hashlib.sha256(source.encode()).hexdigest()[:10]}"


def exec_task_source(source: str, *, module_name: str, filename: str, keep: bool) -> types.ModuleType:
    """Run a task's source in a fresh module. Raises whatever the source raises.

    The module is registered in `sys.modules` while it runs (dataclasses and pickling look classes up
    there) and kept only when `keep`; its text goes to `linecache` so tracebacks and `inspect` show lines.
    """
    module = types.ModuleType(module_name)
    module.__file__ = filename
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    code = compile(source, filename, "exec")
    sys.modules[module_name] = module
    try:
        exec(code, module.__dict__)  # noqa: S102 - task files are trusted, like a test suite's own code
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    if not keep:
        sys.modules.pop(module_name, None)
    return module
