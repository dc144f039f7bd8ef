"""The one seam between the refinement loop and the judge: `CandidateEvaluator`.

The loop and the environment hand a batch of (task, solution) pairs to an object with this contract and
take `EvalResult`s back as they finish; they never touch workers, builds or timing themselves. Another
evaluation mode (say one sized for RL batches: correctness in many workers, baselines timed once per
task and configuration, timing only for correct candidates) drops in by implementing the same two methods.

Covers: the contract, its extension for batches whose pairs arrive over time (`ArrivingEvaluator`,
`evaluate_arriving`: the RL rollout hands each answer as the policy finishes it; an evaluator without it
gets the batch once it has ended), `ReportingEvaluator` (any evaluator, each result reported as it
arrives with the candidates still out, and a batch long without any result reported with where its jobs
and threads wait: `BatchStall`), and `LocalEvaluator`, which puts `cudaperf.evaluate.Evaluator` (the
CPU build pool and one sandboxed worker per GPU) behind it. The evaluator starts on first use, and a pickled
`LocalEvaluator` carries only its `EvalConfig`, so environments holding one can be sent to other processes
(each process then starts its own evaluator there). Threads may share one: `Evaluator.evaluate_many` takes
concurrent batches (its worker pool hands each job a free worker). `LocalEvaluator(config, mode="rl")` (or
`EvalConfig(mode="rl")`) is the evaluation mode sized for agent and RL batches: the same checks, several
workers per GPU, baselines cached per task and configuration, ranking budgets (`cudaperf.eval_modes`).

Not covered: what an evaluation does (`cudaperf.evaluate`), rewards (`cudaperf.reward`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
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


class ArrivingEvaluator(CandidateEvaluator, Protocol):
    """A `CandidateEvaluator` that also takes a batch whose pairs arrive over time:
    `evaluate_arriving(pairs)` reads `pairs` (an iterable that may wait between pairs) as it goes, starts
    each pair on arrival, and yields `(index, EvalResult)` as `evaluate_stream` does (`index`: the pair's
    position in arrival order), results before the iterable ends included; it ends once the iterable has
    ended and every pair has its result."""

    def evaluate_arriving(self, pairs: Iterable[tuple[Task, Solution]]) \
            -> Iterator[tuple[int, EvalResult]]: ...


def evaluate_arriving(evaluator: CandidateEvaluator,
                      pairs: Iterable[tuple[Task, Solution]]) -> Iterator[tuple[int, EvalResult]]:
    """`evaluator.evaluate_arriving(pairs)`; an evaluator without it gets the whole batch once the iterable
    has ended (`evaluate_stream`)."""
    # The method looked up on the type: a protocol isinstance check would read `arch`, which starts a
    # LocalEvaluator's workers.
    if callable(getattr(type(evaluator), "evaluate_arriving", None)):
        return evaluator.evaluate_arriving(pairs)  # type: ignore[attr-defined]
    batch = list(pairs)
    return evaluator.evaluate_stream(batch) if batch else iter(())


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
    solution: Solution | None = None  # the candidate the result is for

    def line(self, shown: int = 4) -> str:
        r = self.result
        took = (r.stage_durations_s or {}).get("total")
        stage = f" in stage '{r.stage}'" if r.stage else ""
        what = f"{r.task_id}/{r.solution_id} {r.outcome.value}{stage}"
        out = _listed(self.still_out, shown)
        return (f"evaluated {self.done} of {self.total} after {self.elapsed_s:.0f} s: {what}"
                + (f" ({took:.1f} s)" if took is not None else "") + (f"; still out: {out}" if out else ""))


def _listed(still_out: tuple[str, ...], shown: int) -> str:
    """The first `shown` candidates still out, "..." after them when there are more."""
    return ", ".join(still_out[:shown]) + (" ..." if len(still_out) > shown else "")


STALL_S = 60.0
"""`ReportingEvaluator`'s default: a batch this long without a result is reported (again every as long)."""


@dataclass(frozen=True)
class BatchStall:
    """A batch that has gone `since_result_s` without a result (`ReportingEvaluator`): which candidates
    are out, where the evaluator says its jobs are, and where every thread of this process waits."""

    done: int
    total: int
    still_out: tuple[str, ...]  # "task_id/solution_id"
    elapsed_s: float  # since the batch was handed in
    since_result_s: float  # since its last result (or since it was handed in)
    activity: tuple[str, ...]  # the evaluator's account of its jobs (`LocalEvaluator.activity`), if any
    stacks: str  # every thread's stack, innermost call last

    def line(self, shown: int = 4) -> str:
        out = _listed(self.still_out, shown)
        return (f"batch stalled: {self.done} of {self.total} evaluated after {self.elapsed_s:.0f} s, none in "
                f"the last {self.since_result_s:.0f} s; still out: {out}")


def thread_stacks() -> str:
    """Every thread of this process with its stack (`sys._current_frames`), as text."""
    names = {t.ident: t.name for t in threading.enumerate()}
    blocks = []
    for ident, frame in sys._current_frames().items():
        stack = "".join(traceback.format_stack(frame))
        blocks.append(f"--- thread {names.get(ident, '?')} ({ident})\n{stack}")
    return "\n".join(blocks)


class ReportingEvaluator:
    """A `CandidateEvaluator` that hands each result, as it arrives, to `on_result` with the candidates
    still out, so a batch that stalls says on which candidates (the batch waits for its slowest); and,
    with `on_stall`, a batch that goes `stall_s` without any result to it (`BatchStall`: the candidates
    out, the inner evaluator's `activity()` when it has one, every thread's stack), again every `stall_s`
    while none comes, so a batch held with no result at all says where."""

    def __init__(self, inner: CandidateEvaluator, on_result: Callable[[BatchProgress], None],
                 on_stall: Callable[[BatchStall], None] | None = None, stall_s: float = STALL_S):
        if not stall_s > 0:
            raise ValueError(f"ReportingEvaluator: stall_s={stall_s} must be positive seconds")
        self.inner, self.on_result, self.on_stall, self.stall_s = inner, on_result, on_stall, stall_s

    @property
    def arch(self) -> str:
        return self.inner.arch

    def evaluate_stream(self, pairs: Sequence[tuple[Task, Solution]]) -> Iterator[tuple[int, EvalResult]]:
        watch = _StallWatch(self, len(pairs), watched=self.on_stall is not None and bool(pairs))
        for index, pair in enumerate(pairs):
            watch.add(index, pair)
        yield from self._reported(self.inner.evaluate_stream(pairs), watch)

    def evaluate_arriving(self, pairs: Iterable[tuple[Task, Solution]]) -> Iterator[tuple[int, EvalResult]]:
        """`evaluate_stream` over pairs that arrive over time (`ArrivingEvaluator`); a report's total is
        the pairs arrived so far."""
        watch = _StallWatch(self, None, watched=self.on_stall is not None)

        def watched() -> Iterator[tuple[Task, Solution]]:
            for index, pair in enumerate(pairs):
                watch.add(index, pair)
                yield pair

        yield from self._reported(evaluate_arriving(self.inner, watched()), watch)

    def _reported(self, results: Iterator[tuple[int, EvalResult]],
                  watch: "_StallWatch") -> Iterator[tuple[int, EvalResult]]:
        try:
            for index, result in results:
                still_out, total = watch.arrived(index)
                self.on_result(BatchProgress(total - len(still_out), total, result, still_out,
                                             time.perf_counter() - watch.started, watch.solution(index)))
                yield index, result
        finally:
            watch.stop()

    def activity(self) -> tuple[str, ...]:
        activity = getattr(self.inner, "activity", None)
        return tuple(activity()) if callable(activity) else ()

    def close(self) -> None:
        self.inner.close()


class _StallWatch:
    """One batch's candidates still out and the time of its last result; when `watched`, a thread that
    calls its evaluator's `on_stall` while the batch has had no result for `stall_s`."""

    def __init__(self, owner: ReportingEvaluator, total: int | None, watched: bool):
        """`total`: the batch's pairs, or None when they arrive over time (then those added so far)."""
        self._owner, self._total = owner, total
        self._out: dict[int, str] = {}  # index -> "task_id/solution_id", of the pairs without a result
        self._solutions: dict[int, Solution] = {}
        self._lock = threading.Lock()
        self.started = self._last = time.perf_counter()  # the batch's start; the last result
        self._stopped = threading.Event()
        self._thread = None
        if watched:
            self._thread = threading.Thread(target=self._watch, name="cudaperf-stall-watch", daemon=True)
            self._thread.start()

    def add(self, index: int, pair: tuple[Task, Solution]) -> None:
        task, solution = pair
        with self._lock:
            self._out[index] = f"{task.task_id}/{solution.solution_id}"
            self._solutions[index] = solution

    @property
    def total(self) -> int:
        return self._total if self._total is not None else len(self._solutions)

    def solution(self, index: int) -> Solution | None:
        return self._solutions.get(index)

    def arrived(self, index: int) -> tuple[tuple[str, ...], int]:
        """Pair `index` has its result; the candidates still out, and the batch's total."""
        with self._lock:
            self._out.pop(index, None)
            self._last = time.perf_counter()
            return tuple(self._out.values()), self.total

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()

    def _watch(self) -> None:
        stall_s = self._owner.stall_s
        reported = self.started
        while not self._stopped.wait(min(stall_s, 1.0)):
            now = time.perf_counter()
            with self._lock:
                quiet_s, still_out = now - self._last, tuple(self._out.values())
            if quiet_s < stall_s or now - reported < stall_s or not still_out:
                continue
            reported = now
            stall = BatchStall(self.total - len(still_out), self.total, still_out, now - self.started,
                               quiet_s, self._activity(), thread_stacks())
            try:
                self._owner.on_stall(stall)  # type: ignore[misc]
            except Exception as exc:  # noqa: BLE001 - a report must never end the batch it reports on
                print(f"cudaperf: the stall report failed: {exc!r}", file=sys.stderr)

    def _activity(self) -> tuple[str, ...]:
        try:
            return self._owner.activity()
        except Exception as exc:  # noqa: BLE001 - the stacks still say where the batch is
            return (f"the evaluator's activity could not be read: {exc!r}",)


def _unique_id(task_id: str, solution_id: str, index: int, taken: Mapping[tuple[str, str], int]) -> str:
    """The id a pair is sent under: its own, or, when the batch already sent that (task, id), the id with
    its index appended (results come back in the order they finish, found by that key, so two answers
    under one id, such as two environments stepping the same task, sample and turn, could otherwise
    swap)."""
    unique = solution_id
    if (task_id, unique) in taken:
        unique = f"{solution_id}#{index}"
        while (task_id, unique) in taken:
            unique += "#"
    return unique


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
        # The whole batch goes in at once: its builds start together in the CPU pool and overlap with
        # the GPU work of the first candidates.
        yield from self.evaluate_arriving(pairs)

    def evaluate_arriving(self, pairs: Iterable[tuple[Task, Solution]]) -> Iterator[tuple[int, EvalResult]]:
        """`evaluate_stream` over pairs that arrive over time (`ArrivingEvaluator`): each is queued, its
        build started, as it arrives (`Evaluator.evaluate_many` reads the iterable in a thread of its own)."""
        original: list[Solution] = []  # by index: the solution as handed in
        waiting: dict[tuple[str, str], int] = {}  # (task id, id as sent) -> index

        def sent() -> Iterator[tuple[Task, Solution]]:
            for index, (task, solution) in enumerate(pairs):
                original.append(solution)
                unique = _unique_id(task.task_id, solution.solution_id, index, waiting)
                waiting[(task.task_id, unique)] = index
                yield task, (solution if unique == solution.solution_id
                             else dataclasses.replace(solution, solution_id=unique))

        for result in self._open().evaluate_many(sent()):
            index = waiting.pop((result.task_id, result.solution_id), None)
            if index is not None:
                yield index, dataclasses.replace(result, solution_id=original[index].solution_id)

    def activity(self) -> tuple[str, ...]:
        """Where the evaluator's jobs are now (`Evaluator.activity`); none before its first batch."""
        evaluator = self._evaluator
        return evaluator.activity() if evaluator is not None else ()

    def gate_states(self) -> dict[str, float] | None:
        """The RL mode's GPU gate's seconds per state so far (`Evaluator.gate_states`); None in the
        default mode and before the first batch opened the evaluator."""
        evaluator = self._evaluator
        return evaluator.gate_states() if evaluator is not None else None

    def timing_paused(self) -> contextlib.AbstractContextManager[None] | None:
        """`Evaluator.timing_paused` (the evaluator started if it was not: a pause must hold before the
        first candidate can be timed); None in the default mode."""
        return self._open().timing_paused()

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
