"""The RL environment against the real evaluator: a sandboxed CPU worker for pure-PyTorch answers (the
policy allows torch ops there), and build + static checks (device "none") for CUDA answers."""

from __future__ import annotations

import pickle
from concurrent.futures import ThreadPoolExecutor

import pytest

from cudaperf.agent.backends.base import Generation
from cudaperf.agent.environment import EnvConfig, RefineEnv, step_many
from cudaperf.agent.evaluation import LocalEvaluator
from cudaperf.anticheat.policy import Policy
from cudaperf.evaluate import EvalConfig
from cudaperf.tasks import load_task, task_from_source
from cudaperf.tasks.examples import example_solutions_dir, example_tasks_dir
from cudaperf.types import Outcome

TASK = task_from_source('''
import torch
from torch import nn


class Model(nn.Module):
    def forward(self, a, b):
        return a * 2 + b


def get_input_configs():
    return [{"name": "small", "n": 64}, {"name": "odd", "n": 1001}]


def get_inputs(n=64):
    return [torch.randn(n), torch.randn(n)]
''', "scale_add")
LENIENT = Policy(allow_torch_ops=True)
ANSWER = ("```python\nimport torch\n\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, a, b):\n"
          "        {}\n```")
RIGHT = "Scale then add.\n" + ANSWER.format("return a * 2 + b")
WRONG = ANSWER.format("return a * 2 - b")


@pytest.fixture(scope="module")
def none_evaluator(tmp_path_factory):
    config = EvalConfig(device="none", cache_dir=str(tmp_path_factory.mktemp("cache")), build_workers=1)
    with LocalEvaluator(config) as evaluator:
        yield evaluator


class CountingEvaluator:
    """The real evaluator, with the batches it was given recorded."""

    def __init__(self, inner):
        self.inner, self.batches = inner, []

    @property
    def arch(self):
        return self.inner.arch

    def evaluate_stream(self, pairs):
        self.batches.append(len(pairs))
        return self.inner.evaluate_stream(pairs)

    def close(self):
        pass


def _env(evaluator, **config) -> RefineEnv:
    env = RefineEnv(EnvConfig(policy=LENIENT, **config), evaluator=evaluator)
    env.reset(TASK)
    return env


def test_reset_returns_plain_chat_messages(cpu_evaluator):
    messages = RefineEnv(EnvConfig(policy=LENIENT)).reset(TASK)
    assert [m["role"] for m in messages] == ["system", "user"] and "a * 2 + b" in messages[1]["content"]


def test_wrong_answer_gets_no_reward_and_feedback_naming_the_configuration(cpu_evaluator):
    feedback, reward, done, record = _env(cpu_evaluator).step(WRONG)
    assert (record.result.outcome, reward, done) == (Outcome.INCORRECT, 0.0, False)
    assert "`small` WRONG" in feedback and "worst at" in feedback and "Fix the problem" in feedback


def test_correct_answer_is_paid_and_told_its_speedup(cpu_evaluator):
    step = _env(cpu_evaluator).step(RIGHT)
    assert step.record.result.outcome is Outcome.CORRECT and step.reward > 0.0
    assert step.record.speedup is not None and "eager" in step.feedback and "faster" in step.feedback


def test_target_speedup_ends_the_trajectory_early(cpu_evaluator):
    env = _env(cpu_evaluator, max_turns=4, target_speedup=1e-6)
    assert env.step(RIGHT).done and env.done


def test_last_turn_ends_the_trajectory(cpu_evaluator):
    env = _env(cpu_evaluator, max_turns=2)
    assert [env.step("no code").done for _ in range(2)] == [False, True]
    with pytest.raises(RuntimeError, match="over"):
        env.step(RIGHT)


def test_reply_without_code_is_not_sent_to_the_evaluator(cpu_evaluator):
    counting = CountingEvaluator(cpu_evaluator)
    step = _env(counting).step("I would use shared memory.")
    assert counting.batches == [] and step.record.result.stage == "extract"
    assert step.record.result.outcome is Outcome.INVALID_SOLUTION and step.reward == 0.0


def test_backend_failure_is_not_charged_to_the_model(cpu_evaluator):
    step = _env(cpu_evaluator).step(Generation("", 10, 0, "error", 0.1, error="connection refused"))
    result = step.record.result
    assert result.outcome is Outcome.HARNESS_ERROR and "connection refused" in result.message
    assert step.record.reward_breakdown.details["applicable"] == 0.0


def test_step_many_sends_every_candidate_in_one_batch(cpu_evaluator):
    counting = CountingEvaluator(cpu_evaluator)
    envs = [_env(counting) for _ in range(3)]
    steps = step_many(envs, [RIGHT, WRONG, "no code"], counting)
    assert counting.batches == [2]
    assert [s.record.result.outcome for s in steps] == [Outcome.CORRECT, Outcome.INCORRECT,
                                                        Outcome.INVALID_SOLUTION]


def test_environment_pickles_mid_trajectory_with_the_same_next_prompt(cpu_evaluator):
    env = _env(cpu_evaluator)
    env.step(WRONG)
    copy = pickle.loads(pickle.dumps(env))
    assert copy.evaluator is None and copy.prompt_messages() == env.prompt_messages()
    copy.attach(evaluator=cpu_evaluator)
    assert copy.step(RIGHT).record.turn == 1


def test_next_prompt_carries_the_feedback_and_the_earlier_code(cpu_evaluator):
    env = _env(cpu_evaluator)
    step = env.step(WRONG)
    messages = env.prompt_messages()
    assert messages[-1]["content"] == step.feedback and "a * 2 - b" in messages[-2]["content"]


def test_ranker_score_is_averaged_over_configurations_into_the_reward(cpu_evaluator):
    seen = []
    scores = [0.1 * (i + 1) for i in range(len(TASK.configs))]

    def ranker(source, task, config):
        seen.append(config.name)
        return scores[len(seen) - 1]

    env = RefineEnv(EnvConfig(policy=LENIENT), evaluator=cpu_evaluator, ranker=ranker)
    env.reset(TASK)
    step = env.step(RIGHT)
    mean = sum(scores) / len(scores)
    assert seen == [c.name for c in TASK.configs] and step.record.ranker_score == pytest.approx(mean)
    assert step.record.reward_breakdown.ranker_term > 0 and f"rates this kernel {mean:.2f}" in step.feedback


def test_a_failing_ranker_only_loses_its_score(cpu_evaluator):
    def ranker(source, task, config):
        raise RuntimeError("model file missing")

    env = RefineEnv(EnvConfig(policy=LENIENT), evaluator=cpu_evaluator, ranker=ranker)
    env.reset(TASK)
    step = env.step(RIGHT)
    assert step.record.ranker_score is None and step.record.result.outcome is Outcome.CORRECT


def test_prompt_length_is_recorded_per_turn(cpu_evaluator):
    env = _env(cpu_evaluator)
    first = env.step("no code").record.prompt_tokens
    second = env.step("no code").record.prompt_tokens
    assert 0 < first < second


def test_environments_in_several_threads_share_one_evaluator(none_evaluator):
    reply = f"```python\n{(example_solutions_dir('fast') / 'relu.py').read_text()}```"
    envs = [RefineEnv(EnvConfig(), evaluator=none_evaluator, sample=i) for i in range(4)]
    for env in envs:
        env.reset(load_task(example_tasks_dir() / "relu.py"))
    with ThreadPoolExecutor(4) as pool:
        steps = list(pool.map(lambda env: env.step(reply), envs))
    assert [s.record.sample for s in steps] == [0, 1, 2, 3]
    assert {s.record.result.outcome for s in steps} == {Outcome.SKIPPED}


def test_local_evaluator_pickles_as_its_configuration():
    config = EvalConfig(device="none", seeds=2)
    copy = pickle.loads(pickle.dumps(LocalEvaluator(config)))
    assert copy.config == config and copy._evaluator is None  # nothing started, nothing carried


def test_step_results_are_plain_picklable_data(none_evaluator):
    env = RefineEnv(EnvConfig(), evaluator=none_evaluator)
    env.reset(load_task(example_tasks_dir() / "relu.py"))
    step = env.step("no code here")
    assert pickle.loads(pickle.dumps(step)) == step


def test_compile_error_feedback_points_at_the_line_of_the_answer(none_evaluator):
    good = (example_solutions_dir("fast") / "relu.py").read_text()
    broken = good.replace("relu1(v.x)", "relu1(v.q)")
    env = RefineEnv(EnvConfig(), evaluator=none_evaluator)
    env.reset(load_task(example_tasks_dir() / "relu.py"))
    step = env.step(f"```python\n{broken}```")
    line = next(i for i, text in enumerate(broken.splitlines(), 1) if "relu1(v.q)" in text)
    assert step.record.result.outcome is Outcome.COMPILE_ERROR
    assert f'line {line} of your answer: error: class "float4" has no member "q"' in step.feedback


def test_unrun_cuda_answer_is_built_and_not_scored(none_evaluator):
    env = RefineEnv(EnvConfig(), evaluator=none_evaluator)
    env.reset(load_task(example_tasks_dir() / "relu.py"))
    step = env.step(f"```python\n{(example_solutions_dir('fast') / 'relu.py').read_text()}```")
    assert step.record.result.outcome is Outcome.SKIPPED and step.record.result.build.ok
    assert "Reward: none" in step.feedback


def _relu_env(evaluator, **config) -> RefineEnv:
    env = RefineEnv(EnvConfig(**config), evaluator=evaluator)
    env.reset(load_task(example_tasks_dir() / "relu.py"))
    return env


def test_an_answer_in_the_other_format_is_told_so_and_not_evaluated(none_evaluator):
    counting = CountingEvaluator(none_evaluator)
    inline = (example_solutions_dir("inline") / "relu.py").read_text()
    step = _relu_env(counting).step(f"```python\n{inline}```")
    assert counting.batches == [] and step.record.result.stage == "extract"
    assert step.record.result.outcome is Outcome.INVALID_SOLUTION and step.reward == 0.0
    assert step.record.extraction == "wrong_format" and "asks for the fast format" in step.feedback


def test_an_answer_in_the_other_format_is_evaluated_when_accepted(none_evaluator):
    inline = (example_solutions_dir("inline") / "relu.py").read_text()
    step = _relu_env(none_evaluator, accept_other_format=True).step(f"```python\n{inline}```")
    assert step.record.extraction == "found" and step.record.result.stage != "extract"


def test_a_fast_answer_to_the_inline_format_is_told_so(none_evaluator):
    fast = (example_solutions_dir("fast") / "relu.py").read_text()
    step = _relu_env(none_evaluator, format="inline").step(f"```python\n{fast}```")
    assert step.record.extraction == "wrong_format" and "asks for the load_inline format" in step.feedback


def test_two_answers_under_one_id_get_their_own_results(cpu_evaluator):
    from cudaperf.agent.evaluation import evaluate_all
    from cudaperf.solutions import solution_from_text

    def code(reply: str) -> str:
        return reply.split("```python\n", 1)[1].rsplit("```", 1)[0]

    right = solution_from_text(code(RIGHT), "same")
    broken = solution_from_text("class ModelNew(:\n", "same")  # refused before any worker: it finishes first
    results = evaluate_all(cpu_evaluator, [(TASK, right), (TASK, broken)])
    assert [r.outcome for r in results] == [Outcome.CORRECT, Outcome.SYNTAX_ERROR]
    assert {r.solution_id for r in results} == {"same"}
