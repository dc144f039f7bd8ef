"""Multi-turn rollouts through the agent environment, as TRL's `rollout_func`.

`MultiTurnRollout(prompts, trainer)` receives the step's prompts (each task's first prompt, repeated
`num_generations` times in a row: TRL's group), runs the task's trajectories turn by turn through
`agent.environment.RefineEnv` (extraction, evaluation in the sandboxed workers, unified reward,
feedback, the next context), and returns what GRPOTrainer needs: `prompt_ids`, `completion_ids`,
`logprobs`, `env_mask` (1 on tokens the policy generated, 0 on feedback the environment wrote), plus
columns for the reward function (`turn_return`, see `credit.py`) and the reward's components.

Two layouts (`RlConfig.credit`):
- 'turn': one sample per turn. The model answers the agent's own context for that turn (Kevin's short
  history: `agent.context`), so a sample is exactly what the model saw and said; env_mask is all ones
  (the feedback sits in the sample's prompt, which is never trained on).
- 'trajectory': one sample per trajectory, the raw conversation: the model answers the first prompt
  followed by its earlier replies and the feedback on them, token for token; the completion is
  reply_0 + feedback_0 + reply_1 + ..., with env_mask 0 exactly on the feedback segments (the end of the
  assistant turn the model did not emit, the user message, the opening of the next assistant turn).

Covers: batched sampling with the trainer's current weights (`ModelGenerator`: left padding, the
context length respected, each chosen token's log-probability at the sampling temperature, recorded
during generation), the turn loop over all trajectories of the step at once (one evaluation batch per
turn: `step_many` after the generation, or, with `RlConfig.evaluate_while_generating` and the evaluator's
GPU gate, `step_arriving` fed each reply as its row ends while the timed passes wait for the generation to
end), the per-sample rewards, and a summary of the step (`RolloutStats`): reward and each
component, correct rates, speedups, anti-cheat flags by kind, tokens per turn, the time split (each turn's
time per decoding step in its progress line; with `RlConfig.profile_decoding`, the first `generate` call's
`DecodingProbe` report in the output folder), and, in the evaluator's RL mode, what its GPU gate did during
the evaluations (`gate_<state>_s`: free, shared, draining, exclusive).

Not covered: the optimisation (GRPOTrainer), what a turn's score is (`cudaperf.reward`), evaluation
(`agent.evaluation`). The policy's generator is a seam (`TokenGenerator`) so a test can drive the real
environment with scripted replies.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import math
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from cudaperf.agent.backends.base import GENERATION_CACHES, Generation
from cudaperf.agent.backends.decoding_attention import attention_kernels, check_attention
from cudaperf.agent.backends.decoding_probe import DECODING_PROBE_FILE, probing
from cudaperf.agent.context import ContextConfig
from cudaperf.agent.environment import EnvConfig, RefineEnv, StepResult, step_arriving, step_many
from cudaperf.agent.evaluation import CandidateEvaluator
from cudaperf.agent.trajectory import TurnRecord
from cudaperf.train.config import GENERATION_WEIGHTS, RlConfig
from cudaperf.train.credit import keeps_own_score, sample_rewards
from cudaperf.train.models import between_turns_ids, prompt_ids, token_counter
from cudaperf.types import Outcome, Task


@dataclass(frozen=True)
class GeneratedTokens:
    """One sampled reply as tokens: the ids (with the end-of-turn token when the model emitted it) and
    each token's log-probability under the sampling distribution."""

    ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    ended: bool  # the model emitted its end-of-turn token (False: cut at the token limit)


ReplyReady = Callable[[int, GeneratedTokens], None]
"""`on_reply(i, reply)`: prompt i's reply, final, handed as soon as it is (`TokenGenerator.generate`)."""


class TokenGenerator(Protocol):
    """Samples one reply per prompt (token ids in, `GeneratedTokens` out, in order). With `on_reply`, each
    prompt's reply is also handed to it exactly once, as soon as it is final (possibly before the call
    returns: a caller may start on it while other replies are still being sampled)."""

    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int,
                 on_reply: ReplyReady | None = None) -> list[GeneratedTokens]: ...


# Measured, not assumed: on the H100 (torch 2.11, transformers 5.17, session 24) the static cache's compiled
# decoding step of a bfloat16 copy failed in dynamo's fake-tensor run of scaled_dot_product_attention.
STATIC_BFLOAT16 = ("cache='static' with weights='bfloat16' failed to compile on the GPU (torch 2.11, "
                   "transformers 5.17): use cache='dynamic' with bfloat16 weights, or the static cache with "
                   "weights='autocast'")


class ModelGenerator:
    """Sampling from a causal LM (`model.generate`), batched with left padding."""

    def __init__(self, model: Any, tokenizer: Any, temperature: float, top_p: float, batch_size: int = 16,
                 context_tokens: int | None = None, cache: str = "dynamic",
                 weights: str = "autocast", probe_to: str | None = None, attention: str = "no_cudnn") -> None:
        if why := check_attention(attention):
            raise ValueError(why)
        self.model, self.tokenizer = model, tokenizer
        self.temperature, self.top_p, self.batch_size = temperature, top_p, batch_size
        self.cache = cache  # `RlConfig.generation_cache`
        self.attention = attention  # `RlConfig.generation_attention`
        if weights not in GENERATION_WEIGHTS:
            raise ValueError(f"weights={weights!r}: use one of {GENERATION_WEIGHTS}")
        if cache not in GENERATION_CACHES:
            raise ValueError(f"cache={cache!r}: use one of {GENERATION_CACHES}")
        if cache == "static" and weights == "bfloat16":
            raise ValueError(STATIC_BFLOAT16)
        self.weights = weights  # `RlConfig.generation_weights`
        self._copy: Any = None  # the bfloat16 sampler, weights="bfloat16"
        self.probe_to = probe_to  # the first generate call's `DecodingProbe` report goes here, once
        cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        self.context_tokens = context_tokens or int(getattr(cfg, "max_position_embeddings", 1 << 30))

    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int,
                 on_reply: ReplyReady | None = None) -> list[GeneratedTokens]:
        """`TokenGenerator.generate`. With cache='graph' a reply is handed to `on_reply` as its row ends
        while the batch's other rows still decode (`step_decoder.decode`'s `on_finished`, at its checks);
        with the other caches as its batch of `batch_size` rows ends."""
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        out: list[GeneratedTokens | None] = [None] * len(prompts)

        def ready(i: int, reply: GeneratedTokens) -> None:
            if out[i] is None:
                out[i] = reply
                if on_reply is not None:
                    on_reply(i, reply)

        was_training = self.model.training
        self.model.eval()  # no dropout while sampling
        try:
            sampler = self.sampler()
            for start in range(0, len(order), self.batch_size):
                rows = order[start:start + self.batch_size]
                replies = self._batch(sampler, [prompts[i] for i in rows], max_new_tokens,
                                      lambda b, reply, rows=rows: ready(rows[b], reply))
                for i, g in zip(rows, replies, strict=True):
                    ready(i, g)
        finally:
            self.model.train(was_training)
        return [g for g in out if g is not None]

    def sampler(self) -> Any:
        """The module that samples: the policy itself ('autocast'), or a copy of it whose parameters are
        bfloat16, refreshed from the policy's current weights at every call ('bfloat16'). Buffers stay as
        they are (the rotary frequencies keep float32), the copy shares no storage with the policy, runs
        its class's plain forward (no autocast wrapper a trainer put on the policy), and samples with the
        policy's generation config."""
        if self.weights != "bfloat16":
            return self.model
        import copy

        import torch

        with torch.no_grad():
            if self._copy is None:
                self._copy = copy.deepcopy(self.model)
                # A trainer's policy (TRL with bf16=True) carries accelerate's mixed-precision wrapper on
                # an instance (`forward` under autocast, outputs cast to float32, the plain one kept as
                # `_original_forward`): the policy's own, or with LoRA its inner model's (peft's
                # `base_model.model`). The copy drops every one: the wrapper is a closure over the
                # *policy's* forward, so a copy that kept it ran the float32 policy (session 34's RL
                # probe: float32 kernels, 25.5 ms a step against 10.0 in bfloat16).
                for module in self._copy.modules():
                    for name in ("forward", "_original_forward"):
                        module.__dict__.pop(name, None)
                for param in self._copy.parameters():
                    param.requires_grad_(False)
                    param.data = param.data.to(torch.bfloat16)
            else:
                for dst, src in zip(self._copy.parameters(), self.model.parameters(), strict=True):
                    dst.copy_(src)
        if hasattr(self.model, "generation_config"):  # the policy's generation settings, as they are now
            self._copy.generation_config = self.model.generation_config
        return self._copy.eval()

    def _batch(self, sampler: Any, prompts: list[Sequence[int]], max_new_tokens: int,
               on_row: ReplyReady | None = None) -> list[GeneratedTokens]:
        """The replies of one batch; `on_row(b, reply)` is handed row b's as it ends (cache='graph' only)."""
        import torch
        from transformers import LogitsProcessorList

        limit = min(max_new_tokens, self.context_tokens - max(len(p) for p in prompts))
        eos, pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id
        if limit < 1:  # no room left in the context: an empty, cut reply
            return [GeneratedTokens((eos,), (0.0,), False) for _ in prompts]
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        device = next(sampler.parameters()).device
        recorder = _ChosenLogprobs(self.temperature)
        sample = self.temperature > 0
        kwargs: dict[str, Any] = {"do_sample": sample, "max_new_tokens": limit, "pad_token_id": pad,
                                  "eos_token_id": eos, "logits_processor": LogitsProcessorList([recorder])}
        kwargs.update(temperature=self.temperature, top_p=self.top_p, top_k=0) if sample else kwargs.update(
            temperature=None, top_p=None, top_k=None)
        if self.cache == "static":
            kwargs["cache_implementation"] = "static"
        # No autocast with a static cache ('static', 'graph'): it is made with one dtype for keys and
        # values, and under autocast the keys leave the rotary embedding in float32 and the values in
        # bfloat16, so `index_copy_` refused the mix (H200, results/2026-12-05-s20/call5-generation-profile/;
        # H100, 'graph', results/2026-12-06-s33-h100/A/gpu-tests.log). In float32 throughout they agree.
        autocast = device.type == "cuda" and self.cache == "dynamic" and self.weights == "autocast"
        bf16 = torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast)
        with torch.no_grad(), bf16, attention_kernels(self.attention, device.type), \
                probing(self.probe_to, str(device), [len(p) for p in prompts], kwargs):
            if self.cache == "graph":
                new, logprobs = self._decode(sampler, ids.to(device), mask.to(device), limit, kwargs,
                                             _ended_rows(on_row, eos, pad))
            else:
                output = sampler.generate(input_ids=ids.to(device), attention_mask=mask.to(device), **kwargs)
                new = output[:, width:].cpu()
                logprobs = recorder.finish(new)
        self.probe_to = None  # the first call only
        return [_trim(new[b].tolist(), logprobs[b].tolist(), eos, pad) for b in range(len(prompts))]

    def _decode(self, sampler: Any, ids: Any, mask: Any, limit: int, kwargs: dict[str, Any],
                on_finished: Any = None) -> tuple[Any, Any]:
        """`generate`'s work by `step_decoder.decode` (cache='graph'): the same sampling settings, the
        sampler's `min_new_tokens`, and the decoding probe `probing` put among `kwargs`' processors."""
        from cudaperf.agent.backends.step_decoder import Sampling, calling, decode

        probes = [p for p in kwargs["logits_processor"] if not isinstance(p, _ChosenLogprobs)]
        config = getattr(sampler, "generation_config", None)
        sampling = Sampling(self.temperature, self.top_p, (self.tokenizer.eos_token_id,),
                            self.tokenizer.pad_token_id, int(getattr(config, "min_new_tokens", None) or 0))
        new, logprobs = decode(sampler, ids, mask, limit, sampling, on_step=calling(probes),
                               on_finished=on_finished)
        return new.cpu(), logprobs.float().cpu()



class _ChosenLogprobs:
    """A logits processor that keeps each step's log-softmax(logits / T) until the next step shows which
    token was chosen (the processor never sees the choice itself). Runs before the sampling warpers, so
    the value is the tempered log-probability before nucleus truncation: the one TRL's loss computes."""

    def __init__(self, temperature: float) -> None:
        self.temperature = temperature if temperature > 0 else 1.0
        self.previous = None
        self.chosen: list[Any] = []

    def __call__(self, input_ids, scores):
        import torch

        if self.previous is not None:
            self.chosen.append(self.previous.gather(1, input_ids[:, -1:]).squeeze(1))
        self.previous = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def finish(self, new_tokens):
        import torch

        if self.previous is not None and new_tokens.shape[1] > len(self.chosen):
            last = new_tokens[:, len(self.chosen):len(self.chosen) + 1].to(self.previous.device)
            self.chosen.append(self.previous.gather(1, last).squeeze(1))
        return torch.stack(self.chosen, dim=1).cpu() if self.chosen else torch.zeros(new_tokens.shape)


def _ended_rows(on_row: ReplyReady | None, eos: int, pad: int) -> Any:
    """`step_decoder.decode`'s `on_finished` handing each ended row's reply to `on_row` (None without)."""
    if on_row is None:
        return None

    def on_finished(rows: list[int], tokens: Any, logprobs: Any) -> None:
        for j, b in enumerate(rows):
            on_row(b, _trim(tokens[j].tolist(), logprobs[j].tolist(), eos, pad))
    return on_finished


def _trim(ids: list[int], logprobs: list[float], eos: int, pad: int) -> GeneratedTokens:
    """A row of `generate`'s output up to and including the end-of-turn token (padding after it dropped)."""
    if eos in ids:
        end = ids.index(eos) + 1
        return GeneratedTokens(tuple(ids[:end]), tuple(logprobs[:end]), True)
    while ids and ids[-1] == pad and pad != eos:
        ids, logprobs = ids[:-1], logprobs[:-1]
    return GeneratedTokens(tuple(ids), tuple(logprobs), False)


# --------------------------------------------------------------------------------------------------
# The rollout


def prompt_key(messages: Any) -> str:
    """The identity of a first prompt (TRL hands the rollout prompts, not dataset rows)."""
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()


def env_config(config: RlConfig) -> EnvConfig:
    from cudaperf.anticheat.policy import Policy

    return EnvConfig(max_turns=config.max_turns, target_speedup=config.target_speedup or None,
                     reward=config.reward, context=ContextConfig(max_prompt_tokens=config.max_prompt_tokens),
                     policy=Policy(allow_torch_ops=config.allow_torch_ops))


def first_prompt(task: Task, config: RlConfig) -> list[dict[str, str]]:
    """The task's first prompt as the environment renders it (the dataset's `prompt` column)."""
    return RefineEnv(env_config(config)).reset(task)


@dataclass
class _Trace:
    """One trajectory's tokens as they accumulate."""

    group: int
    first_ids: list[int]
    turns: list[tuple[list[int], GeneratedTokens, TurnRecord]] = field(default_factory=list)
    completion: list[int] = field(default_factory=list)  # 'trajectory' layout
    logprobs: list[float] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class RolloutBatch:
    """The samples of one step, in TRL's order, and the trajectories' turns they came from."""

    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    logprobs: list[list[float]]
    env_mask: list[list[int]]
    columns: dict[str, list[Any]]  # per-sample extra columns (turn_return, components...)
    records: list[list[TurnRecord]]  # per trajectory, its turns
    seconds: dict[str, float]  # generate, evaluate, total

    def trl_output(self) -> dict[str, Any]:
        return {"prompt_ids": self.prompt_ids, "completion_ids": self.completion_ids,
                "logprobs": self.logprobs, "env_mask": self.env_mask, **self.columns}


GENERATE_ROWS = 128


@dataclass(frozen=True)
class TurnProgress:
    """One turn of a step's rollout, done: what `MultiTurnRollout`'s `on_turn` receives (so a long step
    shows where its time goes before it ends, and a step killed mid-rollout leaves its turns behind)."""

    turn: int  # 0-based
    replies: int
    reply_tokens: int
    generate_s: float
    evaluate_s: float  # after the generation (evaluating while generating: the time it added)
    outcomes: dict[str, int]
    longest_reply_tokens: int = 0

    @property
    def ms_per_decoding_step(self) -> float | None:
        """The generate time over the longest reply's tokens: the time of a decoding step when the turn's
        replies were sampled in one `generate` call (up to `GENERATE_ROWS` of them), prefill included."""
        return 1e3 * self.generate_s / self.longest_reply_tokens if self.longest_reply_tokens else None

    def line(self) -> str:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items()))
        step = self.ms_per_decoding_step
        per_step = f" (longest {self.longest_reply_tokens}: {step:.1f} ms a step)" if step is not None else ""
        return (f"rollout turn {self.turn + 1}: {self.replies} replies ({self.reply_tokens} tokens) "
                f"generated in {self.generate_s:.1f} s{per_step}, evaluated in {self.evaluate_s:.1f} s: "
                f"{counts}")


GateStates = Callable[[], dict[str, float] | None]
"""The evaluator's GPU gate's cumulative seconds per state (`eval_modes.GATE_STATES`), or None."""

TimingPause = Callable[[], contextlib.AbstractContextManager[None] | None]
"""The evaluator's GPU gate lent to the generation (`LocalEvaluator.timing_paused`), or None: no gate."""


def add_gate_seconds(seconds: dict[str, float], before: dict[str, float] | None,
                     after: dict[str, float] | None) -> None:
    """Add what the gate did between two readings to `seconds` as `gate_<state>`. A reading of None before
    (the evaluator opened during the evaluation, its gate new) counts from zero; None after: no gate."""
    if after is None:
        return
    for state, total_s in after.items():
        key = f"gate_{state}"
        seconds[key] = seconds.get(key, 0.0) + total_s - (before or {}).get(state, 0.0)


class MultiTurnRollout:
    """TRL's `rollout_func` over cudaperf's refinement environment (see the module docstring)."""

    def __init__(self, config: RlConfig, tasks: Sequence[Task], evaluator: CandidateEvaluator, tokenizer: Any,
                 on_batch: Any = None, generator: TokenGenerator | None = None, on_turn: Any = None,
                 gate_states: GateStates | None = None, timing_paused: TimingPause | None = None) -> None:
        """`gate_states`: the evaluator's GPU gate's seconds per state so far (the RL mode's,
        `LocalEvaluator.gate_states`; None or a call that returns None: no gate), read around each turn's
        generation and evaluation so that a batch's `seconds` hold what the gate did meanwhile
        (`gate_<state>`). `timing_paused`: the gate lent to the generation (`LocalEvaluator.timing_paused`);
        with it and `RlConfig.evaluate_while_generating`, each answer is evaluated as its reply ends, the
        timed passes held back until the turn's generation is over (None, or a call that returns None:
        the answers are evaluated after the generation)."""
        self.config, self.evaluator, self.tokenizer = config, evaluator, tokenizer
        self.env_config = env_config(config)
        self.tasks = {prompt_key(first_prompt(t, config)): t for t in tasks}
        self.on_batch, self.generator, self.on_turn = on_batch, generator, on_turn
        self.gate_states, self.timing_paused = gate_states, timing_paused
        self._kept: ModelGenerator | None = None

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        model = trainer.accelerator.unwrap_model(trainer.model)
        # Rows per generate call: decoding a 135M model is bound by per-step overhead, not the batch (H200:
        # ~1k tokens/s at 64 rows, ~3.7k at 256), so a step's conversations go in as few calls as fit.
        generator = self.generator or self._generator(model)
        batch = self.run(prompts, generator)
        if self.on_batch is not None:
            self.on_batch(batch, trainer.state.global_step + 1)
        return batch.trl_output()

    def _generator(self, model: Any) -> "ModelGenerator":
        """One generator per policy for the whole run (bfloat16 weights: one copy, refreshed per call)."""
        if self._kept is not None and self._kept.model is model:
            return self._kept
        self._kept = ModelGenerator(model, self.tokenizer, self.config.temperature, self.config.top_p,
                                    batch_size=GENERATE_ROWS, cache=self.config.generation_cache,
                                    weights=self.config.generation_weights, probe_to=self._probe_path(),
                                    attention=self.config.generation_attention)
        return self._kept

    def _probe_path(self) -> str | None:
        """Where the first rollout's decoding probe goes (`RlConfig.profile_decoding`)."""
        if not self.config.profile_decoding:
            return None
        return str(Path(self.config.output_dir) / DECODING_PROBE_FILE)

    def run(self, prompts: Sequence[Any], generator: TokenGenerator) -> RolloutBatch:
        started = time.perf_counter()
        groups = self._groups(prompts)
        per_group = self.config.trajectories if self.config.credit == "turn" else self.config.num_generations
        envs, traces = [], []
        for g, task in enumerate(groups):
            for k in range(per_group):
                env = RefineEnv(self.env_config, evaluator=self.evaluator, sample=k,
                                count_tokens=token_counter(self.tokenizer))
                traces.append(_Trace(g, prompt_ids(self.tokenizer, env.reset(task))))
                envs.append(env)
        seconds = {"generate": 0.0, "evaluate": 0.0}
        for turn in range(self.config.max_turns):
            active = [i for i, env in enumerate(envs) if not env.done]
            if not active:
                break
            progress = self._turn([envs[i] for i in active], [traces[i] for i in active], generator, seconds,
                                  turn)
            if self.on_turn is not None:
                self.on_turn(progress)
        seconds["total"] = time.perf_counter() - started
        return self._batch(traces, seconds)

    def _groups(self, prompts: Sequence[Any]) -> list[Task]:
        size = self.config.num_generations
        if len(prompts) % size:
            raise ValueError(f"{len(prompts)} prompts are not whole groups of num_generations={size}")
        groups = []
        for start in range(0, len(prompts), size):
            keys = {prompt_key(p) for p in prompts[start:start + size]}
            if len(keys) != 1 or next(iter(keys)) not in self.tasks:
                raise ValueError("a GRPO group does not hold one known task's first prompt: the dataset must "
                                 "come from cudaperf.train.rl (first_prompt) and num_generations match")
            groups.append(self.tasks[keys.pop()])
        return groups

    def _turn(self, envs: list[RefineEnv], traces: list[_Trace], generator: TokenGenerator,
              seconds: dict[str, float], turn: int) -> TurnProgress:
        turn_mode = self.config.credit == "turn"
        inputs = [prompt_ids(self.tokenizer, env.prompt_messages()) if turn_mode
                  else tr.first_ids + tr.completion for env, tr in zip(envs, traces, strict=True)]
        before = self._gate()
        pause = self._pause()
        if pause is None:
            replies, steps, generate_s, evaluate_s = self._after(envs, inputs, generator)
        else:
            replies, steps, generate_s, evaluate_s = self._while(envs, inputs, generator, pause)
        seconds["generate"] += generate_s
        seconds["evaluate"] += evaluate_s
        add_gate_seconds(seconds, before, self._gate())
        for trace, prompt, reply, step in zip(traces, inputs, replies, steps, strict=True):
            self._append(trace, prompt, reply, step)
        outcomes = collections.Counter(step.record.result.outcome.value for step in steps)
        return TurnProgress(turn, len(replies), sum(len(r.ids) for r in replies), generate_s, evaluate_s,
                            dict(outcomes), max((len(r.ids) for r in replies), default=0))

    def _pause(self) -> contextlib.AbstractContextManager[None] | None:
        """The gate lent to this turn's generation, or None: evaluate after it."""
        if not self.config.evaluate_while_generating or self.timing_paused is None:
            return None
        return self.timing_paused()

    def _after(self, envs: list[RefineEnv], inputs: list[list[int]],
               generator: TokenGenerator) -> tuple[list[GeneratedTokens], list[StepResult], float, float]:
        """Generate every reply, then evaluate them as one batch: (replies, steps, generate_s, evaluate_s)."""
        t0 = time.perf_counter()
        replies = generator.generate(inputs, self.config.max_new_tokens)
        generate_s = time.perf_counter() - t0
        share = generate_s / max(1, len(replies))
        generations = [self._generation(r, len(p), share) for r, p in zip(replies, inputs, strict=True)]
        steps = step_many(envs, generations, self.evaluator)
        return replies, steps, generate_s, time.perf_counter() - t0 - generate_s

    def _while(self, envs: list[RefineEnv], inputs: list[list[int]], generator: TokenGenerator,
               pause: contextlib.AbstractContextManager[None]
               ) -> tuple[list[GeneratedTokens], list[StepResult], float, float]:
        """Evaluate each reply as it ends while the others are generated, no timed pass until the
        generation is over (`pause`); `evaluate_s` is the time the evaluation added after the generation.
        A reply's `Generation.seconds` is the time until it was handed over."""
        arrived: queue.Queue = queue.Queue()
        t0 = time.perf_counter()

        def handed() -> Iterator[tuple[int, Generation]]:
            while (item := arrived.get()) is not None:
                i, reply, at = item
                yield i, self._generation(reply, len(inputs[i]), at - t0)

        given: set[int] = set()

        def hand(i: int, reply: GeneratedTokens) -> None:
            given.add(i)
            arrived.put((i, reply, time.perf_counter()))

        stepping = _Stepping(envs, handed(), self.evaluator)
        try:
            with pause:
                replies = generator.generate(inputs, self.config.max_new_tokens, hand)
            for i in sorted(set(range(len(replies))) - given):  # a generator that only returns them
                hand(i, replies[i])
        finally:
            arrived.put(None)  # every reply handed (or the generation failed): the batch ends
        generate_s = time.perf_counter() - t0
        steps = stepping.result()
        return replies, steps, generate_s, time.perf_counter() - t0 - generate_s

    def _gate(self) -> dict[str, float] | None:
        return self.gate_states() if self.gate_states is not None else None

    def _generation(self, reply: GeneratedTokens, prompt_tokens: int, seconds: float) -> Generation:
        text = self.tokenizer.decode(list(reply.ids), skip_special_tokens=True)
        return Generation(text, prompt_tokens, len(reply.ids), "stop" if reply.ended else "length", seconds)

    def _append(self, trace: _Trace, prompt: list[int], reply: GeneratedTokens, step: StepResult) -> None:
        trace.turns.append((prompt, reply, step.record))
        trace.completion += reply.ids
        trace.logprobs += reply.logprobs
        trace.env_mask += [1] * len(reply.ids)
        if not step.done and self.config.credit == "trajectory":
            between = between_turns_ids(self.tokenizer, step.feedback, reply.ended)
            trace.completion += between
            trace.logprobs += [0.0] * len(between)
            trace.env_mask += [0] * len(between)

    def _batch(self, traces: list[_Trace], seconds: dict[str, float]) -> RolloutBatch:
        out = RolloutBatch([], [], [], [], {k: [] for k in SAMPLE_COLUMNS}, [], seconds)
        for trace in traces:
            records = [r for _, _, r in trace.turns]
            out.records.append(records)
            rewards = sample_rewards([r.reward for r in records], [_applicable(r) for r in records],
                                     self.config.credit, self.config.gamma, self.config.turn_mode,
                                     self.config.turn_score,
                                     [keeps_own_score(r.result.outcome) for r in records])
            if self.config.credit == "turn":
                for (prompt, reply, record), reward in zip(trace.turns, rewards, strict=True):
                    _add(out, prompt, list(reply.ids), list(reply.logprobs), [1] * len(reply.ids), reward,
                         [record])
            else:
                _add(out, trace.first_ids, trace.completion, trace.logprobs, trace.env_mask, rewards[0],
                     records)
        return out


class _Stepping:
    """`step_arriving` in a thread of its own, over replies handed while the generation goes on."""

    def __init__(self, envs: list[RefineEnv], replies: Iterator[tuple[int, Generation]],
                 evaluator: CandidateEvaluator) -> None:
        self._steps: list[StepResult] | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(envs, replies, evaluator), daemon=True,
                                        name="cudaperf-rollout-evaluation")
        self._thread.start()

    def _run(self, envs: list[RefineEnv], replies: Iterator[tuple[int, Generation]],
             evaluator: CandidateEvaluator) -> None:
        try:
            self._steps = step_arriving(envs, replies, evaluator)
        except BaseException as exc:  # noqa: BLE001 - raised in the rollout's thread (`result`)
            self._error = exc

    def result(self) -> list[StepResult]:
        """Every environment's step, once the last reply has been handed and evaluated."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._steps  # type: ignore[return-value]


SAMPLE_COLUMNS = ("task_id", "turn", "turn_return", "turn_score", "turn_correct", "outcome", "reward_gate",
                  "reward_speedup_term", "reward_structural_term", "reward_ranker_term")


def _applicable(record: TurnRecord) -> bool:
    breakdown = record.reward_breakdown
    return breakdown is None or breakdown.details.get("applicable", 1.0) != 0.0


def _add(out: RolloutBatch, prompt: list[int], completion: list[int], logprobs: list[float], mask: list[int],
         reward: float | None, records: list[TurnRecord]) -> None:
    """One sample; its component columns are the mean over the turns it holds."""
    out.prompt_ids.append(list(prompt))
    out.completion_ids.append(completion)
    out.logprobs.append(logprobs)
    out.env_mask.append(mask)
    parts = [r.reward_breakdown for r in records if r.reward_breakdown is not None]

    def mean(values: list[float]) -> float:
        return sum(values) / len(values) if values else 0.0

    row = {"task_id": records[0].task_id, "turn": records[0].turn if len(records) == 1 else -1,
           "turn_return": reward, "turn_score": mean([r.reward for r in records]),
           "turn_correct": mean([float(r.correct) for r in records]),
           "outcome": records[-1].result.outcome.value, "reward_gate": mean([b.gate for b in parts]),
           "reward_speedup_term": mean([b.speedup_term for b in parts]),
           "reward_structural_term": mean([b.structural_term for b in parts]),
           "reward_ranker_term": mean([b.ranker_term for b in parts])}
    for key in SAMPLE_COLUMNS:
        out.columns[key].append(row[key])


# --------------------------------------------------------------------------------------------------
# The step's summary


@dataclass(frozen=True)
class RolloutStats:
    """What one step's rollouts did (every number is logged to metrics.jsonl and TensorBoard)."""

    values: dict[str, float | None]  # None: not defined for the step (a speedup with no correct turn)
    hack_flags: dict[str, int]  # anti-cheat violation code -> turns flagged with it


def rollout_stats(batch: RolloutBatch) -> RolloutStats:
    from cudaperf.anticheat.policy import is_violation

    turns = [r for records in batch.records for r in records]
    n = max(1, len(turns))
    parts = [r.reward_breakdown for r in turns if r.reward_breakdown is not None]
    speedups = [r.speedup for r in turns if r.correct and r.speedup and r.speedup > 0]
    flags: dict[str, int] = {}
    for r in turns:
        for code in {f.code for f in r.result.flags if is_violation(f.code)}:
            flags[code] = flags.get(code, 0) + 1
    rewards = [x for x in batch.columns["turn_return"] if x is not None]
    values = {
        "trajectories": float(len(batch.records)), "turns": float(len(turns)),
        "samples": float(len(batch.prompt_ids)),
        "score_mean": sum(r.reward for r in turns) / n,
        "sample_reward_mean": sum(rewards) / len(rewards) if rewards else 0.0,
        "gate_mean": _mean([b.gate for b in parts]),
        "speedup_term_mean": _mean([b.speedup_term for b in parts]),
        "structural_term_mean": _mean([b.structural_term for b in parts]),
        "ranker_term_mean": _mean([b.ranker_term for b in parts]),
        "correct_rate": sum(r.correct for r in turns) / n,
        "first_turn_correct_rate": _mean([float(rs[0].correct) for rs in batch.records if rs]),
        "best_of_turns_correct_rate": _mean([float(any(r.correct for r in rs)) for rs in batch.records]),
        # no correct turn: no speedup to average (None, as the comparison's; 0.0 would read as 0x)
        "speedup_geomean": math.exp(_mean([math.log(s) for s in speedups])) if speedups else None,
        "hack_rate": sum(r.result.outcome is Outcome.POLICY_VIOLATION for r in turns) / n,
        "not_applicable_rate": sum(not _applicable(r) for r in turns) / n,
        "no_code_rate": sum(r.code is None for r in turns) / n,
        "truncated_rate": sum(r.finish_reason == "length" for r in turns) / n,
        "prompt_tokens_per_turn": sum(r.prompt_tokens for r in turns) / n,
        "completion_tokens_per_turn": sum(r.completion_tokens for r in turns) / n,
        "generate_s": batch.seconds.get("generate", 0.0), "evaluate_s": batch.seconds.get("evaluate", 0.0),
        "rollout_s": batch.seconds.get("total", 0.0),
        "turns_per_min": 60.0 * len(turns) / batch.seconds["total"] if batch.seconds.get("total") else 0.0,
        # the GPU gate during the batch's evaluations (the RL mode): free (no job on the GPU: builds and host
        # work), shared (checks), draining (checks ending while a timed pass waits), exclusive (timing)
        **{f"{key}_s": s for key, s in batch.seconds.items() if key.startswith("gate_")},
    }
    values.update({f"hack_{code}": float(count) for code, count in flags.items()})
    return RolloutStats(values, flags)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


__all__ = ["GeneratedTokens", "ModelGenerator", "MultiTurnRollout", "RolloutBatch", "RolloutStats",
           "SAMPLE_COLUMNS", "TokenGenerator", "env_config", "first_prompt", "prompt_key", "rollout_stats"]
