"""Per-turn credit inside one verl sample: a trajectory is one row, its turns are segments of the row.

verl's agent loop returns one sample per trajectory: the response is reply_0 + feedback_0 + reply_1 + ...
with `response_mask` 1 on the replies (the policy's tokens) and 0 on the feedback (the environment's).
A registered advantage estimator sees only `token_level_rewards`, `response_mask` and the group `index`
(verl's `compute_advantage`), so the turns travel in those two tensors:

- the agent loop puts turn k's own unified-reward score s_k on the last token of reply k
  (`score_positions`); every other entry is 0, so the row's sum is the sum of its turns' scores;
- the estimator cuts the row into turns at the starts of the runs of 1 in the mask (`turn_segments`),
  reads s_k as the sum of the rewards of segment k (`segment_scores`), computes Kevin's discounted
  returns G_t = sum_{k>=t} gamma^(k-t) s_k with `cudaperf.train.credit.sample_rewards` (the TRL path's
  arithmetic), and makes them group-relative over **every turn of every trajectory** sharing the index:
  A_t = (G_t - mean) / (std + eps) (or G_t - mean without the std), given to every token of reply t.

A turn whose score is not applicable (a harness fault, not the policy's doing) ends the trajectory: the
agent loop masks its reply (0: no gradient) and gives it no score, so it counts 0 in earlier returns
(as in `train/credit.py`) and is left out of the group's statistics.

Covers: the pure arithmetic (torch tensors in, torch tensors out). Not covered: verl's registration
(`verl_adapter.estimator`), the agent loop (`verl_adapter.agent_loop`); nothing here imports verl.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from cudaperf.train.credit import sample_rewards


def turn_segments(mask_row: Sequence[int] | Any) -> list[tuple[int, int]]:
    """The replies of one row: (start, end) of each run of 1 in the mask, end exclusive."""
    values = [int(v) for v in (mask_row.tolist() if hasattr(mask_row, "tolist") else mask_row)]
    runs: list[tuple[int, int]] = []
    start = None
    for i, v in enumerate(values):
        if v and start is None:
            start = i
        elif not v and start is not None:
            runs.append((start, i))
            start = None
    if start is not None:
        runs.append((start, len(values)))
    return runs


def score_positions(mask_row: Sequence[int]) -> list[int]:
    """Where the agent loop puts each turn's score: the last token of each reply."""
    return [end - 1 for _, end in turn_segments(mask_row)]


def segment_scores(reward_row: Any, runs: Sequence[tuple[int, int]]) -> list[float]:
    """s_k: the rewards from the start of reply k up to the start of reply k+1 (the first turn also
    takes anything before it), so a score placed anywhere in its turn's segment counts for that turn."""
    values = [float(v) for v in reward_row.tolist()]
    bounds = [0] + [start for start, _ in runs[1:]] + [len(values)]
    return [sum(values[bounds[k]:bounds[k + 1]]) for k in range(len(runs))]


def turn_level_advantages(token_level_rewards: Any, response_mask: Any, index: Sequence[Hashable],
                          gamma: float, mode: str = "sum", norm_by_std: bool = True,
                          epsilon: float = 1e-6) -> tuple[Any, Any]:
    """(advantages, returns), each shaped like `response_mask`: reply t's tokens carry A_t and G_t,
    every other token 0 (see the module docstring). A group with a single turn in all gets mean 0 and
    std 1 (verl's GRPO does the same for a group of one)."""
    import torch

    rows = []
    for i in range(response_mask.shape[0]):
        runs = turn_segments(response_mask[i])
        scores = segment_scores(token_level_rewards[i], runs)
        returns = sample_rewards(scores, [True] * len(scores), "turn", gamma, mode)
        rows.append((runs, [float(g) for g in returns]))  # type: ignore[arg-type]
    stats = _group_stats(index, [g for _, g in rows])
    advantages = torch.zeros(response_mask.shape, dtype=torch.float32)
    returns_out = torch.zeros(response_mask.shape, dtype=torch.float32)
    for i, (runs, returns) in enumerate(rows):
        mean, std = stats[index[i]]
        for (start, end), g in zip(runs, returns, strict=True):
            a = (g - mean) / (std + epsilon) if norm_by_std else g - mean
            advantages[i, start:end] = a
            returns_out[i, start:end] = g
    mask = response_mask.to(torch.float32)
    return advantages * mask, returns_out * mask


def _group_stats(index: Sequence[Hashable], returns: Sequence[list[float]]) -> dict[Hashable, tuple[float,
                                                                                                      float]]:
    import statistics

    groups: dict[Hashable, list[float]] = {}
    for key, values in zip(index, returns, strict=True):
        groups.setdefault(key, []).extend(values)
    stats = {}
    for key, values in groups.items():
        if len(values) < 2:
            stats[key] = (0.0, 1.0)
        else:  # the sample std (n - 1), as torch.std in verl's GRPO
            stats[key] = (statistics.fmean(values), statistics.stdev(values))
    return stats


__all__ = ["score_positions", "segment_scores", "turn_level_advantages", "turn_segments"]
