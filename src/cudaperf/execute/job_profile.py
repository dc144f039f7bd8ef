"""Profiles of sandboxed jobs, for developers finding where a worker's time goes (the H200 is lent for
minutes at a time, so one profiled benchmark run has to say everything).

`CUDAPERF_PROFILE_JOBS=DIR` in the evaluating process turns it on for the workers started after it is set:
the parent says so in the worker's hello, the child runs each job under `cProfile`, and sends the
statistics (`pstats`' own marshal format, base64) in a message of type "profile" before the job's result;
the parent writes them to `DIR/job-<worker pid>-<n>.prof`, which `pstats.Stats` and tools such as
snakeviz read. The folder is read again for each profile written, so a caller can move it between batches
(`benchmarks/eval_modes.py` keeps each run's warm pass apart); unset, the worker's first folder is kept.
A worker is profiled whole: every stage, the referee round trips as time spent waiting.

Not covered: the referee's and the parent's own work (they show as waits in the worker's profile), and
untrusted batches: a profiled worker's candidate could send profile messages of its own, so the parent
writes at most `MAX_PROFILE_BYTES` per message to a file name it chooses. It is a developer's switch.
"""

from __future__ import annotations

import base64
import cProfile
import itertools
import marshal
import os
import pstats
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

ENV_VAR = "CUDAPERF_PROFILE_JOBS"
MAX_PROFILE_BYTES = 8 << 20
_T = TypeVar("_T")
_serial = itertools.count()


def profile_dir() -> Path | None:
    """Where the parent writes profiles, or None when profiling is off."""
    value = os.environ.get(ENV_VAR, "").strip()
    return Path(value) if value else None


def profile_into(root: str | Path | None, folder: str) -> None:
    """Workers started with profiling on write their next profiles into `root/folder` (nothing when
    `root` is None); workers started after this call profile their jobs."""
    if root:
        os.environ[ENV_VAR] = str(Path(root) / folder)


def run_profiled(fn: Callable[[], _T]) -> tuple[_T, str]:
    """(fn(), its profile as text for the wire)."""
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        result = fn()
    finally:
        profiler.disable()
    stats = pstats.Stats(profiler)
    return result, base64.b64encode(marshal.dumps(stats.stats)).decode("ascii")  # type: ignore[attr-defined]


def write_profile(directory: Path, worker_pid: int, encoded: Any) -> Path | None:
    """Write one job's profile; None when the message is not one (wrong type, too large, not base64)."""
    if not isinstance(encoded, str) or len(encoded) > MAX_PROFILE_BYTES:
        return None
    try:
        data = base64.b64decode(encoded, validate=True)
    except ValueError:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"job-{int(worker_pid)}-{next(_serial)}.prof"
    path.write_bytes(data)
    return path
