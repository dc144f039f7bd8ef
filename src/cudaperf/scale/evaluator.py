"""`RayEvaluator`: the Ray evaluation pool behind the contracts the local evaluator keeps.

- The agent's seam (`cudaperf.agent.evaluation.CandidateEvaluator`): `arch`, `evaluate_stream(pairs)`
  yielding `(index, EvalResult)` for every pair as it finishes, `close()`. The refinement loop, the agent
  environment and the RL trainer's rollouts take it where they take a `LocalEvaluator`.
- The batch entry point of `cudaperf.evaluate.Evaluator`: `evaluate_many(pairs, store, progress,
  deadline_s)`: pairs already in the store are skipped (resume), each result is appended to the store as
  it arrives (the driver is the store's one writer), a fault while storing or showing one becomes that
  pair's HARNESS_ERROR row, and no evaluation starts after the deadline.

A pair is evaluated once per batch however often it appears (the candidate key `(task_id, solution_id)`);
`evaluate_stream` gives its result to every index that holds it, `evaluate_many` yields and stores it
once. The pool starts on first use. Pickled, a `RayEvaluator` carries only its two configurations (the
process that unpickles it starts its own pool, on the cluster `PoolConfig.address` names).

Not covered: placement and fault handling (`cudaperf.scale.pool`), what an evaluation does
(`cudaperf.evaluate`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, as_completed
from typing import Any, Self

from cudaperf.evaluate import EvalConfig, ProgressBar, deliver, harness_row
from cudaperf.scale.config import PoolConfig
from cudaperf.scale.pool import PoolReport, RayEvalPool
from cudaperf.types import EvalResult, Outcome, Solution, Task


class RayEvaluator:
    """Evaluates candidates on a Ray pool of sandboxed evaluators (see the module docstring)."""

    def __init__(self, config: EvalConfig | None = None, pool: PoolConfig | None = None):
        self.config = config or EvalConfig()
        self.pool_config = pool or PoolConfig()
        self._pool: RayEvalPool | None = None
        self._lock = threading.Lock()

    @classmethod
    def at(cls, address: str, config: EvalConfig | None = None, **pool: Any) -> RayEvaluator:
        """The evaluator of a command given `--ray-address ADDRESS` ('local': a Ray instance started here)."""
        return cls(config, PoolConfig(address=None if address == "local" else address, **pool))

    @property
    def pool(self) -> RayEvalPool:
        with self._lock:
            if self._pool is None:
                self._pool = RayEvalPool(self.config, self.pool_config).open()
            return self._pool

    @property
    def arch(self) -> str:
        return self.pool.arch

    def report(self) -> PoolReport:
        return self.pool.report()

    # -- the agent's seam ------------------------------------------------------------------------
    def evaluate_stream(self, pairs: Sequence[tuple[Task, Solution]]) -> Iterator[tuple[int, EvalResult]]:
        indices: dict[tuple[str, str], list[int]] = {}
        firsts: list[tuple[Task, Solution]] = []
        for index, (task, solution) in enumerate(pairs):
            key = (task.task_id, solution.solution_id)
            if key not in indices:
                firsts.append((task, solution))
            indices.setdefault(key, []).append(index)
        if not pairs:
            return
        for key, result in self._results(firsts):
            for index in indices[key]:
                yield index, result

    # -- the batch entry point -------------------------------------------------------------------
    def evaluate_many(self, pairs: Iterable[tuple[Task, Solution]], store=None, progress: bool = False,
                      deadline_s: float | None = None) -> Iterator[EvalResult]:
        done = store.done() if store is not None else set()
        todo: dict[tuple[str, str], tuple[Task, Solution]] = {}
        for task, solution in pairs:
            key = (task.task_id, solution.solution_id)
            if key not in done:
                todo.setdefault(key, (task, solution))
        with ProgressBar(progress, len(todo), "ray eval", self._describe) as advance:
            for _, result in self._results(list(todo.values()), deadline_s):
                yield deliver(result, store, advance)

    def _results(self, pairs: list[tuple[Task, Solution]],
                 deadline_s: float | None = None) -> Iterator[tuple[tuple[str, str], EvalResult]]:
        """(key, result) per pair as each finishes; pairs left unstarted at the deadline yield nothing."""
        not_after = None if deadline_s is None else time.monotonic() + deadline_s
        pool = self.pool
        futures: dict[Future, tuple[str, str]] = {
            pool.submit(task, solution, not_after): (task.task_id, solution.solution_id)
            for task, solution in pairs}
        for future in as_completed(futures):
            if future.cancelled():
                continue
            key = futures[future]
            try:
                result = future.result()
            except Exception as exc:  # noqa: BLE001 - the pool sets results, never exceptions: be safe
                result = harness_row(EvalResult(key[0], key[1], Outcome.HARNESS_ERROR), "pooling", exc)
            yield key, result

    def _describe(self, result: EvalResult) -> str:
        """The progress bar's text: the pool's actors, losses and re-runs, and the pair just finished."""
        r = self.pool.report()
        return (f"{r.live} actors ({r.kind}), {r.lost} lost, {r.reruns} re-run · "
                f"{result.task_id}/{result.solution_id}: {result.outcome.value}")

    # -- lifecycle -------------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config, "pool": self.pool_config}  # actors and threads do not travel

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["config"], state["pool"])


__all__ = ["RayEvaluator"]
