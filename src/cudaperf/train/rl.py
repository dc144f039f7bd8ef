"""`cudaperf train rl`: GRPO over multi-turn refinement trajectories with TRL's GRPOTrainer.

Recipe: tasks (`agent.taskset` specs) -> a dataset of their first prompts -> GRPOTrainer with
`MultiTurnRollout` as its `rollout_func` (trajectories through the agent environment, evaluation in the
sandboxed workers of `agent.evaluation.LocalEvaluator`, each distinct answer once with
`share_repeated_answers`: `agent.shared_answers`, feedback masked by `env_mask`) and
`TurnReturnReward` as its reward (per-turn credit: `credit.py` says exactly how it reaches the loss).
Defaults follow Kevin: KL off (beta 0, no reference model), clip-high (epsilon_high 0.28), constant
length normalisation (dr_grpo), gradient clip 0.05. Each step's rollouts are summarised into
metrics.jsonl / TensorBoard (kind "rollout") and every turn is appended to rollouts.jsonl (outcome,
score, return, anti-cheat flags) at the step's end, and every evaluation to evaluations.jsonl (with the
candidate's code and its stage times) as it ends; checkpoints hold the configuration and resume like
SFT's, one carried from another machine without its optimiser state too (`carried_state.py`).

Not covered: the rollouts (`rollout.py`), the reward (`cudaperf.reward`), verl (many nodes).
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudaperf.agent.evaluation import ReportingEvaluator
from cudaperf.agent.shared_answers import SharedAnswers
from cudaperf.train.carried_state import lacks_optimizer, schedule_callback
from cudaperf.train.config import ConfigError, RlConfig, save_config
from cudaperf.train.credit import TurnReturnReward
from cudaperf.train.finite_guard import gradient_guard
from cudaperf.train.models import load_policy, lora_config, resolve_device, save_model
from cudaperf.train.monitor import (
    MetricsWriter,
    RecordsBatches,
    checkpoint_step,
    make_callback,
    record_evaluations,
    report_slow_results,
    report_stalls,
)
from cudaperf.train.rollout import MultiTurnRollout, RolloutBatch, TurnProgress, first_prompt, rollout_stats
from cudaperf.train.sft import prepare_run

ROLLOUTS_FILE = "rollouts.jsonl"


@dataclass(frozen=True)
class RlReport:
    output_dir: str
    final_dir: str
    tasks: int
    steps: int
    resumed_from: str | None
    last_rollout: dict[str, float | None]  # the last step's rollout summary
    seconds: float
    finished: bool  # False: stopped at max_minutes with a checkpoint (run it again to continue)


def load_tasks(config: RlConfig) -> list[Any]:
    """The tasks RL draws from: the configured specs, kinds and families, with `min_headroom` those the
    measurements show room on, at most `limit_tasks`."""
    from cudaperf.train.heldout import headroom_ids, resolve_tasks

    only = headroom_ids(config.min_headroom, config.measurements)
    found = resolve_tasks(config.tasks, kinds=config.kinds, families=config.families,
                          limit=config.limit_tasks, holdout_fraction=config.holdout_fraction, only=only)
    if not found.tasks:
        room = "" if only is None else f", with headroom >= {config.min_headroom}x in {config.measurements}"
        raise ConfigError(f"tasks={config.tasks}: no task{room} "
                          f"({'; '.join(found.errors[:3]) or 'none matched'})")
    return list(found.tasks)


def rollout_timing(config: RlConfig) -> Any:
    """The rollouts' `TimingConfig`: the configured budget, and the baselines `config.timing_baselines`
    names (`jobs.timed_baselines` keeps, per task kind, the ones that kind has)."""
    from cudaperf.evaluate import TimingConfig
    from cudaperf.reward import SPEEDUP_BASELINES

    if config.timing_baselines == "reward":
        return TimingConfig(budget_ms=config.timing_budget_ms, baselines=SPEEDUP_BASELINES)
    return TimingConfig(budget_ms=config.timing_budget_ms)


def make_evaluator(config: RlConfig) -> Any:
    from cudaperf.agent.evaluation import LocalEvaluator
    from cudaperf.anticheat.policy import Policy
    from cudaperf.eval_modes import RlSettings
    from cudaperf.evaluate import EvalConfig

    gpus = tuple(range(config.eval_workers)) if config.eval_workers and not config.ray_address else None
    eval_config = EvalConfig(device=config.eval_device, mode=config.eval_mode, gpus=gpus,
                             seeds=config.eval_seeds, policy=Policy(allow_torch_ops=config.allow_torch_ops),
                             timing=rollout_timing(config),
                             build_workers=config.build_workers,
                             rl=RlSettings(workers_per_gpu=config.eval_workers_per_gpu,
                                           anchor_copies=config.anchor_copies))
    if config.ray_address:  # the Ray evaluation pool (cudaperf.scale), off the policy's GPU
        import torch

        from cudaperf.scale import RayEvaluator

        many = resolve_device(config.device) == "cuda" and torch.cuda.device_count() > 1
        return RayEvaluator.at(config.ray_address, eval_config, actors=config.eval_workers,
                               trainer_gpus=(0,) if many else ())
    return LocalEvaluator(eval_config)


def run_rl(config: RlConfig, evaluator: Any = None) -> RlReport:
    """Train as configured (see the module docstring); `evaluator` replaces the configured one."""
    started = time.perf_counter()
    checkpoint = prepare_run(config)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is TRL's experimental API
    tasks = load_tasks(config)
    final = Path(config.output_dir) / "final"
    steps_done = checkpoint_step(checkpoint)
    if steps_done >= config.max_steps and (final / "config.json").is_file():
        # a finished run started again: nothing to train (the trainer, resumed at its last step, would
        # take one step past max_steps)
        return RlReport(config.output_dir, str(final), len(tasks), steps_done, checkpoint, {},
                        time.perf_counter() - started, True)
    model, tokenizer = load_policy(config)
    own_evaluator = evaluator is None
    evaluator = evaluator or make_evaluator(config)
    writer = MetricsWriter(config.output_dir)
    last: dict[str, float | None] = {}

    def on_batch(batch: RolloutBatch, step: int) -> None:
        stats = rollout_stats(batch)
        last.clear()
        last.update(stats.values)
        writer.write("rollout", step, {**stats.values, "hack_kinds": sorted(stats.hack_flags)})
        _append_turns(Path(config.output_dir) / ROLLOUTS_FILE, batch, step)

    def on_turn(progress: TurnProgress) -> None:  # a step's turns as they end (a step takes minutes)
        print(f"[{time.perf_counter() - started:.0f} s] {progress.line()}", file=sys.stderr, flush=True)

    # a stalled turn names its laggards, and one with no result at all says where its jobs wait; every
    # result goes to evaluations.jsonl with its candidate's code as it arrives
    slow, record = report_slow_results(started), record_evaluations(started, config.output_dir)

    def on_result(progress: Any) -> None:
        slow(progress)
        record(progress)

    judge = ReportingEvaluator(SharedAnswers(evaluator) if config.share_repeated_answers else evaluator,
                               on_result, report_stalls(started, config.output_dir))
    rollout = MultiTurnRollout(config, tasks, judge, tokenizer, on_batch=on_batch, on_turn=on_turn,
                               gate_states=getattr(evaluator, "gate_states", None),
                               timing_paused=getattr(evaluator, "timing_paused", None))
    trainer = _trainer(config, model, tokenizer, tasks, rollout, writer, started)
    if lacks_optimizer(checkpoint):  # carried from another machine (`train.carried_state`)
        trainer.add_callback(schedule_callback(checkpoint))
        print(f"RL resumes from {checkpoint}, carried without its optimiser state: the same adapter and data "
              "order, a fresh optimiser", file=sys.stderr, flush=True)
    print(f"[{time.perf_counter() - started:.0f} s] RL trainer ready (tasks, policy, evaluator loaded)",
          file=sys.stderr, flush=True)
    try:
        trainer.train(resume_from_checkpoint=checkpoint)
        finished = trainer.state.global_step >= config.max_steps
        if finished:
            save_model(trainer, tokenizer, final)
            save_config(config, final)
    finally:
        writer.close()
        if own_evaluator:
            evaluator.close()
    return RlReport(config.output_dir, str(final), len(tasks), trainer.state.global_step, checkpoint,
                    dict(last), time.perf_counter() - started, finished)


def _append_turns(path: Path, batch: RolloutBatch, step: int) -> None:
    """One line per turn: enough to follow outcomes and anti-cheat flags over training."""
    with open(path, "a", encoding="utf-8") as f:
        for records in batch.records:
            for r in records:
                f.write(json.dumps({
                    "step": step, "task_id": r.task_id, "sample": r.sample, "turn": r.turn,
                    "outcome": r.result.outcome.value, "score": r.reward, "speedup": r.speedup,
                    "extraction": r.extraction, "completion_tokens": r.completion_tokens,
                    "flags": sorted({fl.code for fl in r.result.flags})}) + "\n")


def _dataset(tasks: list[Any], config: RlConfig) -> Any:
    from datasets import Dataset

    return Dataset.from_list([{"prompt": first_prompt(t, config), "task_id": t.task_id} for t in tasks])


def _trainer(config: RlConfig, model: Any, tokenizer: Any, tasks: list[Any], rollout: MultiTurnRollout,
             writer: MetricsWriter, started_s: float) -> Any:
    from trl import GRPOConfig, GRPOTrainer

    class RecordingGRPOTrainer(RecordsBatches, GRPOTrainer):
        """GRPOTrainer that appends the task ids of each training micro-batch to batches.jsonl."""

    cuda = resolve_device(config.device) == "cuda"
    group = config.num_generations
    completion = config.max_new_tokens * (1 if config.credit == "turn" else config.max_turns)
    args = GRPOConfig(
        output_dir=config.output_dir, seed=config.seed, data_seed=config.seed,
        learning_rate=config.learning_rate, max_steps=config.max_steps, max_grad_norm=config.max_grad_norm,
        per_device_train_batch_size=group, gradient_accumulation_steps=config.tasks_per_step,
        num_iterations=config.num_iterations,
        num_generations=group, max_completion_length=completion, temperature=config.temperature,
        top_p=config.top_p, beta=config.beta, epsilon=config.epsilon, epsilon_high=config.epsilon_high,
        loss_type=config.loss_type, scale_rewards=config.scale_rewards, logging_steps=config.logging_steps,
        save_strategy="steps", save_steps=config.save_steps, save_total_limit=config.save_total_limit,
        report_to="none", bf16=cuda, use_cpu=not cuda, dataloader_num_workers=0, disable_tqdm=True,
        lr_scheduler_type="constant", gradient_checkpointing=config.gradient_checkpointing,
    )
    return RecordingGRPOTrainer(model=model, reward_funcs=[TurnReturnReward()], args=args,
                                train_dataset=_dataset(tasks, config), processing_class=tokenizer,
                                peft_config=lora_config(config), rollout_func=rollout,
                                callbacks=[make_callback(config, writer, started_s),
                                           gradient_guard(writer)])


__all__ = ["ROLLOUTS_FILE", "RlReport", "load_tasks", "make_evaluator", "run_rl"]
