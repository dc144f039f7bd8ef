"""The evaluation pool's configuration (`PoolConfig`) and the error it raises while starting
(`PoolError`).

Covers: where the pool finds Ray (a local instance it starts, or a running cluster), how many actors it
places and with which resources, how it keeps the trainer's GPUs free, and its fault-handling limits.
Not covered: the evaluation itself (`cudaperf.evaluate.EvalConfig`, handed to every actor unchanged but
for `gpus` and `build_workers`, see `cudaperf.scale.actor.actor_eval_config`).
"""

from __future__ import annotations

from dataclasses import dataclass

STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


class PoolError(RuntimeError):
    """The pool could not start as configured (no resources, a trainer GPU taken, Ray missing); the message
    says what was asked, what the cluster offers and how to fix it. Never raised for a candidate's fault."""


@dataclass(frozen=True)
class PoolConfig:
    """How the Ray evaluation pool is placed and how it survives lost actors."""

    address: str | None = None
    """Where Ray runs, when this process has not joined a Ray cluster yet (if it has, that one is used).
    None: a local instance the pool starts (and shuts down on close). 'auto': the cluster running on this
    machine (`ray start --head`). 'HOST:PORT' or 'ray://HOST:10001': a remote cluster."""
    actors: int = 0
    """Evaluation actors. 0: one per GPU free in the cluster when the pool starts (GPU evaluation), or
    `cpu_actors` (CPU-only evaluation: `EvalConfig.device` 'cpu' or 'none', or 'auto' without GPUs)."""
    cpu_actors: int = 2
    """Actors of a CPU-only pool when `actors` is 0."""
    gpus_per_actor: float = 1.0
    """GPUs each GPU actor reserves (`num_gpus`); 1 gives every actor a GPU of its own, the evaluator's
    one-worker-per-GPU rule. Ignored by CPU actors (0)."""
    cpus_per_actor: float = 1.0
    """CPUs each actor reserves; also its build pool's size when `EvalConfig.build_workers` is 0."""
    in_flight_per_actor: int = 0
    """Candidates handed to one actor at a time. 0: its sandboxed workers (1, or the RL mode's
    `workers_per_gpu` / `cpu_workers`) plus one, so the next build overlaps the current run."""
    strategy: str = "PACK"
    """Placement-group strategy of the actors' bundles: PACK, SPREAD, STRICT_PACK, STRICT_SPREAD."""
    trainer_gpus: tuple[int, ...] = ()
    """GPU indices of this machine that the trainer uses. A local instance the pool starts never sees them;
    on a running cluster the pool refuses to start if an actor lands on one of them on this node."""
    local_cpus: int | None = None
    """CPUs of the local Ray instance the pool starts (None: every core). Ignored with an address."""
    start_timeout_s: float = 300.0
    """Longest wait for the placement group and for an actor to start (GPU actors import torch and start
    a CUDA context). A replacement that does not start in time is given up, its bundle left empty."""
    max_attempts: int = 3
    """Evaluations of one candidate cut short by lost actors before it becomes a HARNESS_ERROR result."""
    max_replacements: int | None = None
    """Lost actors replaced during the pool's life; None: four per actor; 0: none (the pool shrinks)."""

    def __post_init__(self) -> None:
        if self.actors < 0 or self.cpu_actors < 1:
            raise ValueError(f"PoolConfig: actors={self.actors} must be >= 0 and cpu_actors={self.cpu_actors}"
                             " >= 1")
        if not (self.gpus_per_actor > 0 and self.cpus_per_actor > 0):
            raise ValueError(f"PoolConfig: gpus_per_actor={self.gpus_per_actor} and cpus_per_actor="
                             f"{self.cpus_per_actor} must be > 0")
        if self.in_flight_per_actor < 0 or self.max_attempts < 1 or (self.max_replacements or 0) < 0:
            raise ValueError("PoolConfig: in_flight_per_actor and max_replacements must be >= 0 and "
                             "max_attempts >= 1")
        if self.strategy not in STRATEGIES:
            raise ValueError(f"PoolConfig.strategy={self.strategy!r}: use one of {', '.join(STRATEGIES)}")
        if not self.start_timeout_s > 0:
            raise ValueError(f"PoolConfig.start_timeout_s={self.start_timeout_s}: must be > 0")

    def replacements_allowed(self, actors: int) -> int:
        return 4 * actors if self.max_replacements is None else self.max_replacements
