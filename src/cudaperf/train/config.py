"""The configuration of `cudaperf train sft` and `cudaperf train rl`: one frozen dataclass per command.

Every field has a docstring (the CLI's help is generated from them, `commands/train_cmd.py`); impossible
combinations are refused in `__post_init__` with a `ConfigError` that names the fields and the fix. A
configuration is saved as JSON beside every checkpoint (`save_config`) and in the run's directory, and a
resumed run must match the saved one on every field that shapes the data or the optimisation
(`check_resume`): a resume that silently changed the batch size or the data would not continue the run.

Not covered: running anything (`sft.py`, `rl.py`), the reward's own configuration (`cudaperf.reward`:
named here by preset), the evaluator's (`cudaperf.evaluate.EvalConfig`: built from the few fields below).
"""

from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudaperf.agent.backends.base import GENERATION_CACHES
from cudaperf.agent.backends.decoding_attention import check_attention
from cudaperf.train.credit import TURN_SCORES

# How the rollouts' sampler holds the policy's weights (`RlConfig.generation_weights`).
GENERATION_WEIGHTS = ("autocast", "bfloat16")
# What the rollouts' candidates are timed against (`RlConfig.timing_baselines`); 'reward' names the baselines
# a reward reads (`cudaperf.reward.SPEEDUP_BASELINES`).
TIMING_BASELINES = ("reward", "all")
# Saved before `timing_baselines` existed, a run timed every baseline; before `share_repeated_answers`, it
# evaluated every answer; before `anchor_copies`, it timed every copy of a naive port; before
# `evaluate_while_generating`, it evaluated a turn's answers after the turn's generation: read so, it resumes
# as it ran.
LEGACY_DEFAULTS = {"RlConfig": {"timing_baselines": "all", "share_repeated_answers": False,
                                "anchor_copies": False, "evaluate_while_generating": False}}

CONFIG_FILE = "train_config.json"
KINDS = ("pytorch", "c")
REPAIR_FAULT_KINDS = 5  # the kinds of fault `train.repair_data.FAULTS` knows
# Fields a resumed run may change: where it runs, for how long, with which kernels for the same function
# (the attention's) and on which schedule its answers are evaluated, never what it learns from.
RESUMABLE = frozenset({"output_dir", "max_minutes", "stop_at_step", "resume", "max_steps", "epochs",
                       "logging_steps", "save_steps", "eval_steps", "device", "save_total_limit",
                       "eval_workers", "eval_workers_per_gpu", "build_workers", "ray_address",
                       "profile_decoding", "generation_attention", "examples_file",
                       "evaluate_while_generating"})


class ConfigError(ValueError):
    """An impossible or contradictory configuration; the message says which fields and how to fix it."""


def check_headroom(min_headroom: float, measurements: str) -> None:
    """Refuse a negative `min_headroom`, or one without the measurements it reads."""
    if min_headroom < 0 or (min_headroom and not measurements):
        raise ConfigError(f"min_headroom={min_headroom}: use >= 0 (0: every task), and name the "
                          "measurements it reads (measurements=DIR, e.g. benchmarks/dataset_measure)")


@dataclass(frozen=True)
class CommonConfig:
    """Fields both commands share."""

    model: str = "smollm2"
    """The policy to start from: 'smollm2' (SmolLM2-135M-Instruct from the offline GGUF), 'tiny' (a random
    ~0.2 M-parameter Llama with a locally trained tokenizer: tests and smoke runs), or a model directory
    (e.g. the `final/` directory of an earlier `train sft`)."""
    output_dir: str = "runs/train"
    """Run directory: checkpoints (checkpoint-<step>/, each with train_config.json), final/ (the trained
    model), metrics.jsonl, tensorboard/, batches.jsonl (a fingerprint of every training batch)."""
    seed: int = 0
    """Seed of the data order, initialisation (tiny model) and sampling."""
    device: str = "auto"
    """'auto' (cuda when present), 'cpu' or 'cuda'."""
    learning_rate: float = 5e-5
    """Peak learning rate (linear decay after warmup)."""
    max_steps: int = -1
    """Optimiser steps; -1: as many as `epochs` give (SFT; RL needs a positive number)."""
    logging_steps: int = 1
    """Log training metrics every this many steps."""
    save_steps: int = 50
    """Write a checkpoint every this many steps (a killed run resumes from the last one)."""
    save_total_limit: int = 2
    """Checkpoints kept (older ones are deleted); at least 1."""
    max_minutes: float = 0.0
    """Stop with a checkpoint once the next step (taken to last as long as the last one) would end past
    this many minutes of the run, counted from its start (loading and building its data included; 0: no
    limit); starting the same run again resumes it (how a long run fits machines lent for a few minutes at
    a time)."""
    resume: bool = True
    """Continue from the last checkpoint in `output_dir` when there is one (the saved configuration must
    match: see `check_resume`); False refuses to start over an existing run."""
    lora: bool = False
    """Train a LoRA adapter (peft) instead of all weights."""
    lora_rank: int = 16
    """LoRA rank r (with `lora`)."""
    lora_alpha: int = 32
    """LoRA scaling alpha (with `lora`)."""
    lora_dropout: float = 0.0
    """Dropout on the LoRA input (with `lora`)."""
    lora_targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                     "down_proj")
    """Module names that get adapters (with `lora`); the Llama family's projection names by default."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass: less memory, about a third slower (TRL turns it on by
    default; a 135M model needs no such saving on an H200)."""
    tiny_context_tokens: int = 8192
    """Context length of the 'tiny' model (the agent's prompts run to a few thousand of its tokens)."""
    holdout_fraction: float = 0.05
    """Share of each train family's tasks that no training run sees (the same tasks in every run:
    `train/heldout.py`), kept for the before/after evaluation's 'held-out tasks of training families'
    (`cudaperf train eval`, task spec `heldout:train`). 0: train on every task of the train families."""

    def check_common(self) -> None:
        if self.save_steps < 1 or self.logging_steps < 1:
            raise ConfigError(f"save_steps={self.save_steps}, logging_steps={self.logging_steps}: both >= 1")
        if self.save_total_limit < 1:
            raise ConfigError("save_total_limit must be >= 1: a run without a checkpoint cannot resume")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ConfigError(f"device={self.device!r}: use 'auto', 'cpu' or 'cuda'")
        if self.max_minutes < 0:
            raise ConfigError(f"max_minutes={self.max_minutes}: 0 (no limit) or a positive number")
        if not 0 <= self.holdout_fraction < 0.5:
            raise ConfigError(f"holdout_fraction={self.holdout_fraction}: in [0, 0.5) (0: hold nothing out)")
        if not self.learning_rate > 0:
            raise ConfigError(f"learning_rate={self.learning_rate}: must be positive")
        if self.lora and (self.lora_rank < 1 or not self.lora_targets):
            raise ConfigError("lora=True needs lora_rank >= 1 and at least one name in lora_targets")
        if not self.lora and (self.lora_rank, self.lora_alpha, self.lora_dropout) != (16, 32, 0.0):
            raise ConfigError("lora_rank/lora_alpha/lora_dropout were set but lora=False: set lora=True "
                              "or leave them at their defaults")


@dataclass(frozen=True)
class SftConfig(CommonConfig):
    """`cudaperf train sft`: task prompt -> one verified implementation, completion-only loss."""

    dataset_seed: int = 0
    """Seed of the task index and of its family split (`cudaperf.datasets`; 0 is the default build)."""
    kinds: tuple[str, ...] = KINDS
    """Task kinds to train on: 'pytorch', 'c' or both."""
    families: tuple[str, ...] = ()
    """Only these families (empty: every family of the train split)."""
    limit_tasks: int = 0
    """At most this many train tasks, round-robin across families (0: all)."""
    val_limit_tasks: int = 64
    """Validation tasks (held-out families) for the eval loss, round-robin (0: all)."""
    measurements: str = ""
    """Directory of `dataset measure` results (measurements*.jsonl[.gz]): keep only implementations that
    measured correct on every configuration with their current source. Empty: every generated
    implementation (correct by construction, not verified on a GPU)."""
    strategies: tuple[str, ...] = ()
    """Only implementations of these strategies (empty: all)."""
    fastest_per_task: int = 0
    """Only the k implementations of each task with the shortest measured time (the geometric mean of
    their medians over the configurations; needs `measurements`; 0: every verified one). With every
    implementation the model learns the slow variants as often as the fast ones: session 28's SFT model
    wrote a family's `naive` variant in 38 of 62 answers (dev/LOG.md)."""
    refine_per_task: int = 0
    """Refinement examples per task besides the first-turn ones (`train.refine_data`): the conversation
    at turn 2 after a slower verified implementation, measured, answered by the task's fastest one. Needs
    `measurements` (the times and the feedback come from them); 0: first turns only. Without them the
    SFT model had never seen a second turn: in session 32's GRPO step 10 of 16 second replies carried no
    solution (dev/LOG.md)."""
    refine_min_speedup: float = 1.2
    """A refinement pair's answer is at least this many times faster than its first reply (measured
    geometric means over the configurations)."""
    refine_from: tuple[str, ...] = ()
    """Strategies a refinement pair's first reply is taken from before the others, in this order (among
    those at least `refine_min_speedup` slower than the task's fastest); empty: the slowest first. The
    first replies a policy meets at turn 2 are its own first answers, most often the `naive` port (the C
    tasks' speedup baseline), where slowest-first pairs start from slow variants such as `coarsened`
    (dev/LOG.md, The learning half: why RL cannot move speed on the headroom families)."""
    repair_per_task: int = 0
    """Repair examples per task besides the first-turn ones (`train.repair_data`): the conversation at
    turn 2 after a broken copy of a verified implementation (cut short, entry point renamed, a syntax
    error, a forbidden import, a compile error; one kind each, so at most 5), judged by the evaluator
    without a GPU, answered by the intact implementation; 0: none. In session 33's comparison the SFT
    model's second replies fixed none of its 35 failed first replies (dev/LOG.md)."""
    epochs: float = 3.0
    """Passes over the training examples (when max_steps is -1)."""
    stop_at_step: int = 0
    """Stop with a checkpoint once this many optimiser steps are done, leaving the learning-rate schedule
    the one `epochs` (or `max_steps`) gives (0: no such stop): a run cut where an earlier one was cut by
    its time limit (e.g. 782 steps of a 2-epoch schedule) trains the same recipe again. The stopped run is
    unfinished, as one stopped by `max_minutes` is; starting it again trains on only to a larger value."""
    batch_size: int = 8
    """Examples per device batch."""
    group_by_length: bool = True
    """Batches of examples of similar length (`transformers`' length grouping, in an order fixed by the
    seed and the epoch: `train.epoch_order`, so a resumed run sees the same order): a batch is padded to
    its longest example, and in a random batch of 16 that is near the p90-p99 of the lengths (2,250-3,570
    tokens, mean 1,750; see docs/training.md), so a third or more of its tokens are padding."""
    grad_accum: int = 1
    """Batches per optimiser step."""
    max_length: int = 4096
    """Longest example in tokens (prompt + answer). Longer examples are dropped, never truncated: a cut
    answer would teach the model to stop mid-module."""
    warmup_ratio: float = 0.03
    """Share of the steps spent warming the learning rate up."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    eval_steps: int = 50
    """Compute the validation loss every this many steps (0: never)."""
    format: str = "fast"
    """Prompt format. Only 'fast': the dataset's implementations are fast-format modules."""
    examples_file: str = ""
    """Train on the examples of this file (`cudaperf train sft --build-examples FILE`, built on any machine
    with the same data options and model) instead of building them in the run; a file built for other data
    or another tokenizer is refused (`train.sft_examples_file`). Empty: build them in the run."""
    init_adapter: str = ""
    """A LoRA adapter folder (an earlier run's `final/adapter`) whose weights the run's adapter starts
    from, trained on this run's examples with a fresh optimiser and schedule: a second stage of SFT on other
    examples, saved as one adapter over the same base model (needs `lora`, with the adapter's rank and
    targets). Empty: a new adapter."""

    def __post_init__(self) -> None:
        self.check_common()
        if self.init_adapter and not self.lora:
            raise ConfigError(f"init_adapter={self.init_adapter!r} continues a LoRA adapter: set lora=True "
                              "with its rank")
        bad = [k for k in self.kinds if k not in KINDS]
        if bad or not self.kinds:
            raise ConfigError(f"kinds={self.kinds}: choose from {KINDS}")
        if self.format != "fast":
            raise ConfigError(f"format={self.format!r}: the dataset's implementations are fast-format "
                              "modules, so an 'inline' prompt would teach answers that contradict it; use "
                              "format='fast'")
        if self.batch_size < 1 or self.grad_accum < 1:
            raise ConfigError("batch_size and grad_accum must be >= 1")
        if self.max_length < 256:
            raise ConfigError(f"max_length={self.max_length}: the task prompts alone are longer; use >= 256")
        if self.max_steps < 1 and not self.epochs > 0:
            raise ConfigError("max_steps=-1 needs epochs > 0")
        if self.stop_at_step < 0:
            raise ConfigError(f"stop_at_step={self.stop_at_step}: 0 (no stop) or a positive step")
        if 0 < self.max_steps <= self.stop_at_step:
            raise ConfigError(f"stop_at_step={self.stop_at_step} is not before max_steps={self.max_steps}: "
                              "the schedule ends the run first; use 0")
        if not 0 <= self.warmup_ratio < 1:
            raise ConfigError(f"warmup_ratio={self.warmup_ratio}: in [0, 1)")
        if self.refine_per_task < 0 or (self.refine_per_task and not self.measurements):
            raise ConfigError(f"refine_per_task={self.refine_per_task}: use >= 0, and name the measurements "
                              "(the first reply's feedback and the pairs' times come from them)")
        if not 0 <= self.repair_per_task <= REPAIR_FAULT_KINDS:
            raise ConfigError(f"repair_per_task={self.repair_per_task}: 0 to {REPAIR_FAULT_KINDS} (one "
                              "example of each kind of fault at most)")
        if self.refine_from and not self.refine_per_task:
            raise ConfigError(f"refine_from={list(self.refine_from)}: it orders refinement examples; set "
                              "refine_per_task >= 1 too (0 builds none)")
        if not self.refine_min_speedup >= 1.0:
            raise ConfigError(f"refine_min_speedup={self.refine_min_speedup}: at least 1 (the answer must "
                              "not be slower than the first reply)")
        if self.fastest_per_task < 0 or (self.fastest_per_task and not self.measurements):
            raise ConfigError(f"fastest_per_task={self.fastest_per_task}: use >= 0, and name the "
                              "measurements (the times it ranks implementations by)")


@dataclass(frozen=True)
class RlConfig(CommonConfig):
    """`cudaperf train rl`: GRPO over multi-turn refinement trajectories (TRL's GRPOTrainer)."""

    learning_rate: float = 2e-6
    """Peak learning rate (RL steps are small: Kevin-style recipes use ~1e-6)."""
    max_steps: int = 20
    """Optimiser steps (each: `tasks_per_step` tasks, all their trajectories)."""
    max_grad_norm: float = 0.05
    """Gradient-norm clip (Kevin: 0.05)."""
    num_iterations: int = 1
    """Optimiser steps per rollout batch (GRPO's mu; TRL's `num_iterations`): above 1, each generated and
    evaluated batch serves that many steps, the importance ratio against the policy that sampled it
    clipped by `epsilon`/`epsilon_high`. Why: evaluation is most of an RL step's time (80% on the H100,
    session 38) and the optimiser step 5%. `max_steps` counts optimiser steps, so it and `save_steps` must be
    multiples of it."""
    tasks: tuple[str, ...] = ("split:train",)
    """Task specs as `cudaperf optimize` takes them (split:NAME, a directory, examples, a file...)."""
    kinds: tuple[str, ...] = KINDS
    """Task kinds to train on."""
    families: tuple[str, ...] = ()
    """Only these families (empty: all)."""
    limit_tasks: int = 64
    """At most this many tasks, round-robin across families (0: all)."""
    min_headroom: float = 0.0
    """RL only on tasks the dataset shows can be made this much faster than their baseline or more: the
    fastest measured implementation over the naive CUDA port (C tasks) or eager (PyTorch tasks), geometric
    mean over configurations (`datasets.measure.headroom`; needs `measurements`), applied before
    `limit_tasks`. A task whose baseline is already the fastest gives RL correctness to learn and no speed:
    a correct answer there measures at about 1.0x whatever it does. 0: every task."""
    measurements: str = ""
    """Directory of `dataset measure` results (measurements*.jsonl[.gz]) that `min_headroom` reads."""
    max_turns: int = 2
    """Turns per trajectory (Kevin: 4 in training)."""
    trajectories: int = 4
    """Trajectories per task and step (the GRPO group is built from them)."""
    credit: str = "turn"
    """How per-turn credit reaches the loss. 'turn' (Kevin): every turn is its own sample (its prompt is
    the agent's context for that turn, its completion the reply), rewarded with its discounted return
    sum_{k>=t} gamma^(k-t) s_k; the group is every turn of every trajectory of the task.
    'trajectory': one sample per trajectory (completion = replies and feedback, feedback tokens masked
    out by env_mask), rewarded with the return of its first turn; no per-turn credit."""
    gamma: float = 0.4
    """Discount of later turns' scores in a turn's return (Kevin: 0.4)."""
    turn_mode: str = "sum"
    """'sum' (Kevin's choice) or 'max' of the discounted later scores."""
    turn_score: str = "own"
    """What a turn's score s_k is in the returns: 'own' (Kevin: its own unified reward) or 'best_so_far'
    (the best of turns up to it: the kernel the agent holds then, so a failed refinement after a correct
    turn keeps that turn's score; `cudaperf.train.credit`)."""
    reward: str = "cudaperf"
    """Reward preset ('cudaperf', 'kevin', 'cuda-agent' or 'pkg.module:function'); each component is
    logged."""
    tasks_per_step: int = 2
    """Tasks per optimiser step."""
    max_new_tokens: int = 2048
    """New tokens per reply (SmolLM2's tokens of the dataset's answers: p50 453, p99 2129)."""
    max_prompt_tokens: int = 6144
    """The agent's context is shrunk to fit this many tokens ('turn' credit)."""
    temperature: float = 1.0
    """Sampling temperature of the rollouts."""
    top_p: float = 1.0
    """Nucleus sampling of the rollouts."""
    generation_weights: str = "autocast"
    """How the rollouts' sampler holds the policy's weights: 'autocast' (the policy itself, float32 under
    bfloat16 autocast on a GPU) or 'bfloat16' (a bfloat16 copy of its parameters, refreshed from the
    policy at each step: no per-step weight casts; one more copy of the parameters in memory). The
    rollout's own generator decoded a step of SmolLM2-135M's shape (batch 64, 1,500-token prompts) in
    21.0 ms this way against 97.7 ms for 'autocast' on an H100 (dev/LOG.md, session 27);
    `scripts/generation_profile.py` measures both forms. The sampled tokens' log-probabilities then come
    from the bfloat16 copy, so they differ from the policy's own by its rounding."""
    generation_cache: str = "dynamic"
    """The rollouts' decoding: `generate` with the 'dynamic' KV cache (grows per step) or the 'static' one
    (preallocated; on a GPU `transformers` compiles the decoding step, paying the compile once per batch
    shape, to cut the per-step host overhead; sampled in float32, without the dynamic cache's bfloat16
    autocast; `scripts/generation_profile.py` measures both), or 'graph': `agent.backends.step_decoder`'s
    loop over a static cache whose decoding step is one captured CUDA graph (no compiler; with
    generation_weights 'autocast', in float32 as 'static'; on a CPU the same loop, eager). Session 32's
    rollout steps took 90-105 ms for 6.5 ms of kernels; in session 33's, 'graph' took 7.5-10.4 ms."""
    generation_attention: str = "no_cudnn"
    """The attention kernels of the rollouts' `generate`: 'no_cudnn' (on a GPU, PyTorch's flash,
    memory-efficient and math kernels: cuDNN's builds a plan for every new key length, so for every
    decoding step, about half a step's host time in session 32's rollouts) or 'any' (PyTorch's choice;
    `agent.backends.decoding_attention`)."""
    profile_decoding: bool = False
    """Time every decoding step of the run's first rollout `generate` call and profile a few of them
    (`agent.backends.decoding_probe`), written to `decoding_probe.txt` in `output_dir`: where a step's
    time goes in the real run (dev/LOG.md, session 28: the real rollouts decoded 3-5x slower than the
    profile script's replica). Costs the profiled steps' profiler overhead, once."""
    beta: float = 0.0
    """KL coefficient against the starting policy (0: off, no reference model; Kevin uses 0)."""
    epsilon: float = 0.2
    """Lower clip of the importance ratio."""
    epsilon_high: float = 0.28
    """Upper clip ('clip-high', DAPO; Kevin: 0.28)."""
    loss_type: str = "dr_grpo"
    """TRL loss aggregation; 'dr_grpo' normalises by a constant (Kevin's constant length normalisation)."""
    scale_rewards: str = "group"
    """Advantage scaling: 'group' (std within the group), 'batch' or 'none'."""
    eval_device: str = "auto"
    """Where candidates run: 'cuda', 'cpu' (the sandboxed CPU worker: pure-PyTorch answers only, needs
    `allow_torch_ops`), 'none' (build and static checks only) or 'auto'."""
    eval_mode: str = "rl"
    """The evaluator's schedule (`cudaperf.eval_modes`): 'rl' (several workers per GPU, timing only for
    correct candidates, baselines cached per task and configuration: every check kept) or 'default'."""
    allow_torch_ops: bool = False
    """Accept torch compute ops in answers (only for CPU smoke runs: a CUDA kernel cannot run there)."""
    eval_seeds: int = 1
    """Input seeds per correctness check."""
    timing_budget_ms: float = 50.0
    """Timing budget per candidate and configuration."""
    timing_baselines: str = "reward"
    """Which baselines the rollouts' candidates are timed against. 'reward': those a reward reads
    (`cudaperf.reward.SPEEDUP_BASELINES`: eager and torch.compile for PyTorch tasks, the naive CUDA port for C
    tasks), so a C task's candidates each time the naive port live, interleaved with themselves, under the RL
    mode's ranking budget, and no candidate carries the task's baselines (`cudaperf.eval_modes`, point 3): the
    serial C program, which no reward reads, is never timed. 'all': serial C too, timed by each C task's first
    correct candidate (its carrier, with the full budget) while the task's other correct candidates wait for
    it: in session 39's RL run (H200) those carriers held the GPU alone for 71 s of the 146 s of timing, and
    candidates waited 281 s (summed) for them. What 'reward' changes besides: a C task's feedback then names
    the naive port's speedup alone, where SFT's refinement examples and the comparison (`cudaperf train
    compare`, every baseline) also show serial C's."""
    evaluate_while_generating: bool = True
    """Hand each answer to the evaluator as soon as its row of the batch ends (`generation_cache='graph'`;
    the other caches as their batch of rows ends), while the turn's longer replies are still sampled: its
    build, static checks and correctness checks overlap the generation, and the evaluator's GPU gate is
    lent to the generation meanwhile (`eval_modes.GpuGate.paused`), so no answer is timed while the
    policy uses the GPU. Needs the RL evaluation mode (`eval_mode='rl'`, the gate); with the default mode
    or a Ray evaluator, answers are evaluated after the generation whatever this says. Off: after the
    generation always. A run saved before the field existed is read as off, the way it ran."""
    share_repeated_answers: bool = True
    """Evaluate each distinct answer once in a run (`agent.shared_answers.SharedAnswers`, the last 4,096
    distinct answers remembered): an answer repeated character for character gets the evaluated one's
    result, and so its reward, instead of an evaluation that would differ only by timing noise. Off: every
    answer is evaluated. A run saved before the field existed is read as off, the way it ran."""
    anchor_copies: bool = True
    """A C answer that is its task's naive CUDA port, docstrings aside, takes the port's timings from the
    task's last timed pass instead of being timed (`RlSettings.anchor_copies`, `eval_modes` point 7): its
    speedup against the port, the one a reward reads, is 1.0 rather than timing noise around it, so equal
    programs get equal rewards. Off: every copy is timed. A run saved before the field existed is read as
    off, the way it ran."""
    eval_workers: int = 0
    """GPU evaluation workers; 0: one per visible GPU."""
    eval_workers_per_gpu: int = 8
    """Sandboxed workers per GPU in the 'rl' evaluation mode (`RlSettings.workers_per_gpu`, whose default
    is 4): a step's turn is `tasks_per_step` x `trajectories` candidates at once, so with 16 of them four
    workers ran four waves, and a candidate that spins to the correctness deadline (15 s on a GPU) held
    a quarter of them (H100, session 38: a turn's last candidates started 40 s after the turn's first).
    Timing never overlaps (the GPU gate); checks do, each worker with its referee (two CUDA contexts)."""
    build_workers: int = 0
    """CPU build processes; 0: the evaluator's default."""
    ray_address: str = ""
    """Evaluate on a Ray pool, one actor per free GPU (`cudaperf.scale`, docs/scale.md): 'auto', HOST:PORT,
    ray://HOST:PORT, or 'local' (a Ray instance started here). Empty: the local evaluator."""
    target_speedup: float = 0.0
    """End a trajectory early once a correct answer reaches this speedup (0: never). Only with
    credit='trajectory': 'turn' credit needs every trajectory to have `max_turns` turns."""

    def __post_init__(self) -> None:
        self.check_common()
        if self.max_steps < 1:
            raise ConfigError(f"max_steps={self.max_steps}: RL needs a positive number of steps")
        mu = self.num_iterations
        if mu < 1 or self.max_steps % mu or self.save_steps % mu:
            raise ConfigError(f"num_iterations={mu}: at least 1, with max_steps={self.max_steps} and "
                              f"save_steps={self.save_steps} multiples of it (each rollout batch serves that "
                              "many steps; a checkpoint between two of them would resume without its batch)")
        if self.credit not in ("turn", "trajectory"):
            raise ConfigError(f"credit={self.credit!r}: use 'turn' or 'trajectory'")
        if self.turn_mode not in ("sum", "max"):
            raise ConfigError(f"turn_mode={self.turn_mode!r}: use 'sum' or 'max'")
        if self.turn_score not in TURN_SCORES:
            raise ConfigError(f"turn_score={self.turn_score!r}: use one of {', '.join(TURN_SCORES)}")
        if not 0 <= self.gamma <= 1:
            raise ConfigError(f"gamma={self.gamma}: in [0, 1]")
        if self.max_turns < 1 or self.trajectories < 1 or self.tasks_per_step < 1:
            raise ConfigError("max_turns, trajectories and tasks_per_step must be >= 1")
        if self.num_generations < 2:
            raise ConfigError(f"a GRPO group of {self.num_generations} sample has no baseline: raise "
                              "trajectories (or max_turns with credit='turn') so the group has >= 2")
        if self.credit == "turn" and self.target_speedup:
            raise ConfigError("target_speedup ends trajectories early, but credit='turn' needs every "
                              "trajectory to have max_turns turns (a fixed group size): set target_speedup=0 "
                              "or credit='trajectory'")
        if self.epsilon_high < self.epsilon:
            raise ConfigError(f"epsilon_high={self.epsilon_high} < epsilon={self.epsilon}: clip-high must "
                              "not be tighter than the lower clip")
        if self.eval_device not in ("auto", "cuda", "cpu", "none"):
            raise ConfigError(f"eval_device={self.eval_device!r}: use auto, cuda, cpu or none")
        if self.eval_device == "cpu" and not self.allow_torch_ops:
            raise ConfigError("eval_device='cpu' runs only pure-PyTorch answers (no GPU for kernels), so "
                              "every reward would be 'not applicable': set allow_torch_ops=True (a smoke "
                              "run) or eval_device='cuda'")
        if self.generation_cache not in GENERATION_CACHES:
            raise ConfigError(f"generation_cache={self.generation_cache!r}: use one of {GENERATION_CACHES}")
        if why := check_attention(self.generation_attention):
            raise ConfigError(f"generation_{why}")
        if self.generation_weights not in GENERATION_WEIGHTS:
            raise ConfigError(f"generation_weights={self.generation_weights!r}: use 'autocast' or 'bfloat16'")
        if self.generation_cache == "static" and self.generation_weights == "bfloat16":
            raise ConfigError("generation_cache='static' with generation_weights='bfloat16' failed to "
                              "compile on the GPU (torch 2.11, transformers 5.17; dev/LOG.md): use the "
                              "dynamic cache with bfloat16 weights, or the static cache with 'autocast'")
        if self.eval_mode not in ("rl", "default"):
            raise ConfigError(f"eval_mode={self.eval_mode!r}: use 'rl' or 'default'")
        if self.eval_workers_per_gpu < 1:
            raise ConfigError(f"eval_workers_per_gpu={self.eval_workers_per_gpu}: at least 1")
        check_headroom(self.min_headroom, self.measurements)
        if self.timing_baselines not in TIMING_BASELINES:
            raise ConfigError(f"timing_baselines={self.timing_baselines!r}: use 'reward' or 'all'")
        if self.loss_type not in ("grpo", "dr_grpo", "dapo", "bnpo"):
            raise ConfigError(f"loss_type={self.loss_type!r}: use grpo, dr_grpo, dapo or bnpo")
        if self.scale_rewards not in ("group", "batch", "none"):
            raise ConfigError(f"scale_rewards={self.scale_rewards!r}: use group, batch or none")
        if self.max_new_tokens < 1 or self.max_prompt_tokens < 256:
            raise ConfigError("max_new_tokens must be >= 1 and max_prompt_tokens >= 256")
        from cudaperf.reward import resolve_config

        try:
            resolve_config(self.reward)
        except (ValueError, KeyError, ImportError, TypeError) as exc:
            raise ConfigError(f"reward={self.reward!r}: {exc}") from exc

    @property
    def num_generations(self) -> int:
        """Samples per task and step: every turn of every trajectory ('turn'), or every trajectory."""
        return self.trajectories * (self.max_turns if self.credit == "turn" else 1)


# --------------------------------------------------------------------------------------------------
# Saving, loading, resuming


def config_dict(config: CommonConfig) -> dict[str, Any]:
    return {"command": type(config).__name__, **dataclasses.asdict(config)}


def save_config(config: CommonConfig, directory: str | Path) -> Path:
    path = Path(directory) / CONFIG_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config_dict(config), indent=2, sort_keys=True) + "\n")
    return path


def load_config(path: str | Path) -> CommonConfig:
    """A saved configuration (a run directory, a checkpoint directory or the JSON file itself)."""
    path = Path(path)
    if path.is_dir():
        path = path / CONFIG_FILE
    data = json.loads(path.read_text())
    command = data.pop("command")
    cls = {"SftConfig": SftConfig, "RlConfig": RlConfig}[command]
    return from_plain(cls, {**LEGACY_DEFAULTS.get(command, {}), **data})


def from_plain(cls: type, data: dict[str, Any]) -> Any:
    """`cls(**data)` with JSON lists turned back into the tuples the fields declare."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise ConfigError(f"unknown {cls.__name__} fields: {sorted(unknown)}")
    values = {k: tuple(v) if isinstance(v, list) and "tuple" in str(hints[k]) else v for k, v in data.items()}
    return cls(**values)


def check_resume(saved: CommonConfig, current: CommonConfig) -> None:
    """Refuse to resume a run under a configuration that changes what it learns or in which order."""
    if type(saved) is not type(current):
        raise ConfigError(f"the run in {current.output_dir} was a {type(saved).__name__}, not a "
                          f"{type(current).__name__}: use another output_dir")
    old, new = dataclasses.asdict(saved), dataclasses.asdict(current)
    changed = sorted(k for k in old if k not in RESUMABLE and old[k] != new.get(k))
    if changed:
        diffs = ", ".join(f"{k}: {old[k]!r} -> {new[k]!r}" for k in changed)
        raise ConfigError(f"cannot resume the run in {current.output_dir} with a different configuration "
                          f"({diffs}): use the saved values or another output_dir")


__all__ = ["CONFIG_FILE", "CommonConfig", "ConfigError", "RlConfig", "SftConfig", "check_resume",
           "config_dict", "field_docs", "from_plain", "load_config", "save_config"]


def field_docs(cls: type) -> dict[str, str]:
    """Each field's docstring (the string literal under it in the class body), base classes included."""
    import ast
    import inspect
    import textwrap

    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass) or klass is object:
            continue
        body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body  # type: ignore[attr-defined]
        for node, after in zip(body, body[1:], strict=False):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)):
                docs[node.target.id] = " ".join(str(after.value.value).split())
    return docs
