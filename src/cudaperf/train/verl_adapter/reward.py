"""verl's custom reward function for cudaperf rows: the unified reward with each component in the dict.

`compute_score(data_source, solution_str, ground_truth, extra_info, **reward_kwargs)` evaluates the
reply as turn 0 of the refinement environment would (code extraction, the evaluator named by
`evaluator`/`evaluator_kwargs`, the shared one of this process) and returns
`cudaperf.train.reward_functions.compute_score`'s dict: "score" (the unified reward) and every component
("gate", "correct", "speedup_term", "structural_term", "ranker_term", "structural_score",
"coverage_factor", "applicable"), always the same keys (verl stacks them into columns).

Point `reward.custom_reward_function.path` at this file (or the installed module) and `name` at
`compute_score`. With the refine agent loop (`verl_adapter.agent_loop`) the loop scores every turn
itself, since the feedback needs the evaluation, and verl skips the reward function; this function serves
single-turn rows (`agent_name: single_turn_agent`) and validation.

Not covered: multi-turn credit (the agent loop and `verl_adapter.estimator`), the reward's formula
(`cudaperf.reward`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cudaperf.agent.environment import EnvConfig, RefineEnv
from cudaperf.anticheat.policy import Policy
from cudaperf.train import reward_functions
from cudaperf.train.verl_adapter.data import task_from_row
from cudaperf.train.verl_adapter.evaluators import DEFAULT_FACTORY, shared_evaluator


class TurnZeroEvaluation:
    """An `EvaluateFn`: each text as the first reply of a fresh environment on its row's task."""

    def __init__(self, evaluator: str, evaluator_kwargs: Mapping[str, Any] | None, env: EnvConfig) -> None:
        self.evaluator, self.evaluator_kwargs, self.env = evaluator, dict(evaluator_kwargs or {}), env

    def __call__(self, texts: list[str], rows: list[dict[str, Any]]) -> list[Any]:
        out = []
        for text, row in zip(texts, rows, strict=True):
            task = task_from_row(row)
            if task is None:
                out.append(None)  # not a cudaperf row: not applicable
                continue
            env = RefineEnv(self.env, evaluator=shared_evaluator(self.evaluator, self.evaluator_kwargs))
            env.reset(task)
            out.append(env.step(text).record.result)
        return out


def compute_score(data_source: str | None, solution_str: str, ground_truth: Any,
                  extra_info: Mapping[str, Any] | None = None, *, preset: str = "cudaperf",
                  evaluator: str = DEFAULT_FACTORY, evaluator_kwargs: Mapping[str, Any] | None = None,
                  allow_torch_ops: bool = False, **kwargs: Any) -> dict[str, float]:
    """See the module docstring; `reward_kwargs` in verl's configuration set the keyword arguments."""
    env = EnvConfig(max_turns=1, reward=preset, policy=Policy(allow_torch_ops=allow_torch_ops))
    evaluate = TurnZeroEvaluation(evaluator, evaluator_kwargs, env)
    return reward_functions.compute_score(data_source, solution_str, ground_truth, extra_info,
                                          preset=preset, evaluate_fn=evaluate, **kwargs)


__all__ = ["TurnZeroEvaluation", "compute_score"]
