"""Each distinct answer evaluated once: `SharedAnswers`, a `CandidateEvaluator` that sends its inner
evaluator one pair per distinct (task, answer) and gives every repeat of that answer the same result.

A sampled policy repeats itself: a refinement turn often sends the last turn's kernel back unchanged,
and a policy that has learned a kernel writes it again for a task it meets again. Evaluating each again
costs the evaluator (the GPU's timing gate above all) a result that differs from the first only by timing
noise, and that noise then ranks copies of one kernel against each other in GRPO's group advantages.
Shared, equal answers get equal results and equal rewards, and the evaluator times each answer once.

Identity: the task id and the answer's exact source text and format (one character apart is another
answer: the source is the program, docstring included, and a program can read its own text). Memory: the
last `remember` distinct answers' results over batches (0: repeats within a batch only). Most repeats are
across batches: a refinement turn that sends the last turn's code back unchanged. A repeat's result is
the evaluated one's with the repeat's solution id, and stage durations `{"shared": 0.0, "total": 0.0}`:
it took no evaluator time, so a run's time accounting counts each evaluation once. A harness error (the
machine's fault, not the answer's) is shared within its batch but not remembered. Batches handed in from
several threads at once share what is known when each starts; an answer new to two of them is evaluated
in both.

What a repeat does not get: a second draw of what an evaluation randomises. The correctness checks run on
the evaluator's fixed seeds, so they would give the repeat the same verdict, but the unseen timing rounds'
inputs and a flaky answer's luck would differ; a flaky answer keeps its first verdict.

Not covered: near-duplicates (answers that differ only in comments or names are evaluated apart); what
an evaluation does (`cudaperf.evaluate`).
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence

from cudaperf.agent.evaluation import CandidateEvaluator, evaluate_arriving
from cudaperf.types import EvalResult, Outcome, Solution, Task

AnswerKey = tuple[str, str, str]
"""(task id, solution format, source): what makes two answers the same answer."""

SHARED_DURATIONS = {"shared": 0.0, "total": 0.0}
"""A repeat's stage durations: no evaluator time of its own."""


def answer_key(task: Task, solution: Solution) -> AnswerKey:
    return task.task_id, solution.format.value, solution.source


def shared_result(result: EvalResult, solution: Solution) -> EvalResult:
    """`result` as a repeat of its answer under `solution`'s id gets it."""
    return dataclasses.replace(result, solution_id=solution.solution_id,
                               stage_durations_s=dict(SHARED_DURATIONS))


class SharedAnswers:
    """A `CandidateEvaluator` that evaluates each distinct answer once (see the module docstring).
    `evaluated` and `shared` count the pairs sent to the inner evaluator and those given a shared result."""

    def __init__(self, inner: CandidateEvaluator, remember: int = 4096):
        if remember < 0:
            raise ValueError(f"SharedAnswers: remember={remember} must be 0 or more answers")
        self.inner, self.remember = inner, remember
        self._known: OrderedDict[AnswerKey, EvalResult] = OrderedDict()
        self._lock = threading.Lock()
        self.evaluated = self.shared = 0

    @property
    def arch(self) -> str:
        return self.inner.arch

    def evaluate_stream(self, pairs: Sequence[tuple[Task, Solution]]) -> Iterator[tuple[int, EvalResult]]:
        return self._evaluate(pairs, lambda sent: self.inner.evaluate_stream(list(sent)))

    def evaluate_arriving(self, pairs: Iterable[tuple[Task, Solution]]) -> Iterator[tuple[int, EvalResult]]:
        """`evaluate_stream` over pairs that arrive over time (`ArrivingEvaluator`): a new answer goes to
        the inner evaluator on arrival; a repeat's shared result comes out with the next result after its
        answer's result is known (at the latest when the batch ends)."""
        return self._evaluate(pairs, lambda sent: evaluate_arriving(self.inner, sent))

    def _evaluate(self, pairs: Iterable[tuple[Task, Solution]],
                  inner: Callable[[Iterable[tuple[Task, Solution]]], Iterator[tuple[int, EvalResult]]]
                  ) -> Iterator[tuple[int, EvalResult]]:
        batch = _Batch(self)
        for k, result in inner(batch.sent(pairs)):
            yield from batch.ready()
            yield from batch.evaluated(k, result)
        yield from batch.ready()

    def _share(self, index: int, result: EvalResult, solution: Solution) -> tuple[int, EvalResult]:
        with self._lock:
            self.shared += 1
        return index, shared_result(result, solution)

    def _recall(self, key: AnswerKey) -> EvalResult | None:
        with self._lock:
            result = self._known.get(key)
            if result is not None:
                self._known.move_to_end(key)
            return result

    def _keep(self, key: AnswerKey, result: EvalResult) -> None:
        if self.remember == 0 or result.outcome is Outcome.HARNESS_ERROR:
            return
        with self._lock:
            self._known[key] = result
            self._known.move_to_end(key)
            while len(self._known) > self.remember:
                self._known.popitem(last=False)

    def activity(self) -> tuple[str, ...]:
        activity = getattr(self.inner, "activity", None)
        return tuple(activity()) if callable(activity) else ()

    def close(self) -> None:
        self.inner.close()


class _Batch:
    """One batch of a `SharedAnswers`: `sent(pairs)` reads the pairs (in the inner evaluator's thread when
    they arrive over time) and yields the new answers for the inner evaluator, keeping each repeat to
    share; `evaluated(k, result)` is the k-th sent answer's result and its repeats' shared results;
    `ready()` the shared results known since the last call. A lock orders the two sides, so a repeat that
    arrives as its answer's result comes back is shared exactly once."""

    def __init__(self, owner: SharedAnswers) -> None:
        self.owner = owner
        self.pairs: list[tuple[Task, Solution]] = []  # by index, as they arrived
        self.origin: list[int] = []  # the index of each pair sent
        self.repeats: dict[AnswerKey, list[int]] = {}  # a sent answer's repeats still waiting for it
        self.results: dict[AnswerKey, EvalResult] = {}  # the batch's answers whose result is known
        self._ready: list[tuple[int, EvalResult]] = []
        self._lock = threading.Lock()

    def sent(self, pairs: Iterable[tuple[Task, Solution]]) -> Iterator[tuple[Task, Solution]]:
        for index, (task, solution) in enumerate(pairs):
            key = answer_key(task, solution)
            with self._lock:
                self.pairs.append((task, solution))
                known = self.results.get(key) or self.owner._recall(key)
                if known is not None:
                    self._ready.append(self.owner._share(index, known, solution))
                    continue
                if key in self.repeats:
                    self.repeats[key].append(index)
                    continue
                self.repeats[key] = []
                self.origin.append(index)
            with self.owner._lock:
                self.owner.evaluated += 1
            yield task, solution

    def evaluated(self, k: int, result: EvalResult) -> list[tuple[int, EvalResult]]:
        with self._lock:
            index = self.origin[k]
            key = answer_key(*self.pairs[index])
            self.results[key] = result
            repeats = self.repeats.pop(key, [])
            solutions = [self.pairs[r][1] for r in repeats]
        self.owner._keep(key, result)
        return [(index, result)] + [self.owner._share(r, result, s) for r, s in zip(repeats, solutions)]

    def ready(self) -> list[tuple[int, EvalResult]]:
        with self._lock:
            ready, self._ready = self._ready, []
        return ready
