"""`RlConfig.timing_baselines`: the rollouts' timing names the baselines a reward reads, so a C task's
candidates time the naive CUDA port live and none carries (no serial C timing), while a PyTorch task keeps
its torch.compile carrier; 'all' keeps serial C. Through `train.rl.rollout_timing` and the RL mode's real
`BaselineCache` (its pure part; the timing itself runs on a GPU: `benchmarks/eval_modes.py --baselines`)."""

from __future__ import annotations

from cudaperf.eval_modes import BaselineCache, RlSettings
from cudaperf.train.config import RlConfig
from cudaperf.train.rl import rollout_timing
from cudaperf.types import InputConfig, Task, TaskKind

C_TASK = Task("c", TaskKind.C, "", (InputConfig("n"),))
TORCH_TASK = Task("t", TaskKind.PYTORCH, "class Model: pass", (InputConfig("small"),))


def _plan(task: Task, choice: str):
    return BaselineCache(RlSettings()).plan(task, rollout_timing(RlConfig(timing_baselines=choice)))


def test_under_the_reward_baselines_a_c_candidate_times_the_naive_port_live_and_carries_nothing():
    plan = _plan(C_TASK, "reward")
    assert (plan.carrier, plan.why, plan.timing.baselines) == (False, "live only", ("naive_cuda",))


def test_under_the_reward_baselines_a_pytorch_task_still_has_a_carrier_for_torch_compile():
    plan = _plan(TORCH_TASK, "reward")
    assert plan.carrier and plan.why == "first"


def test_every_baseline_makes_a_c_tasks_first_candidate_a_carrier():
    plan = _plan(C_TASK, "all")
    assert plan.carrier and plan.why == "first"


def test_the_reward_baselines_keep_the_configured_budget():
    assert rollout_timing(RlConfig(timing_baselines="reward", timing_budget_ms=20.0)).budget_ms == 20.0
