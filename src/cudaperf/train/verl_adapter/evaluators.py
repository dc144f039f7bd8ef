"""The evaluator the verl agent loop and reward function use, named in the configuration.

A verl worker process builds its agent loops from the configuration, so the evaluator is named there:
`evaluator: "package.module:factory"` and `evaluator_kwargs`; the factory returns a
`cudaperf.agent.evaluation.CandidateEvaluator` (the one seam to the judge). Every agent loop and reward
call of a process shares one evaluator per (factory, kwargs) (`shared_evaluator`), closed at exit.

Factories here:
- `local`: `LocalEvaluator`, the sandboxed workers on this node's GPUs (or the CPU), RL mode by default;
- `ray_pool`: the Ray evaluation pool of `cudaperf.scale` (`RayEvalPool`, `PoolConfig` from `pool`);
- `from_pool`: any object with the evaluation pool's interface, `submit(task, solution) -> Future` of an
  `EvalResult`, `arch` and `close()` (the Ray pool of `cudaperf.scale` is one: it runs the evaluators on
  their own GPUs, away from the trainer's), named by `pool: "package.module:callable"` returning an
  opened pool; `PoolEvaluator` puts it behind the seam.

Not covered: the pool itself (`cudaperf.scale`), what an evaluation does (`cudaperf.evaluate`).
"""

from __future__ import annotations

import atexit
import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import as_completed
from typing import Any

from cudaperf.reward import import_object
from cudaperf.types import EvalResult, Solution, Task

DEFAULT_FACTORY = "cudaperf.train.verl_adapter.evaluators:local"

_SHARED: dict[str, Any] = {}
_LOCK = threading.Lock()


def local(device: str = "auto", mode: str = "rl", allow_torch_ops: bool = False, **eval_fields: Any) -> Any:
    """A `LocalEvaluator` over `cudaperf.evaluate.EvalConfig(device=..., **eval_fields)`."""
    from cudaperf.agent.evaluation import LocalEvaluator

    return LocalEvaluator(eval_config(device, allow_torch_ops, **eval_fields), mode=mode)


def ray_pool(pool: Mapping[str, Any] | None = None, device: str = "cuda", mode: str = "rl",
             allow_torch_ops: bool = False, **eval_fields: Any) -> PoolEvaluator:
    """The Ray evaluation pool of `cudaperf.scale` (`RayEvalPool(EvalConfig, PoolConfig(**pool))`, opened):
    its actors evaluate on GPUs of their own, away from the trainer's."""
    import dataclasses

    from cudaperf.scale.config import PoolConfig
    from cudaperf.scale.pool import RayEvalPool

    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in (pool or {}).items()}
    config = dataclasses.replace(eval_config(device, allow_torch_ops, **eval_fields), mode=mode)
    return PoolEvaluator(RayEvalPool(config, PoolConfig(**fields)).open())


def eval_config(device: str = "auto", allow_torch_ops: bool = False, **eval_fields: Any) -> Any:
    """`EvalConfig` from plain values (a YAML mapping for `timing` becomes its record)."""
    from cudaperf.anticheat.policy import Policy
    from cudaperf.evaluate import EvalConfig

    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    if isinstance(eval_fields.get("timing"), Mapping):  # from a YAML file: a mapping, not the record
        from cudaperf.evaluate import TimingConfig

        eval_fields["timing"] = TimingConfig(**{k: tuple(v) if isinstance(v, list) else v
                                                for k, v in eval_fields["timing"].items()})
    return EvalConfig(device=device, policy=Policy(allow_torch_ops=allow_torch_ops), **eval_fields)


class PoolEvaluator:
    """A pool with `submit(task, solution) -> Future[EvalResult]` behind the `CandidateEvaluator` seam."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    @property
    def arch(self) -> str:
        return self.pool.arch

    def evaluate_stream(self, pairs: Sequence[tuple[Task, Solution]]) -> Iterator[tuple[int, EvalResult]]:
        futures = {self.pool.submit(task, solution): i for i, (task, solution) in enumerate(pairs)}
        for future in as_completed(futures):
            yield futures[future], future.result()

    def close(self) -> None:
        self.pool.close()


def from_pool(pool: str, **pool_kwargs: Any) -> PoolEvaluator:
    """`pool` names a callable returning an opened pool (called with `pool_kwargs`)."""
    return PoolEvaluator(import_object(pool)(**pool_kwargs))


def shared_evaluator(factory: str = DEFAULT_FACTORY, kwargs: Mapping[str, Any] | None = None) -> Any:
    """This process's evaluator for (factory, kwargs), built on first use and closed at exit."""
    kwargs = dict(kwargs or {})
    key = f"{factory}|{json.dumps(kwargs, sort_keys=True, default=str)}"
    with _LOCK:
        if key not in _SHARED:
            evaluator = import_object(factory)(**kwargs)
            _SHARED[key] = evaluator
            atexit.register(evaluator.close)
        return _SHARED[key]


def close_shared() -> None:
    """Close every shared evaluator of this process (tests; atexit does it otherwise)."""
    with _LOCK:
        for evaluator in _SHARED.values():
            evaluator.close()
        _SHARED.clear()


__all__ = ["DEFAULT_FACTORY", "PoolEvaluator", "close_shared", "eval_config", "from_pool", "local",
           "ray_pool", "shared_evaluator"]
