"""The bootstrap interval of a measured speedup (`cudaperf.speedup_confidence`) and the comparison's
fast_1 counted only where that interval clears 1.0x (`train.compare_table.run_figures`)."""

from __future__ import annotations

import numpy as np
import pytest

from cudaperf.agent.trajectory import Trajectory, TurnRecord
from cudaperf.evaluate import speedups_by_baseline
from cudaperf.speedup_confidence import speedup_interval, surely_faster
from cudaperf.train.compare_table import run_figures, table_row
from cudaperf.types import ConfigTiming, EvalResult, Outcome, Timing


def _timing(samples_ms) -> Timing:
    s = np.asarray(samples_ms, float)
    q1, q3 = np.quantile(s, [0.25, 0.75])
    return Timing(median_ms=float(np.median(s)), iqr_ms=float(q3 - q1), min_ms=float(s.min()),
                  mean_ms=float(s.mean()), n_samples=len(s), samples_ms=tuple(float(v) for v in s))


def _noisy(median_ms: float, seed: int, n: int = 33, noise: float = 0.05) -> list[float]:
    return list(median_ms * (1 + noise * np.random.default_rng(seed).standard_normal(n)))


def _config(name: str, candidate_ms: float, naive_ms: float, seed: int = 0) -> ConfigTiming:
    return ConfigTiming(config=name, candidate=_timing(_noisy(candidate_ms, seed)),
                        baselines={"naive_cuda": _timing(_noisy(naive_ms, seed + 100))})


def test_a_copy_of_the_baseline_is_not_surely_faster():
    timings = [_config("small", 1.0, 1.0), _config("large", 2.0, 2.0, seed=1)]
    interval = speedup_interval(timings, "naive_cuda")
    assert interval.low < 1.0 < interval.high
    assert not surely_faster(interval)


def test_a_kernel_twice_as_fast_is_surely_faster():
    timings = [_config("small", 0.5, 1.0), _config("large", 1.0, 2.0, seed=1)]
    interval = speedup_interval(timings, "naive_cuda")
    assert surely_faster(interval)
    assert interval.low < interval.estimate < interval.high
    assert interval.estimate == pytest.approx(2.0, rel=0.1)


def test_the_estimate_is_the_evaluators_headline_speedup():
    timings = (_config("small", 0.7, 1.0), _config("large", 1.1, 2.0, seed=1),
               _config("odd", 3.0, 2.5, seed=2))
    interval = speedup_interval(timings, "naive_cuda")
    assert interval.estimate == pytest.approx(speedups_by_baseline(timings)["naive_cuda"], rel=1e-12)
    assert interval.configs == 3


def test_the_same_seed_gives_the_same_interval():
    timings = [_config("small", 0.9, 1.0)]
    assert speedup_interval(timings, "naive_cuda", seed=3) == speedup_interval(timings, "naive_cuda", seed=3)


def test_a_higher_confidence_gives_a_wider_interval():
    timings = [_config("small", 0.9, 1.0)]
    narrow, wide = (speedup_interval(timings, "naive_cuda", confidence=c) for c in (0.5, 0.99))
    assert wide.low < narrow.low and narrow.high < wide.high


def test_without_samples_of_the_baseline_there_is_no_interval():
    timing = ConfigTiming(config="small", candidate=_timing([1.0, 1.1]),
                          baselines={"naive_cuda": Timing(1.0, 0.1, 0.9, 1.0, 5)})
    assert speedup_interval([timing], "naive_cuda") is None
    assert speedup_interval([timing], "eager") is None
    assert not surely_faster(None)


def test_an_impossible_confidence_is_refused():
    with pytest.raises(ValueError, match="confidence"):
        speedup_interval([_config("small", 1.0, 1.0)], "naive_cuda", confidence=1.0)


def _trajectory(task_id: str, candidate_ms: float) -> Trajectory:
    timings = (_config("small", candidate_ms, 1.0),)
    result = EvalResult(task_id, f"{task_id}/s0", Outcome.CORRECT, timings=timings,
                        speedups=speedups_by_baseline(timings))
    turn = TurnRecord(task_id=task_id, sample=0, turn=0, prompt=(), response="", code="code", result=result,
                      reward=1.0, feedback="", baseline="naive_cuda",
                      speedup=result.speedups["naive_cuda"], done=True)
    return Trajectory(task_id, 0, (turn,))


def test_fast_1_sure_counts_only_kernels_faster_beyond_the_noise():
    # a copy of the baseline on each of ten tasks, and one kernel twice as fast
    trajectories = [_trajectory(f"copy{k}", 1.0) for k in range(10)] + [_trajectory("fast", 0.5)]
    figures = run_figures(trajectories)
    assert figures.fast_1_sure == pytest.approx(1 / 11)
    assert figures.fast_1 >= figures.fast_1_sure


def test_a_run_from_before_the_figure_leaves_its_cell_empty():
    old = {"tasks": 4, "first_turn_correct": 0.5, "fast_1": 0.25}
    row = table_row([0], [old])
    assert row["fast_1_sure"]["mean"] is None and row["fast_1"]["mean"] == 0.25
