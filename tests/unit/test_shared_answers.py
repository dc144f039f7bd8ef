"""`agent.shared_answers.SharedAnswers`: each distinct answer evaluated once, its repeats given the same
result, on the real CPU evaluator (a scripted inner evaluator only for a harness error and the memory's
bound, which the real one cannot be made to show on demand)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cudaperf.agent.environment import EnvConfig, RefineEnv, step_many
from cudaperf.agent.evaluation import evaluate_all
from cudaperf.agent.shared_answers import SHARED_DURATIONS, SharedAnswers
from cudaperf.anticheat.policy import Policy
from cudaperf.tasks import task_from_source
from cudaperf.types import EvalResult, Outcome, Solution, SolutionFormat

sys.path.insert(0, str(Path(__file__).parent))
from test_train_compare import ANSWER, TASK_SOURCE  # noqa: E402

TASK = task_from_source(TASK_SOURCE, "scale_add_shared")  # the comparison tests' task
OTHER_TASK = task_from_source(TASK_SOURCE, "scale_add_other")
RIGHT, WRONG = ANSWER.format("+"), ANSWER.format("-")


class Recording:
    """An evaluator with the pairs it was sent recorded (the real one inside, or a scripted outcome)."""

    def __init__(self, inner=None, outcome: Outcome = Outcome.CORRECT):
        self.inner, self.outcome, self.sent = inner, outcome, []

    @property
    def arch(self):
        return self.inner.arch if self.inner else "sm_90"

    def evaluate_stream(self, pairs):
        self.sent.append([solution.solution_id for _, solution in pairs])
        if self.inner is not None:
            return self.inner.evaluate_stream(pairs)
        return iter([(i, EvalResult(t.task_id, s.solution_id, self.outcome, stage_durations_s={"total": 1.0}))
                     for i, (t, s) in enumerate(pairs)])

    def close(self):
        pass


def _solution(solution_id: str, source: str = "code") -> Solution:
    return Solution(solution_id, source, SolutionFormat.FAST)


def _envs(evaluator, n: int) -> list[RefineEnv]:
    envs = [RefineEnv(EnvConfig(policy=Policy(allow_torch_ops=True)), evaluator=evaluator, sample=k)
            for k in range(n)]
    for env in envs:
        env.reset(TASK)
    return envs


def test_repeats_in_a_batch_are_evaluated_once_and_all_get_the_result(cpu_evaluator):
    recording = Recording(cpu_evaluator)
    shared = SharedAnswers(recording)
    steps = step_many(_envs(shared, 4), [RIGHT, RIGHT, WRONG, RIGHT], shared)
    assert [len(batch) for batch in recording.sent] == [2]
    assert [s.record.result.outcome for s in steps] == [Outcome.CORRECT, Outcome.CORRECT, Outcome.INCORRECT,
                                                        Outcome.CORRECT]
    assert steps[0].reward == steps[1].reward == steps[3].reward  # the same timing, so the same reward
    assert (shared.evaluated, shared.shared) == (2, 2)


def test_a_repeat_keeps_its_own_solution_id_and_reports_no_evaluator_time(cpu_evaluator):
    shared = SharedAnswers(Recording(cpu_evaluator))
    steps = step_many(_envs(shared, 2), [RIGHT, RIGHT], shared)
    first, repeat = (s.record.result for s in steps)
    assert first.solution_id != repeat.solution_id
    assert repeat.stage_durations_s == SHARED_DURATIONS and first.stage_durations_s["total"] > 0
    assert repeat.timings == first.timings


def test_an_answer_seen_in_an_earlier_batch_is_not_evaluated_again(cpu_evaluator):
    recording = Recording(cpu_evaluator)
    shared = SharedAnswers(recording)
    step_many(_envs(shared, 1), [RIGHT], shared)
    steps = step_many(_envs(shared, 1), [RIGHT], shared)
    assert [len(batch) for batch in recording.sent if batch] == [1]  # the second batch sent nothing
    assert steps[0].record.result.outcome is Outcome.CORRECT


def test_without_memory_only_repeats_within_a_batch_are_shared(cpu_evaluator):
    recording = Recording(cpu_evaluator)
    shared = SharedAnswers(recording, remember=0)
    step_many(_envs(shared, 1), [RIGHT], shared)
    step_many(_envs(shared, 2), [RIGHT, RIGHT], shared)
    assert [len(batch) for batch in recording.sent] == [1, 1]


def test_one_character_apart_is_another_answer():
    recording = Recording()
    evaluate_all(SharedAnswers(recording), [(TASK, _solution("a", "code")), (TASK, _solution("b", "code "))])
    assert recording.sent == [["a", "b"]]


def test_the_same_text_for_another_task_is_another_answer():
    recording = Recording()
    evaluate_all(SharedAnswers(recording), [(TASK, _solution("a")), (OTHER_TASK, _solution("b"))])
    assert recording.sent == [["a", "b"]]


def test_a_harness_error_is_shared_in_its_batch_but_not_remembered():
    recording = Recording(outcome=Outcome.HARNESS_ERROR)
    shared = SharedAnswers(recording)
    results = evaluate_all(shared, [(TASK, _solution("a")), (TASK, _solution("b"))])
    assert [r.outcome for r in results] == [Outcome.HARNESS_ERROR] * 2
    evaluate_all(shared, [(TASK, _solution("c"))])
    assert recording.sent == [["a"], ["c"]]


def test_the_memory_keeps_the_last_answers_it_is_sized_for():
    recording = Recording()
    shared = SharedAnswers(recording, remember=1)
    for name, source in [("a", "one"), ("b", "two"), ("c", "one")]:
        evaluate_all(shared, [(TASK, _solution(name, source))])
    assert recording.sent == [["a"], ["b"], ["c"]]  # "one" was pushed out by "two"


def test_a_negative_memory_is_refused():
    with pytest.raises(ValueError, match="remember"):
        SharedAnswers(Recording(), remember=-1)
