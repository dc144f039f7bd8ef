"""RL's rollouts timed against the baselines a reward reads (`RlConfig.timing_baselines='reward'`, the
default), on the GPU through the real evaluator in the RL mode: a C task's candidates each time the naive
CUDA port live and none carries, so no serial C time exists anywhere in their results, and the speedup the
reward reads (against the naive port) is there for both. With 'all', the first correct candidate carries
and times serial C too. Run:
    python3 -m pytest -q -s tests/gpu/test_rl_timing_baselines_gpu.py
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from test_c_session_gpu import _task_and_naive

from cudaperf.evaluate import EvalConfig, Evaluator, RlSettings
from cudaperf.train.config import RlConfig
from cudaperf.train.rl import rollout_timing
from cudaperf.types import Outcome, Solution, SolutionFormat

pytestmark = pytest.mark.gpu


def _evaluate_twice(choice: str, cache_dir: str) -> list:
    task, naive = _task_and_naive("map")
    config = EvalConfig(device="cuda", mode="rl", seeds=1, cache_dir=cache_dir,
                        rl=RlSettings(anchor_copies=False),  # both candidates are the naive port: timed
                        timing=rollout_timing(RlConfig(timing_baselines=choice)))
    with Evaluator(config) as ev:
        results = [ev.evaluate(task, Solution(f"naive-{i}", naive, SolutionFormat.FAST)) for i in range(2)]
    for r in results:
        print(f"\n{choice} {r.solution_id}: {r.outcome.value} baselines={r.environment.get('baselines')} "
              f"speedups={r.speedups}")
    return results


@pytest.fixture(scope="module")
def reward(tmp_path_factory):
    return _evaluate_twice("reward", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(scope="module")
def every(tmp_path_factory):
    return _evaluate_twice("all", str(tmp_path_factory.mktemp("cache")))


def test_under_the_reward_baselines_both_candidates_are_correct_and_time_the_naive_port_live(reward):
    assert [r.outcome for r in reward] == [Outcome.CORRECT] * 2, [r.message for r in reward]
    assert [r.environment.get("baselines") for r in reward] == ["live only"] * 2


def test_under_the_reward_baselines_no_serial_c_time_exists(reward):
    assert all("serial_c" not in t.baselines for r in reward for t in r.timings)
    assert all("serial_c" not in r.speedups for r in reward)


def test_under_the_reward_baselines_the_speedup_the_reward_reads_is_there(reward):
    assert all(r.speedups.get("naive_cuda", 0) > 0 for r in reward)


def test_with_every_baseline_the_first_candidate_carries_serial_c(every):
    first, second = every
    assert first.environment.get("baselines", "").startswith("timed")
    assert all("serial_c" in t.baselines for t in first.timings)
    assert second.speedups.get("serial_c", 0) > 0  # from the carrier's cache
