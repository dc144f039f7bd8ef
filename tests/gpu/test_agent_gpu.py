"""The refinement loop and environment with CUDA answers actually run: the path the CPU tests can only
build and check statically. Replies are recorded (`replay:`): the example solutions, a broken variant,
and a C task's naive CUDA port; the evaluator is the real one on the GPU (1 seed, short timing budgets)."""

from __future__ import annotations

import pytest

from cudaperf.agent.backends.replay import RecordedReply, ReplayBackend
from cudaperf.agent.environment import EnvConfig, RefineEnv, step_many
from cudaperf.agent.evaluation import LocalEvaluator
from cudaperf.agent.loop import RefineConfig, refine
from cudaperf.agent.taskset import resolve
from cudaperf.agent.trajectory import TrajectoryStore
from cudaperf.evaluate import EvalConfig, TimingConfig
from cudaperf.tasks import load_task
from cudaperf.tasks.ctask import baseline_source
from cudaperf.tasks.examples import example_solutions_dir, example_tasks_dir
from cudaperf.types import Outcome

pytestmark = pytest.mark.gpu

RELU = load_task(example_tasks_dir() / "relu.py")
VECTOR_ADD = load_task(example_tasks_dir() / "vector_add.py")
GOOD_RELU = (example_solutions_dir("fast") / "relu.py").read_text()
GOOD_ADD = (example_solutions_dir("fast") / "vector_add.py").read_text()
WRONG_RELU = GOOD_RELU.replace("x < 0.0f ? 0.0f : x", "x < 0.0f ? 0.0f : x + 1.0f")


@pytest.fixture(scope="module")
def evaluator():
    config = EvalConfig(device="cuda", seeds=1, timing=TimingConfig(budget_ms=20, warmup_ms=5))
    with LocalEvaluator(config) as ev:
        yield ev


def fenced(code: str) -> str:
    return f"Plan.\n```python\n{code}```"


def test_loop_scores_correct_kernels_and_stops_at_the_target(evaluator, tmp_path):
    backend = ReplayBackend([RecordedReply(fenced(GOOD_RELU)), RecordedReply(fenced(GOOD_ADD))])
    config = RefineConfig(turns=3, target_speedup=0.01)
    result = refine([RELU, VECTOR_ADD], backend, evaluator, config, TrajectoryStore(tmp_path / "t.jsonl"))
    assert [len(t.turns) for t in result.trajectories] == [1, 1]  # the target ended both after turn 1
    for t in result.trajectories:
        turn = t.turns[0]
        assert turn.result.outcome is Outcome.CORRECT, turn.result.message
        assert turn.speedup is not None and turn.speedup > 0 and turn.reward > 0 and turn.done
        assert "Timing (median ms" in turn.feedback and "eager" in turn.feedback


def test_wrong_kernel_feedback_names_the_configuration_and_worst_element(evaluator):
    assert WRONG_RELU != GOOD_RELU
    env = RefineEnv(EnvConfig(), evaluator=evaluator)
    env.reset(RELU)
    step = env.step(fenced(WRONG_RELU))
    assert step.record.result.outcome is Outcome.INCORRECT and step.reward == 0.0
    assert "WRONG" in step.feedback and "worst at" in step.feedback and "expected" in step.feedback


def test_many_environments_step_against_one_evaluator(evaluator):
    envs = [RefineEnv(EnvConfig(), evaluator=evaluator, sample=i) for i in range(4)]
    for env, task in zip(envs, [RELU, RELU, VECTOR_ADD, VECTOR_ADD], strict=True):
        env.reset(task)
    steps = step_many(envs, [fenced(GOOD_RELU), fenced(WRONG_RELU), fenced(GOOD_ADD), "no code"], evaluator)
    assert [s.record.result.outcome for s in steps] == [Outcome.CORRECT, Outcome.INCORRECT, Outcome.CORRECT,
                                                        Outcome.INVALID_SOLUTION]


def test_c_task_naive_port_is_correct_against_its_own_baseline(evaluator):
    (task,) = resolve(["split:test"], kinds=["c"], limit=1).tasks
    naive = baseline_source(task)
    env = RefineEnv(EnvConfig(), evaluator=evaluator)
    env.reset(task)
    step = env.step(fenced(naive))
    assert step.record.result.outcome is Outcome.CORRECT, step.record.result.message
    assert step.record.baseline == "naive_cuda" and step.record.speedup == pytest.approx(1.0, rel=0.5)
    assert "serial_c" in step.feedback and "naive_cuda" in step.feedback
