"""CPU smoke test of the training pipeline, SFT -> RL, with a tiny random Llama (a tokenizer trained locally)
and the real trainers (TRL's SFTTrainer and GRPOTrainer), the real agent environment and the sandboxed CPU
evaluation worker (pure-PyTorch answers allowed: kernels cannot run on this machine).

The tiny policy writes noise, so the RL steps here exercise the plumbing (rollouts, masks, rewards,
checkpoints, metrics), not learning; the credit test drives the real environment and evaluator with a
scripted policy (a wrong answer, then a right one) to check the per-turn returns on known outcomes.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts its OpenMP pool

import pytest

pytest.importorskip("trl")
pytest.importorskip("peft")

import torch

from cudaperf.agent.extract import extract_code
from cudaperf.agent.prompting import render_task_prompt
from cudaperf.agent.taskset import task_from_generated
from cudaperf.tasks import task_from_source
from cudaperf.train.config import CONFIG_FILE, RlConfig, SftConfig, load_config
from cudaperf.train.models import between_turns_ids, load_policy
from cudaperf.train.monitor import read_batches, read_metrics
from cudaperf.train.rl import run_rl
from cudaperf.train.rollout import GeneratedTokens, ModelGenerator, MultiTurnRollout, first_prompt
from cudaperf.train.sft import run_sft
from cudaperf.train.sft_data import IGNORE, answer_text

torch.set_num_threads(1)

TASK_SOURCE = '''
import torch
from torch import nn


class Model(nn.Module):
    def forward(self, a, b):
        return a * 2 + b


def get_input_configs():
    return [{"name": "small", "n": 64}, {"name": "odd", "n": 1001}]


def get_inputs(n=64):
    return [torch.randn(n), torch.randn(n)]
'''
TASK = task_from_source(TASK_SOURCE, "scale_add")
ANSWER = ("```python\nimport torch\n\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, a, b):\n"
          "        return a * 2 {} b\n```")


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory):
    """Eight steps on a memorisable set: the naive ports of two C tasks, both in every batch."""
    out = tmp_path_factory.mktemp("sft")
    config = SftConfig(model="tiny", output_dir=str(out), kinds=("c",), limit_tasks=2, val_limit_tasks=1,
                       strategies=("naive",), max_steps=8, batch_size=2, learning_rate=5e-3,
                       warmup_ratio=0.0, save_steps=4, eval_steps=4, logging_steps=1, device="cpu")
    return config, run_sft(config)



def rl_config(out, model, **changes) -> RlConfig:
    values = dict(model=model, output_dir=str(out), tasks=("examples",), trajectories=2, max_turns=2,
                  tasks_per_step=1, max_new_tokens=12, max_steps=2, save_steps=1, eval_device="cpu",
                  allow_torch_ops=True, device="cpu", learning_rate=1e-3)
    return RlConfig(**{**values, **changes})


# -- SFT ------------------------------------------------------------------------------------------------


def test_sft_loss_is_finite_and_decreases_on_a_memorisable_set(sft_run):
    config, report = sft_run
    losses = [r["loss"] for r in read_metrics(config.output_dir, "train") if "loss" in r]
    assert len(losses) == 8 and all(math.isfinite(x) for x in losses)
    assert sum(losses[-2:]) < 0.85 * sum(losses[:2]), losses


def test_sft_learns_only_the_answer_which_the_agent_extracts(sft_run):
    config, _ = sft_run
    from cudaperf.datasets import registry
    from cudaperf.train.sft_data import build_examples, split_tasks

    _, tokenizer = load_policy(config)
    task = split_tasks(config)["train"][0]
    (example,), _ = build_examples([task], tokenizer, config)
    prompt = example.prompt_tokens
    assert set(example.labels[:prompt]) == {IGNORE} and IGNORE not in example.labels[prompt:]
    answer = tokenizer.decode(list(example.labels[prompt:]), skip_special_tokens=True)
    naive = next(i for i in registry.implementations(task) if i.strategy == "naive")
    assert answer == answer_text(naive.source)
    prompt_of_task = render_task_prompt(task_from_generated(task))
    extracted = extract_code(answer, prompt_of_task.entry, prompt_of_task.entry_kind)
    assert extracted.code.strip() == naive.source.strip()


def test_sft_checkpoints_hold_the_configuration(sft_run):
    config, report = sft_run
    for step in (4, 8):
        assert load_config(os.path.join(config.output_dir, f"checkpoint-{step}")) == config
    assert os.path.isfile(os.path.join(report.final_dir, CONFIG_FILE))
    assert report.train_lengths.count == 2 and report.eval_loss is not None


def test_resume_from_a_checkpoint_gives_the_same_next_batches(sft_run, tmp_path):
    config, _ = sft_run
    copy = tmp_path / "resumed"
    shutil.copytree(config.output_dir, copy, ignore=shutil.ignore_patterns("checkpoint-8", "final"))
    lines = (copy / "batches.jsonl").read_text().splitlines()
    (copy / "batches.jsonl").write_text("".join(f"{x}\n" for x in lines if json.loads(x)["step"] <= 4))
    report = run_sft(dataclasses.replace(config, output_dir=str(copy)))
    assert report.resumed_from == str(copy / "checkpoint-4")
    original, resumed = read_batches(config.output_dir), read_batches(copy)
    assert [b["step"] for b in resumed[4:]] == [5, 6, 7, 8]
    assert [b["hash"] for b in resumed[4:]] == [b["hash"] for b in original[4:]]


def _learning_rates(directory) -> dict[int, float]:
    return {r["step"]: r["learning_rate"] for r in read_metrics(directory, "train") if "learning_rate" in r}


def test_a_step_stop_cuts_the_run_and_leaves_its_schedule(sft_run, tmp_path):
    config, _ = sft_run
    report = run_sft(dataclasses.replace(config, output_dir=str(tmp_path / "cut"), stop_at_step=2))
    assert (report.steps, report.finished) == (2, False) and (tmp_path / "cut" / "checkpoint-2").is_dir()
    cut, whole = _learning_rates(tmp_path / "cut"), _learning_rates(config.output_dir)
    assert sorted(cut) == [1, 2] and all(math.isclose(cut[k], whole[k]) for k in cut)


def test_a_run_started_again_at_its_step_stop_trains_no_further(sft_run, tmp_path):
    config, _ = sft_run
    cut = dataclasses.replace(config, output_dir=str(tmp_path / "cut"), stop_at_step=2)
    run_sft(cut)
    again = run_sft(cut)
    assert (again.steps, again.finished) == (2, False) and not (tmp_path / "cut" / "checkpoint-3").exists()


# -- RL -------------------------------------------------------------------------------------------------


def test_rl_from_the_sft_model_logs_rewards_and_checkpoints(sft_run, cpu_evaluator, tmp_path):
    _, sft_report = sft_run
    config = rl_config(tmp_path / "rl", sft_report.final_dir, tasks=(_task_file(tmp_path),))
    report = run_rl(config, evaluator=cpu_evaluator)
    assert report.steps == 2
    train = [r for r in read_metrics(config.output_dir, "train") if "loss" in r]
    assert len(train) == 2 and all(math.isfinite(r["loss"]) for r in train)
    assert {"reward/gate", "reward/speedup_term", "rewards/cudaperf_turn_return/mean"} <= set(train[0])
    rollout = read_metrics(config.output_dir, "rollout")
    assert [r["step"] for r in rollout] == [1, 2] and rollout[0]["turns"] == 4
    for key in ("correct_rate", "speedup_geomean", "hack_rate", "completion_tokens_per_turn", "generate_s",
                "evaluate_s"):
        assert key in rollout[0]
    assert load_config(tmp_path / "rl" / "checkpoint-2") == config


@pytest.mark.parametrize("sampling", [{"generation_cache": "static"}, {"generation_weights": "bfloat16"},
                                      {"generation_cache": "graph", "generation_weights": "bfloat16"}],
                         ids=["static cache", "bfloat16 copy", "graph step"])
def test_rl_trains_with_rollouts_sampled_in_each_other_form(sft_run, cpu_evaluator, tmp_path, sampling):
    _, sft_report = sft_run
    config = rl_config(tmp_path / "rl", sft_report.final_dir, tasks=(_task_file(tmp_path),), **sampling)
    assert run_rl(config, evaluator=cpu_evaluator).steps == 2
    train = [r for r in read_metrics(config.output_dir, "train") if "loss" in r]
    assert len(train) == 2 and all(math.isfinite(r["loss"]) for r in train)


def test_each_rollout_batch_serves_num_iterations_optimiser_steps(sft_run, cpu_evaluator, tmp_path):
    _, sft_report = sft_run
    config = rl_config(tmp_path / "rl", sft_report.final_dir, tasks=(_task_file(tmp_path),), max_steps=4,
                       save_steps=2, num_iterations=2)
    assert run_rl(config, evaluator=cpu_evaluator).steps == 4
    assert [r["step"] for r in read_metrics(config.output_dir, "rollout")] == [1, 3]
    assert len([r for r in read_metrics(config.output_dir, "train") if "loss" in r]) == 4


def test_a_nan_gradient_in_grpo_skips_its_step_and_the_run_ends_with_finite_weights(sft_run, cpu_evaluator,
                                                                                    tmp_path, monkeypatch):
    import cudaperf.train.rl as rl
    from cudaperf.train.finite_guard import GUARD_RECORD, weights_finite

    real_load = rl.load_policy
    backwards = []

    def poisoned_load(config):  # the policy, with a NaN gradient in its first backward pass
        model, tokenizer = real_load(config)
        model.model.norm.weight.register_hook(
            lambda grad: (backwards.append(1), grad * float("nan") if len(backwards) == 1 else grad)[1])
        return model, tokenizer

    monkeypatch.setattr(rl, "load_policy", poisoned_load)
    _, sft_report = sft_run
    config = rl_config(tmp_path / "rl", sft_report.final_dir, tasks=(_task_file(tmp_path),))
    report = run_rl(config, evaluator=cpu_evaluator)
    assert report.finished and weights_finite(report.final_dir)
    assert [r["step"] for r in read_metrics(config.output_dir, GUARD_RECORD)] == [1]


def _task_file(tmp_path) -> str:
    path = tmp_path / "scale_add.py"
    path.write_text(TASK_SOURCE)
    return str(path)


class ScriptedPolicy:
    """Replies by turn: the first wrong, the second right (a test double for the model only)."""

    def __init__(self, tokenizer, replies):
        self.tokenizer, self.replies, self.turn = tokenizer, replies, 0

    def generate(self, prompts, max_new_tokens, on_reply=None):
        text = self.replies[self.turn]
        self.turn += 1
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        replies = [GeneratedTokens(tuple(ids), (0.0,) * len(ids), True) for _ in prompts]
        for i, reply in enumerate(replies if on_reply is not None else ()):
            on_reply(i, reply)
        return replies


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    config = rl_config(tmp_path_factory.mktemp("tiny"), "tiny")
    return load_policy(config)


def test_turn_credit_rewards_each_turn_with_its_discounted_return(tiny, cpu_evaluator, tmp_path):
    _, tokenizer = tiny
    config = rl_config(tmp_path, "tiny", trajectories=1, gamma=0.4)
    rollout = MultiTurnRollout(config, [TASK], cpu_evaluator, tokenizer,
                               generator=ScriptedPolicy(tokenizer, [ANSWER.format("-"), ANSWER.format("+")]))
    batch = rollout.run([first_prompt(TASK, config)] * config.num_generations, rollout.generator)
    (wrong, right), = batch.records
    assert not wrong.correct and right.correct and right.reward > wrong.reward
    assert batch.columns["turn_return"] == pytest.approx([wrong.reward + 0.4 * right.reward, right.reward])
    assert batch.env_mask == [[1] * len(c) for c in batch.completion_ids]


def test_best_so_far_credit_scores_a_broken_refinement_with_the_correct_turn_before_it(tiny, cpu_evaluator,
                                                                                      tmp_path):
    _, tokenizer = tiny
    config = rl_config(tmp_path, "tiny", trajectories=1, gamma=0.4, turn_score="best_so_far")
    rollout = MultiTurnRollout(config, [TASK], cpu_evaluator, tokenizer,
                               generator=ScriptedPolicy(tokenizer, [ANSWER.format("+"), ANSWER.format("-")]))
    batch = rollout.run([first_prompt(TASK, config)] * config.num_generations, rollout.generator)
    (right, wrong), = batch.records
    assert right.correct and not wrong.correct
    assert batch.columns["turn_return"] == pytest.approx([1.4 * right.reward, right.reward])


def test_each_turn_of_a_rollout_is_reported_as_it_ends(tiny, cpu_evaluator, tmp_path):
    _, tokenizer = tiny
    config = rl_config(tmp_path, "tiny", trajectories=1)
    turns = []
    rollout = MultiTurnRollout(config, [TASK], cpu_evaluator, tokenizer, on_turn=turns.append,
                               generator=ScriptedPolicy(tokenizer, [ANSWER.format("-"), ANSWER.format("+")]))
    rollout.run([first_prompt(TASK, config)] * config.num_generations, rollout.generator)
    assert [(t.turn, t.replies, t.outcomes) for t in turns] == [(0, 1, {"incorrect": 1}),
                                                                 (1, 1, {"correct": 1})]
    assert "rollout turn 2: 1 replies" in turns[1].line()


def test_env_mask_is_zero_exactly_on_the_feedback_tokens(tiny, cpu_evaluator, tmp_path):
    model, tokenizer = tiny
    config = rl_config(tmp_path, "tiny", credit="trajectory", trajectories=2, max_new_tokens=10)
    generator = ModelGenerator(model, tokenizer, temperature=1.0, top_p=1.0)
    rollout = MultiTurnRollout(config, [TASK], cpu_evaluator, tokenizer)
    batch = rollout.run([first_prompt(TASK, config)] * 2, generator)
    for completion, mask, records in zip(batch.completion_ids, batch.env_mask, batch.records, strict=True):
        assert len(completion) == len(mask)
        runs = _runs(completion, mask)
        assert [bit for bit, _ in runs] == [1, 0, 1]  # reply, feedback, reply
        first_reply, feedback, _ = (ids for _, ids in runs)
        ended = first_reply[-1] == tokenizer.eos_token_id
        assert feedback == between_turns_ids(tokenizer, records[0].feedback, ended)
        assert records[0].feedback.strip() in tokenizer.decode(feedback)


def _runs(ids, mask):
    runs: list[tuple[int, list[int]]] = []
    for token, bit in zip(ids, mask, strict=True):
        if runs and runs[-1][0] == bit:
            runs[-1][1].append(token)
        else:
            runs.append((bit, [token]))
    return runs


def test_sampling_logprobs_match_the_policy_forward_pass(tiny):
    model, tokenizer = tiny
    prompt = tokenizer("__global__ void k(float* x)", add_special_tokens=False)["input_ids"]
    (reply,) = ModelGenerator(model, tokenizer, temperature=1.0, top_p=1.0).generate([prompt], 8)
    ids = torch.tensor([prompt + list(reply.ids)])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1:-1]
    expected = torch.log_softmax(logits, -1).gather(1, torch.tensor(reply.ids)[:, None]).squeeze(1)
    assert torch.allclose(torch.tensor(reply.logprobs), expected, atol=1e-4)


def test_a_static_cache_samples_what_the_dynamic_one_does(tiny):
    model, tokenizer = tiny
    prompts = [tokenizer(text, add_special_tokens=False)["input_ids"]
               for text in ("__global__ void k(float* x)", "int main() { return 0; }")]
    replies = {}
    for cache in ("dynamic", "static"):
        torch.manual_seed(0)
        replies[cache] = ModelGenerator(model, tokenizer, temperature=1.0, top_p=1.0,
                                        cache=cache).generate(prompts, 8)
    assert [r.ids for r in replies["static"]] == [r.ids for r in replies["dynamic"]]
    for static, dynamic in zip(replies["static"], replies["dynamic"], strict=True):
        assert torch.allclose(torch.tensor(static.logprobs), torch.tensor(dynamic.logprobs), atol=1e-4)


def test_a_bfloat16_sampler_copies_the_parameters_and_keeps_the_buffers(tiny):
    model, tokenizer = tiny
    sampler = ModelGenerator(model, tokenizer, temperature=1.0, top_p=1.0, weights="bfloat16").sampler()
    assert sampler is not model and {p.dtype for p in sampler.parameters()} == {torch.bfloat16}
    assert {b.dtype for b in sampler.buffers()} == {b.dtype for b in model.buffers()}
    assert all(not p.requires_grad for p in sampler.parameters())


def test_a_bfloat16_sampler_follows_the_policys_weights_at_every_call(tiny):
    model, tokenizer = tiny
    generator = ModelGenerator(model, tokenizer, temperature=1.0, top_p=1.0, weights="bfloat16")
    first = generator.sampler()
    param = next(model.parameters())
    kept = param.detach().clone()
    try:
        with torch.no_grad():
            param.add_(1.0)
        again = generator.sampler()
        assert again is first and torch.equal(next(again.parameters()), param.detach().to(torch.bfloat16))
    finally:
        with torch.no_grad():
            param.copy_(kept)


def test_a_bfloat16_sampler_drops_the_trainers_autocast_wrapper_and_leaves_the_policys(tmp_path):
    """A policy prepared as TRL's trainer prepares it with bf16=True (accelerate's mixed precision)."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    config = rl_config(tmp_path, "tiny")
    model, tokenizer = load_policy(config)
    AcceleratorState._reset_state(True)  # the process-wide state the trainers of other tests set up
    try:
        accelerator = Accelerator(mixed_precision="bf16", cpu=True)
        policy = accelerator.unwrap_model(accelerator.prepare(model))
    finally:
        AcceleratorState._reset_state(True)
    assert "forward" in policy.__dict__  # the wrapper is there to drop
    sampler = ModelGenerator(policy, tokenizer, temperature=1.0, top_p=1.0, weights="bfloat16").sampler()
    autocast = []
    sampler.lm_head.register_forward_hook(lambda m, a, o: autocast.append(torch.is_autocast_enabled("cpu")))
    with torch.no_grad():
        sampler(input_ids=torch.tensor([[5, 6, 7]]))
    assert autocast == [False] and "forward" in policy.__dict__


def test_a_bfloat16_sampler_of_a_lora_policy_runs_its_own_bfloat16_weights(tmp_path):
    """A LoRA policy as TRL's trainer holds it: the wrapper sits on peft's inner model, and a copy that kept
    it ran the float32 policy (session 34)."""
    from cudaperf.train.monitor import MetricsWriter
    from cudaperf.train.rl import _trainer, load_tasks

    config = dataclasses.replace(rl_config(tmp_path, "tiny"), lora=True, lora_rank=4,
                                 generation_weights="bfloat16")
    model, tokenizer = load_policy(config)
    tasks = load_tasks(config)
    rollout = MultiTurnRollout(config, tasks, None, tokenizer)
    trainer = _trainer(config, model, tokenizer, tasks, rollout, MetricsWriter(config.output_dir), 0.0)
    policy = trainer.accelerator.unwrap_model(trainer.model)
    assert any("forward" in m.__dict__ for m in policy.modules())  # the wrapper is there to drop
    sampler = rollout._generator(policy).sampler()
    inputs = []
    sampler.get_output_embeddings().register_forward_hook(lambda m, a, o: inputs.append(a[0].dtype))
    with torch.no_grad():
        logits = sampler(input_ids=torch.tensor([[5, 6, 7]])).logits
    assert inputs == [torch.bfloat16] and logits.dtype == torch.bfloat16


def test_a_bfloat16_sampler_generates_replies_with_logprobs(tiny):
    model, tokenizer = tiny
    prompt = tokenizer("__global__ void k(float* x)", add_special_tokens=False)["input_ids"]
    (reply,) = ModelGenerator(model, tokenizer, temperature=1.0, top_p=1.0,
                              weights="bfloat16").generate([prompt], 8)
    assert len(reply.ids) == len(reply.logprobs) > 0 and all(lp <= 0 for lp in reply.logprobs)
