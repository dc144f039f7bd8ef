"""The unified reward of one evaluation: `compute_reward(result, features, ranker_score, config)`.

    reward = correct_bonus + speedup_term + structural_term + ranker_term     if the gate is open
           = wrong_reward                                                      otherwise

Not covered: the structural score itself (`structural.py`), per-turn returns (`turns.py`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cudaperf.reward.config import RewardConfig, transform_speedup
from cudaperf.reward.structural import structural_score
from cudaperf.reward.values import finite, positive
from cudaperf.types import EvalResult, KernelFeatures, Outcome, RewardBreakdown, Severity

# Outcomes that say nothing about the candidate (the harness or the machine failed): adapters report
# "not applicable" for them instead of punishing the policy for our fault.
NOT_APPLICABLE_OUTCOMES: frozenset[Outcome] = frozenset({Outcome.SKIPPED, Outcome.HARNESS_ERROR})


DEFAULT_CONFIG = RewardConfig()  # frozen: one shared default is safe

# The timing baselines whose speedups a reward reads (`_baseline_pair`): a PyTorch task's eager and
# torch.compile, a C task's naive CUDA port. The serial C time is never read. An evaluator that times only
# these (`cudaperf.train` RL's `timing_baselines='reward'`) loses no reward term.
SPEEDUP_BASELINES: tuple[str, ...] = ("eager", "compile", "naive_cuda")


def is_applicable(result: EvalResult) -> bool:
    """False when the outcome says nothing about the candidate (SKIPPED, HARNESS_ERROR)."""
    return result.outcome not in NOT_APPLICABLE_OUTCOMES


def compute_reward(
    result: EvalResult,
    features: Sequence[KernelFeatures] = (),
    ranker_score: float | None = None,
    config: RewardConfig = DEFAULT_CONFIG,
    *,
    kernel_time_ms: Mapping[str, float] | None = None,
) -> RewardBreakdown:
    """The reward of one evaluation; never raises on odd records (NaN speedups, partial features).

    `features`: the candidate's kernels (any order). `ranker_score`: in [0, 1], or None. `kernel_time_ms`:
    GPU time per kernel name from the coverage profiler; a kernel absent from a non-empty mapping never
    ran (default: `result.kernel_time_ms`).
    `details` holds the inputs and intermediate values as floats (see the keys in docs/reward.md).
    """
    details: dict[str, float] = {"applicable": float(is_applicable(result)), "correct": float(result.correct)}
    eager, compiled = _baseline_pair(result)
    for key, value in (("speedup_vs_eager", eager), ("speedup_vs_compile", compiled)):
        if value is not None:
            details[key] = value
    gated = _gating_flags(result, config)
    details["gating_flags"] = float(gated)
    gate_open = result.correct and gated == 0
    paid = gate_open or (not config.correctness_gate and result.outcome is Outcome.INCORRECT and gated == 0)
    if not paid:
        details["base"] = config.wrong_reward
        return RewardBreakdown(total=config.wrong_reward, gate=0.0, details=details)
    factor = _coverage_factor(result, config, details)
    speed = _speed_term(result, config, details)
    speed = speed * factor if speed > 0 else speed
    structure = 0.0
    if gate_open:  # structure only for CORRECT results (issue #3)
        times = kernel_time_ms if kernel_time_ms is not None else result.kernel_time_ms
        structure = factor * _structural_term(result, features, times, config, details)
    ranker = factor * _ranker_term(ranker_score, config, details)
    base = config.correct_bonus if gate_open else config.wrong_reward
    details["base"] = base
    total = base + speed + structure + ranker
    return RewardBreakdown(total=total, gate=float(gate_open), speedup_term=speed, structural_term=structure,
                           ranker_term=ranker, details=details)


def _gating_flags(result: EvalResult, config: RewardConfig) -> int:
    codes = set(config.gate_flag_codes)
    return sum(1 for f in result.flags or ()
               if (config.gate_error_flags and f.severity is Severity.ERROR) or f.code in codes)


def _coverage_factor(result: EvalResult, config: RewardConfig, details: dict[str, float]) -> float:
    coverage = finite(result.coverage)
    if coverage is not None:
        details["coverage"] = coverage
    factor = min(1.0, max(0.0, coverage)) if (config.coverage_weighting and coverage is not None) else 1.0
    details["coverage_factor"] = factor
    return factor


def _baseline_pair(result: EvalResult) -> tuple[float | None, float | None]:
    """(simple baseline, strong baseline) speedups. PyTorch tasks: eager and torch.compile. C tasks have
    neither; their simple baseline is the naive one-thread-per-iteration CUDA port (the serial C time is
    no fair rival for a GPU kernel) and they have no strong baseline."""
    eager = result.speedup_vs_eager
    if eager is None:
        eager = result.speedups.get("naive_cuda")
    return positive(eager), positive(result.speedup_vs_compile)


def _speed_term(result: EvalResult, config: RewardConfig, details: dict[str, float]) -> float:
    eager, compiled = _baseline_pair(result)
    if config.speedup_transform == "milestones":
        rungs = _milestones_reached(eager, compiled, config)
        details["milestones"] = float(rungs)
        return config.speedup_weight * rungs
    speedup = _baseline_speedup(eager, compiled, config.baseline)
    if speedup is None:  # not timed (or a nonsensical ratio): neutral for log, bonus only for linear
        details["speedup_missing"] = 1.0
        return 0.0
    details["speedup"] = speedup
    return config.speedup_weight * transform_speedup(speedup, config)


def _baseline_speedup(eager: float | None, compiled: float | None, baseline: str) -> float | None:
    if baseline == "eager":
        return eager
    if baseline == "compile":
        return compiled
    measured = [s for s in (eager, compiled) if s is not None]
    return min(measured) if measured else None


def _milestones_reached(eager: float | None, compiled: float | None, config: RewardConfig) -> int:
    def beats(s: float | None, t: float) -> bool:
        return s is not None and s > t

    rungs: list[bool] = []
    for t in config.milestone_thresholds:
        if config.baseline == "both":
            rungs += [beats(eager, t), beats(eager, t) and beats(compiled, t)]
        else:
            rungs.append(beats(eager if config.baseline == "eager" else compiled, t))
    reached = 0
    for ok in rungs:  # a rung counts only if every earlier one does
        if not ok:
            break
        reached += 1
    return reached


def _structural_term(result: EvalResult, features: Sequence[KernelFeatures],
                     times: Mapping[str, float] | None, config: RewardConfig,
                     details: dict[str, float]) -> float:
    if config.structural_weight == 0:
        return 0.0
    coverage = finite(result.coverage)
    if coverage is not None and coverage <= 0:  # the profiler saw none of the candidate's kernels run
        details["structural.no_own_kernel_ran"] = 1.0
        return 0.0
    score, parts = structural_score(features, config.structural_weights, kernel_time_ms=times,
                                    require_launch_evidence=config.require_launch_evidence)
    details.update({f"structural.{k}": v for k, v in parts.items()})
    details["structural_score"] = score
    return config.structural_weight * score


def _ranker_term(ranker_score: float | None, config: RewardConfig, details: dict[str, float]) -> float:
    score = finite(ranker_score)
    if score is None or config.ranker_weight == 0:
        return 0.0
    details["ranker_score"] = score
    return config.ranker_weight * min(1.0, max(0.0, score))
