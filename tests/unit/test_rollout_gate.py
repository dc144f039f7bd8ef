"""What the evaluator's GPU gate did during a rollout's evaluations (`train.rollout.add_gate_seconds`,
`MultiTurnRollout(gate_states=...)`): readings around each turn's evaluation add up per state in the
batch's seconds and its summary. The rollout runs the real agent environment against a real RL-mode CPU
evaluator (its gate is the one the GPU's RL mode has), with scripted replies for the policy."""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts its OpenMP pool

import pytest

pytest.importorskip("trl")

from test_train_smoke import ANSWER, TASK, ScriptedPolicy, _task_file, rl_config

from cudaperf.agent.evaluation import LocalEvaluator
from cudaperf.anticheat.policy import Policy
from cudaperf.evaluate import EvalConfig, TimingConfig
from cudaperf.train.models import load_policy
from cudaperf.train.monitor import read_metrics
from cudaperf.train.rl import run_rl
from cudaperf.train.rollout import MultiTurnRollout, add_gate_seconds, first_prompt, rollout_stats

STATES = ("free", "shared", "draining", "exclusive")


def test_two_readings_add_their_difference_per_state():
    seconds = {"gate_shared": 1.0}
    add_gate_seconds(seconds, {"free": 1.0, "shared": 2.0}, {"free": 1.5, "shared": 5.0})
    assert seconds == {"gate_free": 0.5, "gate_shared": 4.0}


def test_a_gate_made_during_the_evaluation_counts_from_zero():
    seconds: dict[str, float] = {}
    add_gate_seconds(seconds, None, {"free": 0.25, "exclusive": 1.0})
    assert seconds == {"gate_free": 0.25, "gate_exclusive": 1.0}


def test_no_gate_adds_nothing():
    seconds = {"evaluate": 3.0}
    add_gate_seconds(seconds, None, None)
    assert seconds == {"evaluate": 3.0}


def rl_mode_evaluator() -> LocalEvaluator:
    config = EvalConfig(device="cpu", build_workers=1, seeds=1, policy=Policy(allow_torch_ops=True),
                        timing=TimingConfig(budget_ms=5, warmup_ms=1, baselines=("eager",)))
    return LocalEvaluator(config, mode="rl")


@pytest.fixture(scope="module")
def gated_batch(tmp_path_factory):
    """Two turns (a wrong reply, then a right one) through a real RL-mode CPU evaluator, its gate read."""
    config = rl_config(tmp_path_factory.mktemp("rl"), "tiny", trajectories=1)
    _, tokenizer = load_policy(config)
    with rl_mode_evaluator() as evaluator:
        rollout = MultiTurnRollout(config, [TASK], evaluator, tokenizer, gate_states=evaluator.gate_states,
                                   generator=ScriptedPolicy(tokenizer, [ANSWER.format("-"),
                                                                        ANSWER.format("+")]))
        yield rollout.run([first_prompt(TASK, config)] * config.num_generations, rollout.generator)


def test_the_gates_seconds_fit_inside_the_evaluations(gated_batch):
    gate_s = sum(gated_batch.seconds[f"gate_{state}"] for state in STATES)
    assert 0 < gate_s <= gated_batch.seconds["evaluate"] + 0.05


def test_the_right_reply_was_timed_with_the_gate_exclusive(gated_batch):
    assert gated_batch.records[0][1].correct and gated_batch.seconds["gate_exclusive"] > 0


def test_the_summary_carries_each_gate_state(gated_batch):
    values = rollout_stats(gated_batch).values
    assert {f"gate_{state}_s" for state in STATES} <= set(values)


def test_an_rl_run_records_the_gate_in_each_rollout(tmp_path):
    config = rl_config(tmp_path / "rl", "tiny", tasks=(_task_file(tmp_path),), max_steps=1)
    with rl_mode_evaluator() as evaluator:
        run_rl(config, evaluator=evaluator)
    (rollout,) = read_metrics(config.output_dir, "rollout")
    assert {f"gate_{state}_s" for state in STATES} <= set(rollout)
