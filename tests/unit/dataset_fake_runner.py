"""A measuring runner for the CPU tests of `cudaperf dataset measure`: it has the GPU runner's protocol
(`cudaperf.datasets.measure.pool.Runner`), plans the real keys and emits rows with made-up times, so the
process model (spawned children, deaths, timeouts, the budget, resume) is tested without a GPU.

The tests name it `MeasureOptions(runner="dataset_fake_runner:FakeRunner")`; the spawned children import
it from this directory (pytest puts it on sys.path, and spawn passes sys.path to the child).
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from typing import Any

from cudaperf.datasets import registry
from cudaperf.datasets.measure.options import MeasureOptions
from cudaperf.datasets.measure.pool import GpuLock, failed_row, task_from_job
from cudaperf.datasets.measure.results import impl_hash

RUNNER = "dataset_fake_runner:FakeRunner"


class FakeRunner:
    """A CPU test aid with the GPU runner's protocol: plans the real keys, emits rows with made-up
    times. Hooks (`test_hooks`): `crash_on` an impl id (the child exits hard when checking it),
    `hang_on` an impl id (it sleeps forever), `sleep_s` per task, `crash_in_compile` (exits in the
    compile-baseline phase unless the job says to skip it). Never used for reported numbers."""

    def __init__(self, options: MeasureOptions, lock: GpuLock):
        self.hooks = options.hooks

    def info(self) -> dict[str, Any]:
        return {"device": "fake", "host": platform.node()}

    def measure(self, job: dict[str, Any], emit: Callable[..., None]) -> dict[str, Any]:
        task = task_from_job(job)
        skip = {tuple(k) for k in job["skip"]}
        keys = [(task.task_id, c, i.impl_id) for c in ("small", "large", "odd")
                for i in registry.implementations(task)]
        emit("plan", task.task_id, [k for k in keys if k not in skip])
        time.sleep(float(self.hooks.get("sleep_s", 0)))
        if self.hooks.get("crash_in_compile") and not job.get("no_compile_baseline"):
            emit("phase", task.task_id, "compile_baseline", "small", [])
            os._exit(70)
        for key in keys:
            if key in skip:
                continue
            emit("phase", task.task_id, "check", key[1], [key[2]])
            if key[2] == self.hooks.get("crash_on"):
                os._exit(70)  # like a segfault: no goodbye
            if key[2] == self.hooks.get("hang_on"):
                time.sleep(3600)
            ms = 0.01 * (1 + sum(map(ord, key[2])) % 97)
            source = next(i.source for i in registry.implementations(task) if i.impl_id == key[2])
            row = failed_row(task, key, "ok", "", impl_hash(source))
            emit("row", {**row, "correct": True, "median_ms": ms, "iqr_ms": ms / 20})
        return {"status": "ok"}


