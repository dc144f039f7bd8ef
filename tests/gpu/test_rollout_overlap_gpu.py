"""Evaluating a turn's answers while the policy generates (`RlConfig.evaluate_while_generating`) through
the real evaluator's RL mode on the GPU: an answer handed early is checked during the generation, a right
one is timed only after the generation has ended (the gate lent to it, `GpuGate.paused`), and the gate's
paused and exclusive seconds are both there. The CPU twin is `tests/unit/test_rollout_overlap.py`, whose
scripted policy this uses. Run:
    python3 -m pytest -q -s tests/gpu/test_rollout_overlap_gpu.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

sys.path.insert(0, str(Path(__file__).parents[1] / "unit"))

from test_rollout_overlap import run_overlapped  # noqa: E402 - the CPU twin's turn, on the path above
from test_train_smoke import rl_config  # noqa: E402

from cudaperf.agent.evaluation import LocalEvaluator  # noqa: E402
from cudaperf.anticheat.policy import Policy  # noqa: E402
from cudaperf.evaluate import EvalConfig, TimingConfig  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def overlapped(tmp_path_factory):
    config = rl_config(tmp_path_factory.mktemp("rl"), "tiny", max_turns=1, eval_device="cuda")
    eval_config = EvalConfig(device="cuda", seeds=1, policy=Policy(allow_torch_ops=True),
                             cache_dir=str(tmp_path_factory.mktemp("cache")),
                             timing=TimingConfig(budget_ms=20, warmup_ms=2, baselines=("eager",)))
    with LocalEvaluator(eval_config, mode="rl") as evaluator:
        batch, policy, results = run_overlapped(config, evaluator)
    print(f"\nseconds: {batch.seconds}")
    return batch, policy, results


def test_an_answer_handed_early_is_checked_on_the_gpu_while_the_policy_generates(overlapped):
    _, policy, _ = overlapped
    assert policy.wrong_result_while_generating


def test_no_answer_is_timed_on_the_gpu_before_the_generation_ends(overlapped):
    batch, policy, results = overlapped
    assert policy.timed_pass_queued and results["right"] > policy.ended_at
    assert [records[0].correct for records in batch.records] == [False, True]
    assert batch.records[1][0].speedup and batch.records[1][0].speedup > 0


def test_the_gate_was_lent_then_timed(overlapped):
    batch, _, _ = overlapped
    assert batch.seconds["gate_paused"] > 0 and batch.seconds["gate_exclusive"] > 0
