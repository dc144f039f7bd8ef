"""The `Ranker` contract that both backends implement, and what callers build on it.

A ranker judges candidate solutions (source text, fast format) of one task on one input configuration:

- `score(candidate, task, config) -> float`: higher means faster. Scores of one ranker are comparable
  between candidates of the same task and configuration only; for the feature backend a score is the
  predicted log speed relative to the mean of the task's training implementations, so 0 is "a typical
  implementation" and a difference of 1 is a factor e (2.7x).
- `compare(a, b, task, config) -> float`: P(a is faster than b) in [0, 1], calibrated on training pairs;
  `compare(a, b) == 1 - compare(b, a)`.
- `score_many(candidates, task, config) -> list[float]`: the same as `score`, batched.

`task` is a `cudaperf.types.Task` (or a dataset `GeneratedTask`); `config` a configuration name. A
candidate the ranker cannot read (no kernel, host code that fails on meta tensors) still gets a score:
its unknown features are missing values, never an exception.

`reward_probability(ranker, candidate, task)` is the number the unified reward's ranker term expects
(`compute_reward(..., ranker_score=...)`, in [0, 1]): the mean over the task's configurations of
P(candidate faster than `reference`) when a reference source is given (C tasks: the naive CUDA port),
else of sigmoid(scale * score), the probability of beating a typical implementation.

Not covered: the backends (feature_ranker.py, lm_ranker.py), training and evaluation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Ranker(Protocol):
    """See the module docstring."""

    name: str

    def score(self, candidate: str, task: Any, config: str) -> float: ...

    def compare(self, a: str, b: str, task: Any, config: str) -> float: ...

    def score_many(self, candidates: Sequence[str], task: Any, config: str) -> list[float]: ...

    def probability_of_score(self, score: float) -> float: ...


def config_names(task: Any) -> tuple[str, ...]:
    from cudaperf.ranker.problem import Problem

    return Problem.of(task).config_names


def reward_probability(ranker: Ranker, candidate: str, task: Any, reference: str | None = None) -> float:
    """In [0, 1]: the unified reward's `ranker_score` (see the module docstring)."""
    configs = config_names(task)
    if not configs:
        return 0.5
    if reference is not None:
        probs = [ranker.compare(candidate, reference, task, c) for c in configs]
    else:
        probs = [ranker.probability_of_score(ranker.score(candidate, task, c)) for c in configs]
    finite = [p for p in probs if math.isfinite(p)]
    return sum(finite) / len(finite) if finite else 0.5
