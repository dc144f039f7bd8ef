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
from collections.abc import Iterator, Sequence

from cudaperf.agent.evaluation import CandidateEvaluator
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
        sent: list[tuple[Task, Solution]] = []
        origin: list[int] = []  # the index in `pairs` of each pair sent
        repeats: dict[AnswerKey, list[int]] = {}
        for index, (task, solution) in enumerate(pairs):
            key = answer_key(task, solution)
            known = self._recall(key)
            if known is not None:
                yield self._share(index, known, solution)
            elif key in repeats:
                repeats[key].append(index)
            else:
                repeats[key] = []
                sent.append((task, solution))
                origin.append(index)
        with self._lock:
            self.evaluated += len(sent)
        for k, result in self.inner.evaluate_stream(sent):
            index = origin[k]
            key = answer_key(*pairs[index])
            self._keep(key, result)
            yield index, result
            for repeat in repeats[key]:
                yield self._share(repeat, result, pairs[repeat][1])

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
