"""A worker's private views of the shared build cache, refreshed by the parent before each job.

Why: inside the boundary the build cache is read-only, yet a worker legitimately writes two places in
it. Loading a prebuilt `load_inline` extension writes its directory (torch's lock file, ninja's log),
and a C->CUDA job builds the C reference into `<cache>/cref` when it is not there yet. Were those
directories writable, one candidate's native code could replace another solution's extension or a
task's reference library (cache poisoning). So each worker sees, at `<cache>/torch_extensions` and
`<cache>/cref`, directories of its own (bind mounts, boundary.py); before each job the parent empties
them and copies in exactly what the job needs from the real cache: the job's extension directory (at
the same absolute path, so ninja finds nothing to rebuild) and the task's reference library, which the
parent builds first when missing (from the task's own C source, as the evaluator's user). Nothing a job
leaves there reaches the real cache or the next job.

Not covered: NVRTC cubins (`<cache>/nvrtc`), which the worker only reads (a write that fails is
ignored by `toolchain.nvrtc`); the mounts themselves (`boundary.wrap`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

VIEWED: tuple[str, ...] = ("torch_extensions", "cref")


def mounts(root: str, cache_dir: str) -> tuple[tuple[str, str], ...]:
    """(private source, target) pairs for `boundary.Mounts.views`; creates both sides (the target in the
    real cache must exist for a bind mount onto it)."""
    pairs = []
    for name in VIEWED:
        source, target = Path(root, "view", name), Path(cache_dir, name)
        source.mkdir(parents=True, exist_ok=True)
        target.mkdir(parents=True, exist_ok=True)
        pairs.append((str(source), str(target)))
    return tuple(pairs)


def prepare(job: dict[str, Any], root: str, cache_dir: str, uid: int | None) -> str:
    """Empty the views and copy in what `job` needs; "" or a note on what could not be prepared (the
    worker then builds it itself, inside its view)."""
    notes = []
    for name in VIEWED:
        _empty(Path(root, "view", name))
    ext = job.get("torch_extensions_dir")
    if ext:
        notes.append(_copy_extension(Path(ext), Path(cache_dir), Path(root, "view", "torch_extensions")))
    task = job.get("task")
    if isinstance(task, dict) and task.get("kind") == "c":
        notes.append(_copy_reference(task, cache_dir, Path(root, "view", "cref")))
    if uid is not None:
        for name in VIEWED:
            _chown_tree(Path(root, "view", name), uid)
    return "; ".join(n for n in notes if n)


def _empty(directory: Path) -> None:
    for entry in directory.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def _copy_extension(ext_dir: Path, cache_dir: Path, view: Path) -> str:
    real_root = cache_dir / "torch_extensions"
    try:
        relative = ext_dir.resolve().relative_to(real_root.resolve())
    except ValueError:
        return f"extension directory {ext_dir} is outside the cache's torch_extensions"
    if not ext_dir.is_dir():
        return ""  # nothing prebuilt: the worker's load_inline builds it inside its view
    # copy2 keeps modification times to the nanosecond: ninja then sees every output up to date.
    shutil.copytree(ext_dir, view / relative, copy_function=shutil.copy2, symlinks=True)
    return ""


def _copy_reference(task: dict[str, Any], cache_dir: str, view: Path) -> str:
    from cudaperf.tasks import cref
    from cudaperf.tasks.ctask import CTaskError, from_task
    from cudaperf.types import Task, from_dict

    try:
        build = cref.build_reference(from_task(from_dict(Task, task)), cache_dir=cache_dir)
    except (CTaskError, OSError, ValueError, TypeError, KeyError) as exc:
        return f"C reference not prebuilt ({type(exc).__name__}: {exc})"[:300]
    if not build.ok or not build.lib_path:
        return "C reference not prebuilt (its build failed; the worker reports it)"
    shutil.copy2(build.lib_path, view / Path(build.lib_path).name)
    return ""


def _chown_tree(top: Path, uid: int) -> None:
    os.chown(top, uid, uid)
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            os.chown(os.path.join(dirpath, name), uid, uid, follow_symlinks=False)
