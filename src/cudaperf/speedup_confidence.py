"""How sure a measured speedup is: a bootstrap interval of the geometric-mean speedup over configurations,
from the timing samples the evaluator keeps beside each median.

A kernel that does what its baseline does measures at 1.0x give or take the timing noise (several
percent for microsecond kernels), so "faster than 1.0x" alone counts coin flips.
`speedup_interval` resamples each configuration's candidate and baseline samples (independently, with
replacement), recomputes the headline speedup (the geometric mean over configurations of the ratio of
medians, as `evaluate.speedups_by_baseline`), and takes the quantiles of those resamples;
`surely_faster` asks whether the interval's low end clears a threshold. Hand-written: the statistic is a
ratio of medians combined across configurations, which `scipy.stats.bootstrap` would need reshaping for
and which is a few lines of numpy here.

Not covered: paired (per-round) resampling, which the interleaved bench would allow but the baselines
timed apart from it (serial C) would not; the evaluator's own noise checks (`cudaperf.timing`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cudaperf.types import ConfigTiming


@dataclass(frozen=True)
class SpeedupInterval:
    """A headline speedup and its bootstrap interval: each end is a one-sided bound at
    (1 + confidence) / 2 (confidence 0.90: `low` is a one-sided 95% lower bound)."""

    estimate: float
    low: float
    high: float
    confidence: float
    configs: int


def speedup_interval(timings: Sequence[ConfigTiming], baseline: str, *, confidence: float = 0.90,
                     resamples: int = 2000, seed: int = 0) -> SpeedupInterval | None:
    """The interval of the speedup over `baseline` (None when no configuration has samples of both the
    candidate and the baseline). Deterministic for a given `seed`."""
    if not 0 < confidence < 1 or resamples < 1:
        raise ValueError(f"confidence in (0, 1) and resamples >= 1, got {confidence}, {resamples}")
    pairs = [(np.asarray(t.candidate.samples_ms, float), np.asarray(b.samples_ms, float))
             for t in timings if (b := t.baseline_timing(baseline)) is not None
             and len(t.candidate.samples_ms) and len(b.samples_ms)]
    if not pairs:
        return None
    rng = np.random.default_rng(seed)
    log_ratio = np.zeros(resamples)
    estimate = 0.0
    for candidate, base in pairs:
        log_ratio += np.log(_resampled_medians(base, resamples, rng)
                            / _resampled_medians(candidate, resamples, rng))
        estimate += float(np.log(np.median(base) / np.median(candidate)))
    tail = (1 - confidence) / 2
    low, high = np.quantile(log_ratio / len(pairs), [tail, 1 - tail])
    return SpeedupInterval(estimate=float(np.exp(estimate / len(pairs))), low=float(np.exp(low)),
                           high=float(np.exp(high)), confidence=confidence, configs=len(pairs))


def _resampled_medians(samples: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    return np.median(samples[rng.integers(0, len(samples), (resamples, len(samples)))], axis=1)


def surely_faster(interval: SpeedupInterval | None, than: float = 1.0) -> bool:
    """Whether the interval's low end is above `than` (False when there is no interval)."""
    return interval is not None and interval.low > than
