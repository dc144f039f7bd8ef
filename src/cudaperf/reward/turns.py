"""Per-turn returns of a refinement trajectory (Kevin-style discounted credit for multi-turn training).

Not covered: advantage estimation across a group of trajectories (the trainer's adapters do that).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

TurnMode = Literal["sum", "max"]


def turn_returns(scores: Sequence[float], gamma: float = 0.4, mode: TurnMode = "sum") -> list[float]:
    """Per-turn returns of a refinement trajectory (Kevin, arXiv 2507.11948).

    "sum": turn t gets Σ_{k≥t} γ^{k−t}·s_k — a turn is credited for the improvements it enables later.
    "max": turn t gets max_{k≥t} γ^{k−t}·s_k. Kevin found sum with γ = 0.4 best (over max and γ = 0.8).
    """
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"turn_returns: gamma={gamma} must lie in [0, 1]")
    if mode not in ("sum", "max"):
        raise ValueError(f"turn_returns: mode={mode!r}: use 'sum' or 'max'")
    returns: list[float] = []
    later: float | None = None  # the return of turn t+1
    for s in reversed(scores):
        if later is None:
            current = float(s)
        elif mode == "sum":
            current = s + gamma * later
        else:
            current = max(float(s), gamma * later)
        returns.append(current)
        later = current
    return returns[::-1]
