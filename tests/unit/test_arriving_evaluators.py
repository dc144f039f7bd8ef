"""Batches whose answers arrive over time through the agent's evaluator stack (`evaluate_arriving`:
`ReportingEvaluator` over `SharedAnswers` over the real CPU `LocalEvaluator`), as the RL rollout hands
them while the policy still generates: a result comes out before the last answer arrives, a repeat that
arrives later is shared rather than evaluated again, progress counts the answers arrived so far, and an
evaluator without the method gets the batch once it has ended."""

from __future__ import annotations

import queue
import sys
from pathlib import Path

from cudaperf.agent.evaluation import ReportingEvaluator, evaluate_arriving
from cudaperf.agent.shared_answers import SharedAnswers
from cudaperf.solutions import solution_from_text
from cudaperf.tasks import task_from_source
from cudaperf.types import Outcome

sys.path.insert(0, str(Path(__file__).parent))
from test_train_compare import ANSWER, TASK_SOURCE  # noqa: E402

TASK = task_from_source(TASK_SOURCE, "scale_add_arriving")
RIGHT, WRONG = ANSWER.format("+"), ANSWER.format("-")


def _arriving(feed: queue.Queue):
    while (pair := feed.get(timeout=60)) is not None:
        yield pair


def _pair(text: str, solution_id: str):
    return TASK, solution_from_text(text.split("```python\n")[1].split("```")[0], solution_id)


def _first_then(evaluator, first, then):
    """`first` handed alone, its result taken, then `then` handed and the batch ended: (the first
    result, the rest)."""
    feed: queue.Queue = queue.Queue()
    feed.put(first)
    results = evaluate_arriving(evaluator, _arriving(feed))
    got = next(results)
    feed.put(then)
    feed.put(None)
    return got, list(results)


def test_a_result_comes_out_before_the_last_answer_arrives(cpu_evaluator):
    first, rest = _first_then(SharedAnswers(cpu_evaluator), _pair(RIGHT, "a"), _pair(WRONG, "b"))
    assert first[0] == 0 and first[1].outcome is Outcome.CORRECT
    assert [(i, r.solution_id) for i, r in rest] == [(1, "b")]


def test_a_repeat_arriving_after_its_answer_is_shared_not_evaluated_again(cpu_evaluator):
    shared = SharedAnswers(cpu_evaluator, remember=0)  # within the batch only
    _, rest = _first_then(shared, _pair(RIGHT, "a"), _pair(RIGHT, "again"))
    assert (shared.evaluated, shared.shared) == (1, 1)
    assert [(i, r.solution_id, r.outcome) for i, r in rest] == [(1, "again", Outcome.CORRECT)]


def test_progress_counts_the_answers_arrived_so_far(cpu_evaluator):
    lines = []
    reporting = ReportingEvaluator(cpu_evaluator, on_result=lambda p: lines.append((p.done, p.total)))
    _first_then(reporting, _pair(RIGHT, "a"), _pair(WRONG, "b"))
    assert lines == [(1, 1), (2, 2)]


class _BatchOnly:
    """An evaluator with `evaluate_stream` only: what it was handed, and when."""

    arch = "sm_90"

    def __init__(self) -> None:
        self.handed: list[list[str]] = []

    def evaluate_stream(self, pairs):
        self.handed.append([s.solution_id for _, s in pairs])
        return iter([])

    def close(self) -> None:
        pass


def test_an_evaluator_without_the_method_gets_the_batch_once_it_has_ended():
    inner = _BatchOnly()
    list(evaluate_arriving(inner, iter([_pair(RIGHT, "a"), _pair(WRONG, "b")])))
    assert inner.handed == [["a", "b"]]
