"""Evaluating a turn's answers while the policy still generates (`RlConfig.evaluate_while_generating`,
`MultiTurnRollout(timing_paused=...)`): an answer handed early is checked during the generation, no answer
is timed until the generation is over, and the turn's evaluation time is what it added after the
generation. The real agent environment and a real RL-mode CPU evaluator (its gate is the GPU's RL mode's);
the policy is a scripted double that hands its replies one by one."""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts its OpenMP pool

import time

import pytest

pytest.importorskip("trl")

from test_rollout_gate import rl_mode_evaluator
from test_train_smoke import ANSWER, TASK, rl_config

from cudaperf.agent.evaluation import ReportingEvaluator
from cudaperf.train.models import load_policy
from cudaperf.train.rollout import GeneratedTokens, MultiTurnRollout, first_prompt

WRONG, RIGHT = ANSWER.format("-"), ANSWER.format("+")


def _until(condition, timeout_s: float = 120.0) -> bool:
    end = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > end:
            return False
        time.sleep(0.01)
    return True


class HandingPolicy:
    """One turn: hands a wrong reply, waits for its result, hands a right one, waits until its timed pass
    queues at the gate, and only then ends the generation (a test double for the model only)."""

    def __init__(self, tokenizer, results: dict[str, float], gate) -> None:
        self.tokenizer, self.results, self.gate = tokenizer, results, gate
        self.wrong_result_while_generating = self.timed_pass_queued = False
        self.ended_at = 0.0

    def _reply(self, text: str) -> GeneratedTokens:
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        return GeneratedTokens(tuple(ids), (0.0,) * len(ids), True)

    def generate(self, prompts, max_new_tokens, on_reply=None):
        replies = [self._reply(WRONG), self._reply(RIGHT)]
        on_reply(0, replies[0])
        self.wrong_result_while_generating = _until(lambda: "wrong" in self.results)
        on_reply(1, replies[1])
        self.timed_pass_queued = _until(lambda: self.gate()._writers_waiting > 0)
        time.sleep(0.2)  # a timed pass that could start now would have its result out before the end
        self.ended_at = time.perf_counter()
        return replies


def run_overlapped(config, evaluator):
    """One turn of `HandingPolicy` through `evaluator` (an RL-mode `LocalEvaluator`): the batch, the
    policy, and when each answer's result came out."""
    _, tokenizer = load_policy(config)
    results: dict[str, float] = {}

    def on_result(progress) -> None:
        results["right" if progress.result.outcome.value == "correct" else "wrong"] = time.perf_counter()

    policy = HandingPolicy(tokenizer, results, lambda: evaluator._open()._rl.gate)
    rollout = MultiTurnRollout(config, [TASK], ReportingEvaluator(evaluator, on_result), tokenizer,
                               gate_states=evaluator.gate_states, timing_paused=evaluator.timing_paused,
                               generator=policy)
    batch = rollout.run([first_prompt(TASK, config)] * config.num_generations, policy)
    return batch, policy, results


@pytest.fixture(scope="module")
def overlapped(tmp_path_factory):
    config = rl_config(tmp_path_factory.mktemp("rl"), "tiny", max_turns=1)
    with rl_mode_evaluator() as evaluator:
        return run_overlapped(config, evaluator)


def test_an_answer_handed_early_is_checked_while_the_policy_generates(overlapped):
    _, policy, _ = overlapped
    assert policy.wrong_result_while_generating


def test_no_answer_is_timed_before_the_generation_ends(overlapped):
    batch, policy, results = overlapped
    assert policy.timed_pass_queued and results["right"] > policy.ended_at
    assert [records[0].correct for records in batch.records] == [False, True]


def test_the_gate_was_lent_to_the_generation(overlapped):
    batch, _, _ = overlapped
    assert batch.seconds["gate_paused"] > 0 and batch.seconds["gate_exclusive"] > 0


def test_the_evaluation_time_is_what_it_added_after_the_generation(overlapped):
    batch, _, _ = overlapped
    assert batch.seconds["generate"] + batch.seconds["evaluate"] <= batch.seconds["total"] + 1e-6
    assert batch.seconds["generate"] > 0.2


def test_off_the_answers_are_evaluated_after_the_generation(tmp_path):
    config = rl_config(tmp_path / "rl", "tiny", max_turns=1, evaluate_while_generating=False)
    _, tokenizer = load_policy(config)
    with rl_mode_evaluator() as evaluator:
        handed = []

        class Batch:
            def generate(self, prompts, max_new_tokens, on_reply=None):
                handed.append(on_reply)
                ids = tokenizer(WRONG, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
                return [GeneratedTokens(tuple(ids), (0.0,) * len(ids), True) for _ in prompts]

        rollout = MultiTurnRollout(config, [TASK], evaluator, tokenizer,
                                   timing_paused=evaluator.timing_paused)
        rollout.run([first_prompt(TASK, config)] * config.num_generations, Batch())
    assert handed == [None]  # no reply asked for before the call returns
