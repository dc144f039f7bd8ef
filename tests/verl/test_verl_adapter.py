"""The verl adapter against verl 0.9.1's real classes, on CPU: the agent loop built from the example's
registry entry by hydra as verl's AgentLoopWorker builds it, verl's Continuous Token builder, the real
tokenizer machinery, cudaperf's environment and its sandboxed CPU evaluation worker; the estimator through
verl's own `compute_advantage` (legacy and V1 paths); the example configuration composed with verl's schema.

The one test double is the LLM server (`ScriptedServer`): vLLM/SGLang cannot run here. It answers with
scripted token ids (a wrong answer, then a right one), so the per-turn scores are known.
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest

# A submodule: this folder itself would pass for a namespace package named "verl".
pytest.importorskip("verl.experimental.agent_loop.agent_loop")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from hydra.utils import instantiate  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, _agent_loop_registry  # noqa: E402
from verl.protocol import DataProto  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.trainer.ppo.ray_trainer import compute_advantage  # noqa: E402
from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories  # noqa: E402
from verl.utils.dataset.rl_dataset import RLHFDataset  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

import cudaperf.train.verl_adapter.plugin  # noqa: E402,F401  (registers the loop and the estimators)
from cudaperf.agent.backends.tiny import train_tokenizer  # noqa: E402
from cudaperf.tasks import task_from_source  # noqa: E402
from cudaperf.train.reward_functions import VERL_KEYS  # noqa: E402
from cudaperf.train.verl_adapter import evaluators, reward  # noqa: E402
from cudaperf.train.verl_adapter.credit import turn_segments  # noqa: E402
from cudaperf.train.verl_adapter.data import task_rows  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "verl"
TASK = task_from_source('''
import torch
from torch import nn


class Model(nn.Module):
    def forward(self, a, b):
        return a * 2 + b


def get_input_configs():
    return [{"name": "small", "n": 64}]


def get_inputs(n=64):
    return [torch.randn(n), torch.randn(n)]
''', "scale_add")
ANSWER = ("```python\nimport torch\n\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, a, b):\n"
          "        return a * 2 {} b\n```")
WRONG, RIGHT = ANSWER.format("-"), ANSWER.format("+")
EVALUATOR_KWARGS = {"device": "cpu", "mode": "default", "allow_torch_ops": True, "build_workers": 1,
                    "seeds": 1, "timing": {"budget_ms": 5, "warmup_ms": 1, "baselines": ["eager"]}}


class ScriptedServer:
    """Stands in for verl's LLM server client: replies are scripted token ids (see the module docstring)."""

    def __init__(self, tokenizer, replies):
        self.end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.replies = [tokenizer.encode(r, add_special_tokens=False) + [self.end] for r in replies]
        self.prompts = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        self.prompts.append(list(prompt_ids))
        ids = self.replies[len(self.prompts) - 1]
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids), stop_reason="completed")


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer()


@pytest.fixture(scope="module", autouse=True)
def cache_dir(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CUDAPERF_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield
        evaluators.close_shared()


def trainer_config(use_v1=True, response_length=2048):
    return OmegaConf.create({"trainer": {"use_v1": use_v1}, "data": {},
                             "actor_rollout_ref": {"rollout": {"prompt_length": 4096,
                                                               "response_length": response_length}}})


def make_loop(tokenizer, server, use_v1=True, response_length=2048, **entry_changes):
    """As verl's AgentLoopWorker does: the registry entry from the example's file, through hydra."""
    entries = OmegaConf.load(EXAMPLES / "agent_loops.yaml")
    entry = next(e for e in entries if e.name == "cudaperf_refine_local")
    entry = OmegaConf.merge(entry, {"max_turns": 2, "allow_torch_ops": True,
                                    "evaluator_kwargs": EVALUATOR_KWARGS, **entry_changes})
    _agent_loop_registry[entry.name] = entry
    config = trainer_config(use_v1, response_length)
    return instantiate(_agent_loop_registry[entry.name], trainer_config=DictConfigWrap(config=config),
                       server_manager=server, tokenizer=tokenizer, processor=None, dataset_cls=RLHFDataset,
                       data_config=DictConfigWrap(config.data), hf_model_type=None)


def run_trajectory(tokenizer, replies, **loop_kwargs):
    server = ScriptedServer(tokenizer, replies)
    row = task_rows([TASK], split="train")[0]

    async def go():
        loop = make_loop(tokenizer, server, **loop_kwargs)
        return await loop.run({"temperature": 1.0}, raw_prompt=row["prompt"], extra_info=row["extra_info"],
                              session_id=0)

    return asyncio.run(go()), server


@pytest.fixture(scope="module")
def trajectory(tokenizer):
    return run_trajectory(tokenizer, [WRONG, RIGHT])


def test_the_example_registers_the_agent_loop_and_verl_finds_the_estimators():
    assert "cudaperf_refine" in _agent_loop_registry
    assert core_algos.get_adv_estimator_fn("cudaperf_turn").__module__.endswith("verl_adapter.estimator")
    assert core_algos.get_adv_estimator_fn("cudaperf_turn_max") is not None


def test_response_mask_is_one_exactly_on_the_generated_reply_tokens(trajectory):
    output, server = trajectory
    runs = turn_segments(output.response_mask)
    assert [output.response_ids[s:e] for s, e in runs] == server.replies
    assert sum(output.response_mask) == sum(len(r) for r in server.replies)


def test_feedback_tokens_are_masked_and_hold_the_environments_message(trajectory, tokenizer):
    output, _ = trajectory
    (_, end0), (start1, _) = turn_segments(output.response_mask)
    feedback = tokenizer.decode(output.response_ids[end0:start1])
    assert "user" in feedback and len(feedback) > 40  # the user turn with the evaluator's feedback
    assert set(output.response_mask[end0:start1]) == {0}


def test_second_turn_prompt_is_the_first_turns_tokens_continued(trajectory):
    output, server = trajectory
    first, second = server.prompts
    assert second[:len(first) + len(server.replies[0])] == first + server.replies[0]
    assert output.prompt_ids == first


def test_turn_scores_sit_on_the_last_reply_token_and_sum_to_the_reward(trajectory):
    output, _ = trajectory
    rm = output.as_dict()["rm_scores"]
    ends = [e - 1 for _, e in turn_segments(output.response_mask)]
    wrong, right = output.extra_fields["turn_scores"]
    assert rm[ends[0]].item() == pytest.approx(wrong) and rm[ends[1]].item() == pytest.approx(right)
    assert rm.sum().item() == pytest.approx(output.reward_score) and right > wrong
    assert output.extra_fields["reward_extra_info"]["best_correct"] == 1.0
    assert output.extra_fields["reward_extra_info"]["first_correct"] == 0.0


def test_best_so_far_scores_a_broken_second_turn_with_the_correct_first(tokenizer):
    output, _ = run_trajectory(tokenizer, [RIGHT, WRONG], turn_score="best_so_far")
    right, held = output.extra_fields["turn_scores"]
    assert held == pytest.approx(right) and output.extra_fields["reward_extra_info"]["first_correct"] == 1.0
    assert output.reward_score == pytest.approx(2 * right)


def test_the_legacy_trainer_is_refused(tokenizer):
    from hydra.errors import InstantiationException

    with pytest.raises((ValueError, InstantiationException), match="use_v1"):
        make_loop(tokenizer, ScriptedServer(tokenizer, []), use_v1=False)


def test_response_budget_ends_the_trajectory_after_the_first_reply(tokenizer):
    output, server = run_trajectory(tokenizer, [WRONG, RIGHT], response_length=60)
    assert len(server.prompts) == 1 and len(output.response_ids) <= 60
    assert len(output.extra_fields["turn_scores"]) == 1


def padded_batch(outputs, uids):
    """What verl's V1 trainer hands the estimator: rows padded to one response length."""
    dicts = [o.as_dict() for o in outputs]
    length = max(d["responses"].shape[0] for d in dicts)

    def pad(t):
        return torch.nn.functional.pad(t, (0, length - t.shape[0]))

    batch = {"response_mask": torch.stack([pad(d["response_mask"]) for d in dicts]),
             "token_level_rewards": torch.stack([pad(d["rm_scores"]) for d in dicts])}
    return DataProto.from_dict(tensors=batch, non_tensors={"uid": np.array(uids, dtype=object)})


def kevin(scores, gamma):
    return [sum(gamma ** (k - t) * scores[k] for k in range(t, len(scores))) for t in range(len(scores))]


def test_verls_compute_advantage_gives_each_turn_its_group_relative_discounted_return(tokenizer, trajectory):
    first, _ = trajectory
    second, _ = run_trajectory(tokenizer, [RIGHT, WRONG])
    data = padded_batch([first, second], ["task", "task"])
    from verl.trainer.config import AlgoConfig

    config = AlgoConfig(gamma=0.4, adv_estimator="cudaperf_turn")
    out = compute_advantage(data, adv_estimator="cudaperf_turn", gamma=0.4, config=config)
    returns = [kevin(o.extra_fields["turn_scores"], 0.4) for o in (first, second)]
    flat = [g for row in returns for g in row]
    mean, std = float(np.mean(flat)), float(np.std(flat, ddof=1))
    for i, row in enumerate(returns):
        runs = turn_segments(data.batch["response_mask"][i])
        for (start, end), g in zip(runs, row, strict=True):
            assert torch.allclose(out.batch["advantages"][i, start:end],
                                  torch.tensor((g - mean) / (std + 1e-6)), atol=1e-5)
    masked = data.batch["response_mask"] == 0
    assert out.batch["advantages"][masked].abs().sum().item() == 0.0


def test_v1_trainer_path_hands_every_row_to_the_turn_estimator(tokenizer, trajectory):
    first, _ = trajectory
    data = padded_batch([first, first], ["task", "task"])
    from verl.trainer.config import AlgoConfig

    config = AlgoConfig(gamma=0.4, adv_estimator="cudaperf_turn")
    out = compute_advantage_for_multi_trajectories(data, ["task_0_0", "task_1_0"], "cudaperf_turn",
                                                   gamma=0.4, config=config)
    runs = turn_segments(data.batch["response_mask"][0])
    a0, a1 = (out.batch["advantages"][0, s].item() for s, _ in runs)
    g0, g1 = kevin(first.extra_fields["turn_scores"], 0.4)
    assert (a0 > a1) == (g0 > g1) and not math.isclose(a0, a1)


def test_the_reward_function_returns_every_component_and_ranks_right_above_wrong():
    row = task_rows([TASK])[0]
    kwargs = {"evaluator_kwargs": EVALUATOR_KWARGS, "allow_torch_ops": True}
    right = reward.compute_score("cudaperf", RIGHT, TASK.task_id, row["extra_info"], **kwargs)
    wrong = reward.compute_score("cudaperf", WRONG, TASK.task_id, row["extra_info"], **kwargs)
    assert set(right) == set(VERL_KEYS) == set(wrong)
    assert right["correct"] == 1.0 and wrong["correct"] == 0.0 and right["score"] > wrong["score"]


def test_the_example_configuration_composes_with_verls_schema(monkeypatch):
    from hydra import compose, initialize_config_dir

    monkeypatch.setenv("CUDAPERF_POLICY", "/models/sft")
    with initialize_config_dir(config_dir=str(EXAMPLES), version_base=None):
        config = compose(config_name="cudaperf_refine_grpo")
    assert config.algorithm.adv_estimator == "cudaperf_turn" and config.trainer.use_v1
    assert config.actor_rollout_ref.rollout.agent.default_agent_loop == "cudaperf_refine"
    assert config.actor_rollout_ref.rollout.response_length == config.data.max_response_length
    names = [e.name for e in OmegaConf.load(config.actor_rollout_ref.rollout.agent.agent_loop_config_path
                                            .replace("${oc.env:CUDAPERF_ROOT,.}", str(ROOT)))]
    assert "cudaperf_refine" in names
