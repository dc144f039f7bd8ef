"""The one seam between the refinement loop and the judge: `CandidateEvaluator`.

The loop and the environment hand a batch of (task, solution) pairs to an object with this contract and
take `EvalResult`s back as they finish; they never touch workers, builds or timing themselves. Another
evaluation mode (say one sized for RL batches: correctness in many workers, baselines timed once per
task and configuration, timing only for correct candidates) drops in by implementing the same two methods.

Covers: the contract, `ReportingEvaluator` (any evaluator, each result reported as it arrives with the
candidates still out), and `LocalEvaluator`, which puts `cudaperf.evaluate.Evaluator` (the CPU build pool
and one sandboxed worker per GPU) behind it. The evaluator starts on first use, and a pickled
`LocalEvaluator` carries only its `EvalConfig`, so environments holding one can be sent to other processes
(each process then starts its own evaluator there). Threads may share one: `Evaluator.evaluate_many` takes
concurrent batches (its worker pool hands each job a free worker). `LocalEvaluator(config, mode="rl")` (or
`EvalConfig(mode="rl")`) is the evaluation mode sized for agent and RL batches: the same checks, several
workers per GPU, baselines cached per task and configuration, ranking budgets (`cudaperf.eval_modes`).

Not covered: what an evaluation does (`cudaperf.evaluate`), rewards (`cudaperf.reward`).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, Self, runtime_checkable

from cudaperf.types import EvalResult, Solution, Task


@runtime_checkable
class CandidateEvaluator(Protocol):
    """Evaluates candidates for the loop.

    `evaluate_stream(pairs)` yields `(index, EvalResult)` for every pair, each as soon as it is known, in
    any order (`index` is the pair's position in `pairs`); it never raises for a fault of a candidate, and
    a harness fault becomes a HARNESS_ERROR result for that pair. `arch` is the target architecture the
    candidates are built for (the structural analysis uses it). `close()` frees processes."""

    @property
    def arch(self) -> str: ...

    def evaluate_stream(self, pairs: Sequence[tuple[Task, Solution]]) -> Iterator[tuple[int, EvalResult]]: ...

    def close(self) -> None: ...


def evaluate_all(evaluator: CandidateEvaluator, pairs: Sequence[tuple[Task, Solution]]) -> list[EvalResult]:
    """Every pair's result, in the order of `pairs`."""
    results: list[EvalResult | None] = [None] * len(pairs)
    for index, result in evaluator.evaluate_stream(pairs):
        results[index] = result
    missing = [i for i, r in enumerate(results) if r is None]
    if missing:
        raise RuntimeError(f"the evaluator returned no result for pairs {missing}: a broken "
                           "CandidateEvaluator")
    return results  # type: ignore[return-value]


@dataclass(frozen=True)
class BatchProgress:
    """One result of a batch as it arrived (`ReportingEvaluator`)."""

    done: int
    total: int
    result: EvalResult
    still_out: tuple[str, ...]  # "task_id/solution_id" of the pairs without a result yet
    elapsed_s: float  # since the batch was handed in

    def line(self, shown: int = 4) -> str:
        r = self.result
        took = (r.stage_durations_s or {}).get("total")
        stage = f" in stage '{r.stage}'" if r.stage else ""
        what = f"{r.task_id}/{r.solution_id} {r.outcome.value}{stage}"
        out = ", ".join(self.still_out[:shown]) + (" ..." if len(self.still_out) > shown else "")
        return (f"evaluated {self.done} of {self.total} after {self.elapsed_s:.0f} s: {what}"
                + (f" ({took:.1f} s)" if took is not None else "") + (f"; still out: {out}" if out else ""))


class ReportingEvaluator:
    """A `CandidateEvaluator` that hands each result, as it arrives, to `on_result` with the candidates
    still out, so a batch that stalls says on which candidates (the batch waits for its slowest)."""

    def __init__(self, inner: CandidateEvaluator, on_result: Callable[[BatchProgress], None]):
        self.inner, self.on_result = inner, on_result

    @property
    def arch(self) -> str:
        return self.inner.arch

    def evaluate_stream(self, pairs: Sequence[tuple[Task, Solution]]) -> Iterator[tuple[int, EvalResult]]:
        out = {i: f"{task.task_id}/{solution.solution_id}" for i, (task, solution) in enumerate(pairs)}
        started = time.perf_counter()
        for index, result in self.inner.evaluate_stream(pairs):
            out.pop(index, None)
            self.on_result(BatchProgress(len(pairs) - len(out), len(pairs), result, tuple(out.values()),
                                         time.perf_counter() - started))
            yield index, result

    def close(self) -> None:
        self.inner.close()


def _unique_ids(pairs: Sequence[tuple[Task, Solution]]) -> tuple[list, dict[tuple[str, str], int]]:
    """The pairs as sent, each (task, solution id) once (a repeated id gets its index appended: results
    come back in the order they finish, found by that key, so two answers under one id, such as two
    environments stepping the same task, sample and turn, could otherwise swap), and key -> index."""
    repeated = Counter((task.task_id, solution.solution_id) for task, solution in pairs)
    sent, waiting = [], {}
    for index, (task, solution) in enumerate(pairs):
        if repeated[(task.task_id, solution.solution_id)] > 1:
            unique = f"{solution.solution_id}#{index}"
            while (task.task_id, unique) in waiting or repeated[(task.task_id, unique)]:
                unique += "#"
            solution = dataclasses.replace(solution, solution_id=unique)
        sent.append((task, solution))
        waiting[(task.task_id, solution.solution_id)] = index
    return sent, waiting


class LocalEvaluator:
    """`cudaperf.evaluate.Evaluator` behind the `CandidateEvaluator` seam (see the module docstring)."""

    def __init__(self, config: Any = None, mode: str | None = None):
        """`mode` ('default' or 'rl'), when given, replaces `config.mode`."""
        import dataclasses

        from cudaperf.evaluate import EvalConfig

        self.config = config or EvalConfig()
        if mode is not None:
            self.config = dataclasses.replace(self.config, mode=mode)
        self._evaluator: Any = None
        self._lock = threading.Lock()

    def _open(self) -> Any:
        with self._lock:  # environments stepped from several threads share one evaluator
            if self._evaluator is None:
                from cudaperf.evaluate import Evaluator

                self._evaluator = Evaluator(self.config).__enter__()
            return self._evaluator

    @property
    def arch(self) -> str:
        return self._open().arch

    @property
    def mode(self) -> str:
        """'cuda', 'cpu' or 'none' (build and static checks only), as the evaluator resolved it."""
        return self._open().mode

    def evaluate_stream(self, pairs: Sequence[tuple[Task, Solution]]) -> Iterator[tuple[int, EvalResult]]:
        if not pairs:
            return
        sent, waiting = _unique_ids(pairs)
        # The whole batch goes in at once: its builds start together in the CPU pool and overlap with
        # the GPU work of the first candidates.
        for result in self._open().evaluate_many(sent):
            index = waiting.pop((result.task_id, result.solution_id), None)
            if index is not None:
                yield index, dataclasses.replace(result, solution_id=pairs[index][1].solution_id)

    def close(self) -> None:
        with self._lock:
            if self._evaluator is not None:
                self._evaluator.close()
                self._evaluator = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config}  # processes and locks do not travel; the configuration does

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["config"])
