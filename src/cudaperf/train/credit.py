"""How per-turn credit reaches TRL's loss, which takes exactly one reward per sample.

The scheme ('turn' credit, Kevin, arXiv 2507.11948): every turn of a trajectory is its own GRPO sample
(prompt = the agent's context for that turn, completion = the reply). Its reward is the turn's return

    G_t = sum_{k>=t} gamma^(k-t) * s_k        (or max_{k>=t} gamma^(k-t) * s_k with mode 'max')

where s_k is turn k's score: its own unified-reward score ('own'), or with `turn_score="best_so_far"` the
best of turns 0..k, the kernel the agent holds after turn k (a refinement that fails keeps the earlier one,
so a turn that tries a riskier, faster strategy after a correct one loses nothing against repeating it,
where with its own score a failure costs the whole correct bonus); a turn judged a policy violation
(cheating or tampering) scores its own even then, so an attempted hack stays penalised. A task's K
trajectories of T turns give K*T samples, and they are TRL's group (`num_generations` = K*T), so the
group-relative advantage of a turn is its return against the mean (and std) of the returns of all turns of
all trajectories of the task, as in Kevin.

'trajectory' credit: one sample per trajectory (its completion holds every reply and, masked out by
env_mask, the feedback between them); its reward is G_0, the return of the first turn. Every reply token
of the trajectory then shares one advantage: there is no per-turn credit in this mode.

A turn whose score is not applicable (a harness fault, SKIPPED: not the policy's doing) contributes 0 to
the returns of earlier turns (in either `turn_score`) and its own sample gets no reward (None: TRL leaves
it out of the group baseline and gives it advantage 0).

Covers: the turns' scores (`held_scores` and `keeps_own_score`, which the verl agent loop uses too), the
returns per sample (`sample_rewards`) and `TurnReturnReward`, the TRL reward function that hands them to
GRPOTrainer and logs the reward's components. Not covered: the returns' formula itself
(`cudaperf.reward.turn_returns`), rollouts (`rollout.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cudaperf.reward import turn_returns
from cudaperf.types import Outcome

TURN_SCORES = ("own", "best_so_far")  # what s_k is (the module docstring)
COMPONENT_COLUMNS = ("reward_gate", "reward_speedup_term", "reward_structural_term", "reward_ranker_term",
                     "turn_correct")


def sample_rewards(scores: Sequence[float], applicable: Sequence[bool], credit: str, gamma: float,
                   mode: str = "sum", turn_score: str = "own",
                   flagged: Sequence[bool] | None = None) -> list[float | None]:
    """One trajectory's sample rewards: per turn ('turn' credit) or one for the trajectory. `flagged`:
    the turns judged policy violations (they score their own under 'best_so_far'; default none)."""
    held = held_scores(scores, applicable, turn_score, flagged)
    counted = [s if ok else 0.0 for s, ok in zip(held, applicable, strict=True)]
    returns = turn_returns(counted, gamma, mode)  # type: ignore[arg-type]
    if credit == "turn":
        return [g if ok else None for g, ok in zip(returns, applicable, strict=True)]
    if credit == "trajectory":
        return [returns[0] if any(applicable) else None]
    raise ValueError(f"credit={credit!r}: use 'turn' or 'trajectory'")


def held_scores(scores: Sequence[float], applicable: Sequence[bool], turn_score: str,
                flagged: Sequence[bool] | None = None) -> list[float]:
    """s_k for each turn under `turn_score` (the module docstring): the scores themselves ('own'), or each
    turn's best so far ('best_so_far'; a turn in `flagged` keeps its own)."""
    if turn_score not in TURN_SCORES:
        raise ValueError(f"turn_score={turn_score!r}: use one of {TURN_SCORES}")
    if turn_score == "own":
        return list(scores)
    return _best_so_far(scores, applicable, flagged if flagged is not None else [False] * len(scores))


def keeps_own_score(outcome: Outcome) -> bool:
    """Whether a turn with this outcome scores its own under 'best_so_far' (`held_scores`' `flagged`): a
    policy violation (cheating or tampering), not a failed attempt such as a syntax error. The TRL rollout
    and the verl agent loop both ask here."""
    return outcome is Outcome.POLICY_VIOLATION


def _best_so_far(scores: Sequence[float], applicable: Sequence[bool], own: Sequence[bool]) -> list[float]:
    """Each turn's best score among the applicable, unflagged turns up to it (its own where none came
    before, and always for a turn in `own`)."""
    best: float | None = None
    held = []
    for score, ok, alone in zip(scores, applicable, own, strict=True):
        if ok and not alone:
            best = score if best is None else max(best, score)
        held.append(score if alone or best is None else best)
    return held


class TurnReturnReward:
    """TRL reward function: the `turn_return` column the rollout computed (see the module docstring).
    With TRL's `log_metric`, the batch means of the reward's components are logged under `reward/...`."""

    __name__ = "cudaperf_turn_return"

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any],
                 **kwargs: Any) -> list[float | None]:
        values = kwargs.get("turn_return")
        if values is None:
            raise KeyError("no 'turn_return' column: TurnReturnReward needs cudaperf's multi-turn "
                           "rollout_func")
        log_metric = kwargs.get("log_metric")
        if callable(log_metric):
            for column in COMPONENT_COLUMNS:
                numbers = [float(v) for v in kwargs.get(column) or () if v is not None]
                if numbers:
                    log_metric(f"reward/{column.removeprefix('reward_')}", sum(numbers) / len(numbers))
        return [None if v is None else float(v) for v in values]


__all__ = ["COMPONENT_COLUMNS", "TURN_SCORES", "TurnReturnReward", "held_scores", "keeps_own_score",
           "sample_rewards"]
