"""The refine-with-feedback agent loop for verl (imports verl: load it only inside a verl run).

`RefineAgentLoop`, registered as "cudaperf_refine", runs one trajectory of one task: the model answers the
task's first prompt (the row's `prompt`), the reply goes through `cudaperf.agent.environment.RefineEnv`
(code extraction, the evaluator, the unified reward, feedback), the feedback is appended as the next user
message, and so on until the environment is done (`max_turns`, `target_speedup`), the response budget
(`rollout.response_length`) is spent, or a turn is not applicable (a harness fault). The model sees the
raw conversation, token for token (verl's Continuous Token builder merges replies and messages).

What verl receives (`TurnScoredOutput`): the response reply_0 + feedback_0 + reply_1 + ..., its
`response_mask` 1 exactly on the tokens the policy generated and 0 on every feedback token and chat-template
boundary; `reward_score` the sum of the turns' scores; and `rm_scores` with each turn's score on the last
token of its reply (a turn's score is its own unified reward, or with `turn_score: best_so_far` the best so
far: `cudaperf.train.credit.held_scores`, as the TRL path's `RlConfig.turn_score`), which the turn-level
estimator reads (`verl_adapter.credit`). A non-applicable turn's reply is masked (no gradient) and ends the
trajectory. `extra_fields["turn_scores"]` lists the scores and `extra_fields["reward_extra_info"]`
summarises the trajectory (each reward component's mean over turns, first-turn and best-turn correctness,
best speedup, anti-cheat flags).

The per-token scores reach the estimator through `AgentLoopOutput.as_dict`, which verl's V1 trainer
(`trainer.use_v1=True`, the default of verl 0.9.1) uses; the legacy trainer builds `rm_scores` from
`reward_score` alone, so this loop refuses it.

Configuration (keys of the loop's entry in `rollout.agent.agent_loop_config_path`): `max_turns`,
`target_speedup`, `reward` (a preset), `turn_score` ("own" or "best_so_far"), `format`, `allow_torch_ops`,
`evaluator` ("package.module:factory" returning a `CandidateEvaluator`) and `evaluator_kwargs`
(`verl_adapter.evaluators`).

Not covered: generation (verl's LLM servers), advantages (`verl_adapter.estimator`), multimodal rows.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any
from uuid import uuid4

import torch
from pydantic import Field
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
from verl.utils.profiler import simple_timer

from cudaperf.agent.backends.base import Generation
from cudaperf.agent.environment import EnvConfig, RefineEnv, StepResult, step_many
from cudaperf.anticheat.policy import Policy
from cudaperf.train.credit import TURN_SCORES, held_scores, keeps_own_score
from cudaperf.train.verl_adapter.credit import score_positions
from cudaperf.train.verl_adapter.data import AGENT_NAME, task_from_row
from cudaperf.train.verl_adapter.evaluators import DEFAULT_FACTORY, shared_evaluator
from cudaperf.types import Outcome

END_OF_TURN = "<|im_end|>"


class TurnScoredOutput(AgentLoopOutput):
    """An `AgentLoopOutput` whose `rm_scores` hold each turn's score on the last token of its reply."""

    turn_score_positions: list[int] = Field(default_factory=list, exclude=True)
    turn_score_values: list[float] = Field(default_factory=list, exclude=True)

    def as_dict(self) -> dict[str, Any]:
        output = super().as_dict()
        if "rm_scores" in output:
            scores = torch.zeros_like(output["response_mask"], dtype=torch.float32)
            for position, value in zip(self.turn_score_positions, self.turn_score_values, strict=True):
                scores[position] += value
            output["rm_scores"] = scores
        return output


@register(AGENT_NAME)
class RefineAgentLoop(AgentLoopBase):
    """See the module docstring."""

    def __init__(self, *args: Any, max_turns: int = 4, target_speedup: float | None = None,
                 reward: str = "cudaperf", format: str = "fast", allow_torch_ops: bool = False,
                 evaluator: str = DEFAULT_FACTORY, evaluator_kwargs: Mapping[str, Any] | None = None,
                 turn_score: str = "own", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if turn_score not in TURN_SCORES:
            raise ValueError(f"turn_score={turn_score!r}: use one of {', '.join(TURN_SCORES)}")
        self.turn_score = turn_score
        if not self.config.trainer.get("use_v1", False):
            raise ValueError("cudaperf_refine needs verl's V1 trainer (trainer.use_v1=True): the legacy "
                             "trainer keeps only the trajectory's total reward, so per-turn credit is lost")
        self.response_length = self.rollout_config.response_length
        self.env_config = EnvConfig(max_turns=max_turns, target_speedup=target_speedup, reward=reward,
                                    format=format, policy=Policy(allow_torch_ops=allow_torch_ops))
        self.evaluator_spec = (evaluator, _plain(evaluator_kwargs))
        self.end_ids = {i for i in (self.tokenizer.eos_token_id,
                                    self.tokenizer.convert_tokens_to_ids(END_OF_TURN)) if isinstance(i, int)}

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        task = task_from_row(kwargs.get("extra_info"))
        if task is None:
            raise ValueError("a cudaperf_refine row needs extra_info['task'] (verl_adapter.data.task_rows)")
        evaluator = shared_evaluator(*self.evaluator_spec)
        env = RefineEnv(self.env_config, evaluator=evaluator, sample=int(kwargs.get("session_id", 0) or 0))
        env.reset(task)
        state = _State(messages=[dict(m) for m in kwargs["raw_prompt"]], metrics={})
        state.tokens = await self.ct_build_initial_tokens(state.messages)
        request_id = uuid4().hex
        while len(state.mask) < self.response_length:
            step = await self._turn(state, env, evaluator, sampling_params, request_id)
            if step is None or step.done or not await self._feedback(state, step.feedback):
                break
        return self._output(state, env)

    async def _turn(self, state: _State, env: RefineEnv, evaluator: Any, sampling_params: dict[str, Any],
                    request_id: str) -> StepResult | None:
        """Generate one reply, merge it, evaluate it; None when the turn is not applicable."""
        start = len(state.mask)
        t0 = time.perf_counter()
        with simple_timer("generate_sequences", state.metrics):
            out = await self.server_manager.generate(request_id=request_id, prompt_ids=state.tokens,
                                                     sampling_params=sampling_params)
        merge, state.mask, logprobs = await self.ct_merge_assistant_token(
            state.tokens, out.token_ids, state.mask,
            state.logprobs if (state.logprobs or out.log_probs) else None,
            assistant_logprobs=out.log_probs or None)
        state.tokens, state.logprobs = merge.token_ids, logprobs or []
        text = self.tokenizer.decode(out.token_ids, skip_special_tokens=True)
        ended = bool(out.token_ids) and out.token_ids[-1] in self.end_ids
        reply = Generation(text, len(state.tokens) - len(out.token_ids), len(out.token_ids),
                           "stop" if ended else "length", time.perf_counter() - t0)
        step = await self.loop.run_in_executor(None, lambda: step_many([env], [reply], evaluator)[0])
        state.messages.append({"role": "assistant", "content": text})
        if not _applicable(step):
            state.mask[start:] = [0] * (len(state.mask) - start)  # the harness's fault: no gradient
            return None
        state.scores.append(float(step.reward))
        state.flagged.append(keeps_own_score(step.record.result.outcome))
        return step

    async def _feedback(self, state: _State, feedback: str) -> bool:
        """Append the feedback as the next user message; False when it does not fit the budget."""
        updated = [*state.messages, {"role": "user", "content": feedback}]
        merge, mask, logprobs = await self.ct_merge_context_msg(
            state.messages, updated, state.tokens, state.mask, state.logprobs or None)
        if len(mask) >= self.response_length:
            return False
        state.messages, state.tokens, state.mask = updated, merge.token_ids, mask
        state.logprobs = logprobs or []
        return True

    def _output(self, state: _State, env: RefineEnv) -> TurnScoredOutput:
        n = self.response_length
        mask = state.mask[:n]
        response = state.tokens[len(state.tokens) - len(state.mask):][:n]
        prompt = state.tokens[:len(state.tokens) - len(state.mask)]
        positions = score_positions(mask)[:len(state.scores)]
        held = held_scores(state.scores, [True] * len(state.scores), self.turn_score, state.flagged)
        values = held[:len(positions)]
        return TurnScoredOutput(
            prompt_ids=prompt, response_ids=response, response_mask=mask,
            response_logprobs=state.logprobs[:n] if state.logprobs else None,
            reward_score=float(sum(values)), num_turns=2 * len(env.history) + 1, metrics=state.metrics,
            turn_score_positions=positions, turn_score_values=values,
            extra_fields={"turn_scores": values, "tool_rewards": [],
                          "reward_extra_info": trajectory_summary(env)})


class _State:
    """The growing conversation of one trajectory, as messages and as runtime tokens."""

    def __init__(self, messages: list[dict[str, Any]], metrics: dict[str, Any]) -> None:
        self.messages, self.metrics = messages, metrics
        self.tokens: list[int] = []
        self.mask: list[int] = []
        self.logprobs: list[float] = []
        self.scores: list[float] = []
        self.flagged: list[bool] = []  # per scored turn: a policy violation


def _applicable(step: StepResult) -> bool:
    breakdown = step.record.reward_breakdown
    return breakdown is None or breakdown.details.get("applicable", 1.0) != 0.0


def trajectory_summary(env: RefineEnv) -> dict[str, float]:
    """Fixed keys (verl stacks them into columns): component means over the scored turns, first-turn and
    best-of-turns correctness, the best correct speedup, turns flagged as policy violations."""
    turns = env.history
    parts = [r.reward_breakdown for r in turns if r.reward_breakdown is not None]
    speedups = [r.speedup for r in turns if r.correct and r.speedup]
    return {"turns": float(len(turns)), "score_sum": float(sum(r.reward for r in turns)),
            "mean_gate": _mean([b.gate for b in parts]),
            "mean_speedup_term": _mean([b.speedup_term for b in parts]),
            "mean_structural_term": _mean([b.structural_term for b in parts]),
            "mean_ranker_term": _mean([b.ranker_term for b in parts]),
            "first_correct": float(bool(turns) and turns[0].correct),
            "best_correct": float(any(r.correct for r in turns)),
            "best_speedup": max(speedups, default=0.0),
            "violations": float(sum(r.result.outcome is Outcome.POLICY_VIOLATION for r in turns))}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _plain(value: Any) -> dict[str, Any]:
    """A YAML mapping (OmegaConf's DictConfig through hydra) as plain Python values."""
    if value is None:
        return {}
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(value):
            return dict(OmegaConf.to_container(value, resolve=True))  # type: ignore[arg-type]
    except ImportError:  # pragma: no cover - verl always brings omegaconf
        pass
    return dict(value)


__all__ = ["RefineAgentLoop", "TurnScoredOutput", "trajectory_summary"]
