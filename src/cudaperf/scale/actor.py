"""What runs inside one Ray actor of the evaluation pool: an `Evaluator` (its CPU build pool and its
sandboxed worker, with the referee) on the actor's GPU, or CPU-only.

Each call evaluates one candidate through `Evaluator.evaluate_many`, so a harness fault becomes the pair's
HARNESS_ERROR row exactly as in a local batch; Ray runs up to `max_concurrency` calls at once on threads,
and the evaluator's worker pool hands each a free worker. Ray sets the actor's CUDA_VISIBLE_DEVICES to
the GPU it was given, so inside the actor that GPU is device 0. The actor runs at normal priority, as a
local evaluator does (`_normal_priority`).

Not covered: placement, retries and replacement (`cudaperf.scale.pool`). This class is plain Python; the
pool wraps it with `ray.remote` when it creates an actor, so importing it needs no Ray.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from typing import Any

from cudaperf.evaluate import EvalConfig, EvalMode, Evaluator, default_cache_dir
from cudaperf.scale.config import PoolConfig
from cudaperf.types import EvalResult, Solution, Task


def actor_eval_config(config: EvalConfig, pool: PoolConfig) -> EvalConfig:
    """The configuration an actor's evaluator gets: `config` with every visible GPU used (an actor sees only
    its own); when `build_workers` is 0, a build pool the size of the actor's CPU share, so several actors
    on one node do not each start one build process per core; the build cache the driver would use (Ray
    workers do not see environment variables set in the driver after Ray started)."""
    return dataclasses.replace(config, gpus=None, cache_dir=config.cache_dir or str(default_cache_dir()),
                               build_workers=config.build_workers or max(1, int(pool.cpus_per_actor)))


def workers_per_actor(config: EvalConfig, gpu: bool) -> int:
    """Sandboxed workers in one actor's evaluator (`Evaluator._worker_devices` for one GPU)."""
    if config.mode != EvalMode.RL.value:
        return 1
    return config.rl.workers_per_gpu if gpu else config.rl.cpu_workers


class EvalActor:
    """One evaluator in a Ray worker process (see the module docstring)."""

    def __init__(self, config: EvalConfig):
        self.niceness = _normal_priority()
        self.evaluator = Evaluator(config).__enter__()

    def describe(self) -> dict[str, Any]:
        """Where the actor runs and what its evaluator resolved: node, GPU ids Ray gave it, arch, mode."""
        import ray

        context = ray.get_runtime_context()
        return {"node_id": context.get_node_id(), "host": socket.gethostname(), "pid": os.getpid(),
                "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
                "arch": self.evaluator.arch, "mode": self.evaluator.mode, "niceness": self.niceness,
                "devices": list(self.evaluator.devices)}

    def evaluate(self, task: Task, solution: Solution) -> EvalResult:
        (result,) = list(self.evaluator.evaluate_many([(task, solution)]))
        return result

    def mode_report(self) -> dict[str, Any]:
        return self.evaluator.mode_report

    def close(self) -> bool:
        self.evaluator.close()
        return True


def _normal_priority() -> int:
    """Run at the priority a local evaluator has (niceness 0) and return the niceness in effect. Ray starts
    its workers at niceness 15 so that its own daemons stay responsive; an evaluator at 15 loses the CPU
    to any other load, which slows its timing and delays the parent's reading of the worker's stage
    messages (the referee compares the timing stage's length, as the parent saw it, with the timed calls).
    The sandboxed workers and referees started afterwards inherit it. Lowering niceness needs privilege
    (root or CAP_SYS_NICE); without it the actor keeps Ray's and says so in `describe()`."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, 0)
    except OSError:
        pass
    return os.getpriority(os.PRIO_PROCESS, 0)
