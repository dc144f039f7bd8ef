"""The unified reward: a pure function of an `EvalResult`, the kernels' `KernelFeatures` and a ranker score.

    reward = correct_bonus + speedup_term + structural_term + ranker_term     if the gate is open
           = wrong_reward                                                      otherwise

The gate is open only for a CORRECT result that carries no gating flag (any flag of severity ERROR, e.g.
`impossible_speed`, or a code listed in `RewardConfig.gate_flag_codes`). Every weight and transform is a
field of `RewardConfig`; named presets reproduce published recipes (`kevin`, `cuda-agent`) and ours
(`cudaperf`, the defaults of `RewardConfig`), see `get_preset`. `turn_returns` turns per-turn scores into
Kevin-style discounted returns for multi-turn training.

The structural score (`structural_score`) is a number in [0, 1] computed from static (and, when measured,
dynamic) features of the kernels. What it claims: for the same task, kernels that coalesce their global
accesses, avoid shared-memory bank conflicts, spills and local memory, keep enough warps resident, use
vector loads, reach a large share of their roofline and use tensor cores where the work is compute-bound
are *usually* faster; the score rewards those habits so that the policy gets a signal that is less noisy
than a timing and points at causes. What it does not claim: that a higher score means a faster kernel
(the measured speedup is the judge; the structural term is small so it cannot outweigh speed), that the
static classes are exact (an access the analysis cannot classify is neutral, not bad), or anything about
kernels that never ran: structure is credited only for results that are CORRECT, and a kernel that the
profiler says never launched contributes 0 (no reward for a beautiful kernel that is never launched).

Not covered: running the evaluator, the structural analysis or the ranker (this module only reads their
records); TRL and verl wiring (`cudaperf.train.reward_functions`); per-turn advantage estimation beyond
`turn_returns`. No I/O and no torch: it loads in trainer processes and Ray actors as they are.
"""

from __future__ import annotations

import enum
import importlib
import itertools
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from cudaperf.kernel_names import kernel_identifier
from cudaperf.types import (
    CoalescingClass,
    EvalResult,
    KernelFeatures,
    MemoryAccess,
    Outcome,
    RewardBreakdown,
    Severity,
)

SpeedupTransform = Literal["log", "clipped", "linear", "milestones"]
Baseline = Literal["eager", "compile", "both"]
TurnMode = Literal["sum", "max"]

SPEEDUP_TRANSFORMS: tuple[str, ...] = ("log", "clipped", "linear", "milestones")
BASELINES: tuple[str, ...] = ("eager", "compile", "both")

# Keys this module reads from `KernelFeatures.dynamic` and `KernelFeatures.sass` (agreed with the analysis
# side; a key that is absent simply leaves the component missing, i.e. neutral).
DYNAMIC_GPU_TIME_MS = "gpu_time_ms"  # GPU time of this kernel in the timed run (0: never launched)
DYNAMIC_LAUNCHES = "launches"  # number of launches seen by a profiler (0: never launched)
DYNAMIC_ROOFLINE_FRACTION = "roofline_fraction"  # achieved / attainable throughput at its intensity, [0, 1]
SASS_LOCAL_KEYS: tuple[str, ...] = ("local", "ldl", "stl")
SASS_TENSOR_KEYS: tuple[str, ...] = ("hmma", "hgmma", "imma", "qgmma", "wgmma")
SASS_VECTOR_KEYS: tuple[str, ...] = ("ldg128", "stg128", "ldg64", "stg64")

# Outcomes that say nothing about the candidate (the harness or the machine failed): adapters report
# "not applicable" for them instead of punishing the policy for our fault.
NOT_APPLICABLE_OUTCOMES: frozenset[Outcome] = frozenset({Outcome.SKIPPED, Outcome.HARNESS_ERROR})


# --------------------------------------------------------------------------------------------------
# Configuration


@dataclass(frozen=True)
class StructuralWeights:
    """How the structural score weighs its components (each component is a value in [0, 1]).

    The score of one kernel is the weighted mean of its applicable components; a component whose input
    is missing takes `neutral`, one that does not apply (no shared memory → no bank conflicts) is left out.
    """

    coalescing: float = 0.30
    """Share of global accesses that are coalesced or broadcast (stride-c counts 1/c, uncoalesced 0).
    The largest weight: uncoalesced global traffic is the most common reason a kernel is slow."""
    occupancy: float = 0.15
    """Theoretical occupancy divided by `occupancy_saturation`, capped at 1."""
    bank_conflicts: float = 0.10
    """Mean of 1/degree over shared-memory accesses (1 = conflict-free, 1/32 = fully serialised)."""
    synchronization: float = 0.05
    """1 − (likely-redundant barriers / barriers). Divergent barriers are not here: see
    `divergent_barrier_factor`."""
    spills: float = 0.10
    """1 / (1 + spilled bytes / `spill_scale_bytes`), capped at `local_memory_factor` when the kernel
    uses local memory (stack frame or LDL/STL)."""
    vectorization: float = 0.10
    """Share of global accesses made with vector (64/128-bit) instructions."""
    intensity: float = 0.10
    """Measured share of the roofline at the kernel's arithmetic intensity (`dynamic["roofline_fraction"]`);
    missing (neutral) when only static features are known."""
    tensor_cores: float = 0.10
    """1 when tensor-core instructions appear in the SASS, 0 when they do not; applies only where the
    roofline regime is "compute" (a memory-bound kernel gains nothing from them)."""
    occupancy_saturation: float = 0.5
    """Occupancy beyond which more resident warps earn nothing: past ~50% latency is usually hidden, and
    good kernels often trade occupancy for registers and shared memory (Volkov, GTC 2010)."""
    divergent_barrier_factor: float = 0.0
    """Multiplies a kernel's score when it has a barrier under a thread-dependent condition (a hard
    penalty: that is undefined behaviour — a hang or silent wrong results on other inputs or GPUs)."""
    local_memory_factor: float = 0.75
    """Cap on the `spills` component when the kernel uses local memory (usually a dynamically indexed
    local array), spilled or not."""
    spill_scale_bytes: float = 128.0
    """Spilled bytes (stores + loads) at which the `spills` component falls to 1/2."""
    neutral: float = 0.5
    """Value given to a component whose input is missing, so that missing analysis neither helps nor hurts
    much; missing components are listed in the details."""

    def __post_init__(self) -> None:
        negative = [n for n in _COMPONENT_NAMES if getattr(self, n) < 0]
        if negative:
            raise ValueError(f"StructuralWeights: {', '.join(negative)} must be >= 0 (set a weight to 0 to drop it)")
        if sum(getattr(self, n) for n in _COMPONENT_NAMES) <= 0:
            raise ValueError("StructuralWeights: all component weights are 0; set RewardConfig.structural_weight=0 "
                             "to switch the structural term off instead")
        for name in ("divergent_barrier_factor", "local_memory_factor", "neutral"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"StructuralWeights.{name}={getattr(self, name)} must lie in [0, 1]")
        if not 0.0 < self.occupancy_saturation <= 1.0:
            raise ValueError(f"StructuralWeights.occupancy_saturation={self.occupancy_saturation} must lie in (0, 1]")
        if self.spill_scale_bytes <= 0:
            raise ValueError(f"StructuralWeights.spill_scale_bytes={self.spill_scale_bytes} must be > 0")


_COMPONENT_NAMES = ("coalescing", "occupancy", "bank_conflicts", "synchronization", "spills",
                    "vectorization", "intensity", "tensor_cores")


@dataclass(frozen=True)
class RewardConfig:
    """Every knob of the unified reward. The defaults are the `cudaperf` preset (see `cudaperf()`)."""

    correctness_gate: bool = True
    """Pay the speed and ranker terms only to CORRECT results. False is an ablation, not a training
    setting: results that ran but were INCORRECT then get `wrong_reward` + speed + ranker terms when they
    carry timings. Structure is never paid to a result that is not CORRECT, gate or no gate."""
    correct_bonus: float = 1.0
    """Added once when the gate is open: the value of merely being correct (Kevin: 0.3, CUDA Agent: 1)."""
    wrong_reward: float = 0.0
    """The whole reward of any result that is not CORRECT, or is gated by a flag (CUDA Agent: −1).
    One value for every failure: partial credit for compiling distracted Kevin's policy."""
    speedup_transform: SpeedupTransform = "log"
    """How the speedup becomes the speed term: "log" ln(s), "linear" s, "clipped" s within the clip
    bounds (both apply the bounds when set; "clipped" insists on them), "milestones" the number of
    thresholds beaten (see `milestone_thresholds`)."""
    speedup_weight: float = 1.0
    """Multiplies the transformed speedup (for milestones: the value of each rung)."""
    clip_min: float | None = 0.5
    """Lower bound applied to the speedup before a continuous transform (None: unbounded). With "log"
    it is required, so that a very slow correct kernel never scores below a wrong one."""
    clip_max: float | None = 10.0
    """Upper bound applied to the speedup before a continuous transform (None: unbounded). Caps the pull
    of rare huge speedups, which are mostly measurement artefacts or weak baselines (CUDA-L1 clips too)."""
    baseline: Baseline = "both"
    """Which measured speedup feeds the speed term: "eager", "compile", or "both" = against the faster of
    the two that were measured (min of the speedups). For milestones "both" makes each threshold two
    rungs: beat eager, then beat eager and torch.compile (an unmeasured baseline is never beaten)."""
    milestone_thresholds: tuple[float, ...] = (1.05,)
    """Speedups to beat strictly, in increasing order, for "milestones"; a rung counts only if every
    earlier rung does (CUDA Agent: 1.05, i.e. more than 5% faster)."""
    structural_weight: float = 0.2
    """Weight of the structural score (in [0, 1]). 0.2 < ln(1.25): perfect structure is worth less than a
    25% speedup, so structure breaks ties between kernels of similar speed but cannot dominate speed."""
    ranker_weight: float = 0.1
    """Weight of the ranker score (expected in [0, 1], e.g. its probability that the candidate beats the
    reference). Small (< ln(1.11)) because a learned proxy invites reward hacking; 0 when no score."""
    structural_weights: StructuralWeights = field(default_factory=StructuralWeights)
    """Per-feature weights and constants of the structural score."""
    coverage_weighting: bool = True
    """Scale every positive credit (speed gain, structure, ranker) by the coverage — the share of GPU time
    spent in the candidate's own kernels (Dr. Kernel) — so torch fallbacks and decoy kernels earn less.
    It never softens a penalty: a negative speed term is not scaled. Ignored when coverage is unknown."""
    gate_error_flags: bool = True
    """Close the gate for any flag of severity ERROR (e.g. `impossible_speed`), even if the evaluator
    left the outcome CORRECT."""
    gate_flag_codes: tuple[str, ...] = ()
    """Flag codes that close the gate whatever their severity (e.g. ("low_coverage",))."""
    require_launch_evidence: bool = False
    """Credit structure only for kernels that a profiler saw run. Off by default because coverage is not
    measured on every machine; kernels known NOT to have run never earn structure either way."""

    def __post_init__(self) -> None:
        if self.speedup_transform not in SPEEDUP_TRANSFORMS:
            raise ValueError(f"RewardConfig.speedup_transform={self.speedup_transform!r}: use one of {SPEEDUP_TRANSFORMS}")
        if self.baseline not in BASELINES:
            raise ValueError(f"RewardConfig.baseline={self.baseline!r}: use one of {BASELINES}")
        for name in ("speedup_weight", "structural_weight", "ranker_weight"):
            if getattr(self, name) < 0:
                raise ValueError(f"RewardConfig.{name}={getattr(self, name)} must be >= 0 (set it to 0 to drop the term)")
        self._check_clip()
        self._check_milestones()
        self._check_correct_above_wrong()

    def _check_clip(self) -> None:
        for name in ("clip_min", "clip_max"):
            value = getattr(self, name)
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise ValueError(f"RewardConfig.{name}={value} must be a positive finite speedup or None")
        if self.clip_min is not None and self.clip_max is not None and self.clip_min >= self.clip_max:
            raise ValueError(f"RewardConfig: clip_min={self.clip_min} must be below clip_max={self.clip_max}")
        if self.speedup_transform == "clipped" and self.clip_min is None and self.clip_max is None:
            raise ValueError("RewardConfig: speedup_transform='clipped' needs clip_min and/or clip_max; "
                             "set them or use speedup_transform='linear'")

    def _check_milestones(self) -> None:
        if self.speedup_transform != "milestones":
            return
        t = self.milestone_thresholds
        if not t:
            raise ValueError("RewardConfig: speedup_transform='milestones' needs milestone_thresholds, e.g. (1.05,)")
        if any(not (x > 0 and math.isfinite(x)) for x in t) or any(b <= a for a, b in itertools.pairwise(t)):
            raise ValueError(f"RewardConfig.milestone_thresholds={t} must be positive, finite and increasing")

    def _check_correct_above_wrong(self) -> None:
        # A correct kernel must never score below a wrong one, or the policy learns to be wrong when slow.
        lowest = self.min_correct_total
        if lowest < self.wrong_reward:
            raise ValueError(
                f"RewardConfig: a correct kernel could score {lowest:g}, below wrong_reward={self.wrong_reward:g} "
                f"(speedup_transform={self.speedup_transform!r}, clip_min={self.clip_min}, "
                f"correct_bonus={self.correct_bonus:g}, speedup_weight={self.speedup_weight:g}); "
                "set or raise clip_min, raise correct_bonus, lower speedup_weight or lower wrong_reward")

    @property
    def min_correct_total(self) -> float:
        """The lowest reward a CORRECT, ungated result can get."""
        low = _transform(self.clip_min if self.clip_min is not None else 0.0, self)
        if self.coverage_weighting:
            low = min(low, 0.0)  # coverage may scale a positive speed term down to 0
        return self.correct_bonus + self.speedup_weight * low

    @property
    def max_total(self) -> float:
        """The highest reward any result can get (inf when the speed term is unbounded above)."""
        if self.speedup_transform == "milestones":
            rungs = len(self.milestone_thresholds) * (2 if self.baseline == "both" else 1)
            high = float(rungs)
        else:
            high = _transform(self.clip_max, self) if self.clip_max is not None else math.inf
        return self.correct_bonus + self.speedup_weight * high + self.structural_weight + self.ranker_weight


def _transform(speedup: float, config: RewardConfig) -> float:
    """The speed term of one speedup before weighting (continuous transforms only)."""
    if config.speedup_transform == "milestones":
        return 0.0
    s = speedup
    if config.clip_min is not None:
        s = max(s, config.clip_min)
    if config.clip_max is not None:
        s = min(s, config.clip_max)
    if config.speedup_transform == "log":
        return math.log(s) if s > 0 else -math.inf
    return s


# --------------------------------------------------------------------------------------------------
# Presets


def kevin() -> RewardConfig:
    """Kevin (arXiv 2507.11948): s = 0.3·1[correct] + speedup·1[correct], speedup against eager, unclipped.

    Kevin also gives 0 to answers that use torch ops or have no kernel; here the evaluator's policy turns
    those into POLICY_VIOLATION, which the gate maps to `wrong_reward` = 0.
    """
    return RewardConfig(correct_bonus=0.3, wrong_reward=0.0, speedup_transform="linear", speedup_weight=1.0,
                        clip_min=None, clip_max=None, baseline="eager", structural_weight=0.0,
                        ranker_weight=0.0, coverage_weighting=False)


def cuda_agent() -> RewardConfig:
    """CUDA Agent (arXiv 2602.24286) milestones: −1 wrong, 1 correct, 2 more than 5% faster than eager,
    3 more than 5% faster than eager and torch.compile. (Raw speedup as the reward lowered its
    "faster than compile" rate from 96.8% to 60.4%; milestones are robust to timing noise.)"""
    return RewardConfig(correct_bonus=1.0, wrong_reward=-1.0, speedup_transform="milestones", speedup_weight=1.0,
                        clip_min=None, clip_max=None, baseline="both", milestone_thresholds=(1.05,),
                        structural_weight=0.0, ranker_weight=0.0, coverage_weighting=False)


def cudaperf() -> RewardConfig:
    """Ours: 1[correct]·(1 + ln clip(s, 0.5, 10) + 0.2·structure + 0.1·ranker), positive credit × coverage.

    Why each term:
    - gate and bonus 1: correctness first; every failure is 0 (no partial credit for compiling, Kevin).
      The bonus exceeds |ln 0.5|, so even a slow correct kernel beats a wrong one.
    - ln(speedup): scale invariant (2× faster is worth the same on a 10 µs and a 10 ms task, so easy tasks
      with huge ratios do not dominate the batch) and compresses the multiplicative timing noise; clipped to
      [0.5, 10] to bound advantages and the pull of measurement artefacts.
    - baseline "both": speed against the faster of eager and torch.compile, so beating only eager is not
      enough (CUDA Agent's lesson).
    - structure (weight 0.2, only for CORRECT results, only for kernels that ran): a denser signal that
      names causes (coalescing, occupancy, ...), small enough never to outweigh a 25% speedup.
    - ranker (weight 0.1): the offline pairwise ranker's opinion, a smoother speed estimate, kept small
      because a learned proxy can be gamed.
    - coverage weighting (Dr. Kernel): credit shrinks with the share of GPU time spent outside the
      candidate's kernels (torch fallbacks, decoys); penalties are not softened.
    """
    return RewardConfig()


PRESETS: dict[str, Callable[[], RewardConfig]] = {"kevin": kevin, "cuda-agent": cuda_agent, "cudaperf": cudaperf}


def get_preset(name: str) -> RewardConfig:
    """The `RewardConfig` of a preset name, or of a dotted path "package.module:attribute" naming a
    `RewardConfig` or a function of no arguments returning one (the escape hatch for new recipes)."""
    key = name.strip().lower().replace("_", "-")
    if key in PRESETS:
        return PRESETS[key]()
    if ":" not in name:
        raise ValueError(f"unknown reward preset {name!r}: use one of {sorted(PRESETS)} or 'package.module:function'")
    obj = import_object(name)
    config = obj() if callable(obj) and not isinstance(obj, RewardConfig) else obj
    if not isinstance(config, RewardConfig):
        raise TypeError(f"reward preset {name!r} gave {type(config).__name__}, expected a RewardConfig")
    return config


def resolve_config(config: RewardConfig | str | None) -> RewardConfig:
    """A `RewardConfig` from a config, a preset name or dotted path, or None (the `cudaperf` preset)."""
    if config is None:
        return RewardConfig()
    if isinstance(config, RewardConfig):
        return config
    return get_preset(config)


def import_object(path: str) -> object:
    """The object named by "package.module:attribute[.attribute]" (ValueError with the reason if none)."""
    module_name, _, attr = path.partition(":")
    try:
        obj: object = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ValueError(f"cannot import {path!r}: {exc}") from exc
    return obj


# --------------------------------------------------------------------------------------------------
# The reward


def is_applicable(result: EvalResult) -> bool:
    """False when the outcome says nothing about the candidate (SKIPPED, HARNESS_ERROR)."""
    return result.outcome not in NOT_APPLICABLE_OUTCOMES


def compute_reward(
    result: EvalResult,
    features: Sequence[KernelFeatures] = (),
    ranker_score: float | None = None,
    config: RewardConfig = RewardConfig(),  # frozen: a shared default is safe
    *,
    kernel_time_ms: Mapping[str, float] | None = None,
) -> RewardBreakdown:
    """The reward of one evaluation; never raises on odd records (NaN speedups, partial features).

    `features`: the candidate's kernels (any order). `ranker_score`: in [0, 1], or None. `kernel_time_ms`:
    GPU time per kernel name from the coverage profiler; a kernel absent from a non-empty mapping never
    ran. (Read from `result.kernel_time_ms` when the record carries that field.)
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
        times = kernel_time_ms if kernel_time_ms is not None else getattr(result, "kernel_time_ms", None)
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
    coverage = _finite(result.coverage)
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
        eager = (getattr(result, "speedups", None) or {}).get("naive_cuda")
    return _positive(eager), _positive(result.speedup_vs_compile)


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
    return config.speedup_weight * _transform(speedup, config)


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
                     times: Mapping[str, float] | None, config: RewardConfig, details: dict[str, float]) -> float:
    if config.structural_weight == 0:
        return 0.0
    coverage = _finite(result.coverage)
    if coverage is not None and coverage <= 0:  # the profiler saw none of the candidate's kernels run
        details["structural.no_own_kernel_ran"] = 1.0
        return 0.0
    score, parts = structural_score(features, config.structural_weights, kernel_time_ms=times,
                                    require_launch_evidence=config.require_launch_evidence)
    details.update({f"structural.{k}": v for k, v in parts.items()})
    details["structural_score"] = score
    return config.structural_weight * score


def _ranker_term(ranker_score: float | None, config: RewardConfig, details: dict[str, float]) -> float:
    score = _finite(ranker_score)
    if score is None or config.ranker_weight == 0:
        return 0.0
    details["ranker_score"] = score
    return config.ranker_weight * min(1.0, max(0.0, score))


def _finite(x: object) -> float | None:
    """A finite float, or None for None / NaN / inf / anything that is not a number."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):  # Real: numpy scalars too
        return None
    return float(x) if math.isfinite(x) else None


def _positive(x: object) -> float | None:
    value = _finite(x)
    return value if value is not None and value > 0 else None


# --------------------------------------------------------------------------------------------------
# Structural score


class _Absent(enum.Enum):
    MISSING = "missing"  # the input is unknown: the component takes the neutral value
    NOT_APPLICABLE = "not_applicable"  # the component says nothing about this kernel: left out


_Value = float | _Absent


def structural_score(
    features: Sequence[KernelFeatures],
    weights: StructuralWeights | Mapping[str, float] = StructuralWeights(),  # frozen: safe to share
    *,
    kernel_time_ms: Mapping[str, float] | None = None,
    require_launch_evidence: bool = False,
) -> tuple[float, dict[str, float]]:
    """A score in [0, 1] for the kernels of one solution, and its parts.

    Each kernel gets the weighted mean of its components (see `StructuralWeights`), times
    `divergent_barrier_factor` when it has a divergent barrier. Kernels are averaged weighted by their GPU
    time when every kernel's time is known, else uniformly. A kernel known never to have launched (absent
    from a non-empty `kernel_time_ms`, or zero time / launches in its `dynamic` features) scores 0, as does
    one with no launch evidence when `require_launch_evidence`. No kernels: 0.
    Parts: "kernels", "never_launched", "launch_unknown", the mean of each component over the kernels that
    ran, and "missing.<component>" = number of kernels whose input for it was missing.
    """
    w = weights if isinstance(weights, StructuralWeights) else StructuralWeights(**weights)
    kernels = [f for f in features if isinstance(f, KernelFeatures)]
    parts: dict[str, float] = {"kernels": float(len(kernels)), "never_launched": 0.0, "launch_unknown": 0.0}
    if not kernels:
        return 0.0, parts
    times: dict[str, float] = {}
    for name, ms in (kernel_time_ms or {}).items():  # instantiations of one template share a base name
        if _finite(ms) is not None:
            times[kernel_identifier(name)] = times.get(kernel_identifier(name), 0.0) + float(ms)
    scored: list[tuple[float, float | None]] = []  # (score, GPU time or None) per kernel
    kernel_parts: list[dict[str, float]] = []
    for f in kernels:
        launched, time_ms = _launch_evidence(f, times)
        parts["launch_unknown"] += float(launched is None)
        if launched is False or (launched is None and require_launch_evidence):
            parts["never_launched"] += float(launched is False)
            scored.append((0.0, 0.0 if launched is False else time_ms))
            continue
        score, kparts = kernel_structural_score(f, w)
        kernel_parts.append(kparts)
        scored.append((score, time_ms))
    parts.update(_summarise(kernel_parts))
    return _combine(scored), parts


def _summarise(kernel_parts: list[dict[str, float]]) -> dict[str, float]:
    """Mean of each component over the scored kernels; counts for the "missing.*" and other markers."""
    out: dict[str, float] = {}
    for name in _COMPONENT_NAMES:
        values = [p[name] for p in kernel_parts if name in p]
        if values:
            out[name] = sum(values) / len(values)
    for p in kernel_parts:
        for key, value in p.items():
            if key not in _COMPONENT_NAMES:
                out[key] = out.get(key, 0.0) + value
    return out


def _combine(scored: list[tuple[float, float | None]]) -> float:
    known = [t for _, t in scored if t is not None]
    if len(known) == len(scored) and sum(known) > 0:  # every kernel's GPU time is known: weight by it
        value = sum(s * (t or 0.0) for s, t in scored) / sum(known)
    else:
        value = sum(s for s, _ in scored) / len(scored)
    return min(1.0, max(0.0, value))


def kernel_structural_score(feature: KernelFeatures, weights: StructuralWeights) -> tuple[float, dict[str, float]]:
    """The structural score of one kernel in [0, 1], with its component values and "missing.*" markers."""
    parts: dict[str, float] = {}
    num = den = 0.0
    for name, component in _COMPONENTS.items():
        value = component(feature, weights)
        if value is _Absent.NOT_APPLICABLE:
            continue
        if value is _Absent.MISSING:
            parts[f"missing.{name}"] = 1.0
            value = weights.neutral
        parts[name] = value
        num += getattr(weights, name) * value
        den += getattr(weights, name)
    score = num / den if den > 0 else weights.neutral
    if feature.divergent_barriers:
        parts["divergent_barriers"] = float(len(tuple(feature.divergent_barriers)))
        score *= weights.divergent_barrier_factor
    return min(1.0, max(0.0, score)), parts


def _global_accesses(f: KernelFeatures) -> list[MemoryAccess]:
    return [a for a in f.accesses or () if isinstance(a, MemoryAccess) and a.space == "global"]


def _coalescing(f: KernelFeatures, w: StructuralWeights) -> _Value:
    accesses = _global_accesses(f)
    if not accesses:
        return _Absent.MISSING
    return sum(_access_efficiency(a.coalescing, a.stride_elements, w.neutral) for a in accesses) / len(accesses)


def _access_efficiency(cls: CoalescingClass | None, stride: int | None, neutral: float) -> float:
    """Useful share of the bytes a warp's access moves, by coalescing class."""
    if cls in (CoalescingClass.COALESCED, CoalescingClass.BROADCAST):
        return 1.0
    if cls is CoalescingClass.UNCOALESCED:
        return 0.0
    if cls is CoalescingClass.STRIDED:
        # stride c elements: each 32-byte sector serves ~1/c of what it moves
        return 1.0 / abs(stride) if isinstance(stride, int) and abs(stride) >= 1 else 0.25
    return neutral  # UNKNOWN or unclassified: the analysis could not tell


def _occupancy(f: KernelFeatures, w: StructuralWeights) -> _Value:
    occ = _finite(getattr(f.occupancy, "occupancy", None))
    if occ is None:
        return _Absent.MISSING
    return min(1.0, max(0.0, occ) / w.occupancy_saturation)


def _bank_conflicts(f: KernelFeatures, w: StructuralWeights) -> _Value:
    shared = [a for a in f.accesses or () if isinstance(a, MemoryAccess) and a.space == "shared"]
    if not shared:
        return _Absent.NOT_APPLICABLE
    degrees = [a.bank_conflict_degree for a in shared if isinstance(a.bank_conflict_degree, int)]
    if not degrees:
        return _Absent.MISSING
    return sum(1.0 / min(32, max(1, d)) for d in degrees) / len(degrees)


def _synchronization(f: KernelFeatures, w: StructuralWeights) -> _Value:
    redundant = len(f.redundant_barriers or ())
    barriers = max(_num(f.barriers), redundant)
    if barriers <= 0:
        return _Absent.NOT_APPLICABLE
    return 1.0 - redundant / barriers


def _spills(f: KernelFeatures, w: StructuralWeights) -> _Value:
    sass_local = sum(_count(f.sass, k) for k in SASS_LOCAL_KEYS)
    if f.resources is None and not any(k in (f.sass or {}) for k in SASS_LOCAL_KEYS):
        return _Absent.MISSING
    r = f.resources
    spilled = max(0.0, _num(r.spill_store_bytes)) + max(0.0, _num(r.spill_load_bytes)) if r is not None else 0.0
    local = sass_local > 0 or (r is not None and _num(r.stack_frame_bytes) > 0)
    value = 1.0 / (1.0 + spilled / w.spill_scale_bytes)
    return min(value, w.local_memory_factor) if local else value


def _vectorization(f: KernelFeatures, w: StructuralWeights) -> _Value:
    accesses = _global_accesses(f)
    if accesses:
        vectorised = sum(1 for a in accesses if _num(a.vector_width) > 1)
        return min(len(accesses), max(vectorised, _num(f.vectorized_accesses))) / len(accesses)
    if any(_count(f.sass, k) > 0 for k in SASS_VECTOR_KEYS):
        return 1.0
    return _Absent.MISSING


def _intensity(f: KernelFeatures, w: StructuralWeights) -> _Value:
    fraction = _finite((f.dynamic or {}).get(DYNAMIC_ROOFLINE_FRACTION))
    return _Absent.MISSING if fraction is None else min(1.0, max(0.0, fraction))


def _tensor_cores(f: KernelFeatures, w: StructuralWeights) -> _Value:
    used = any(_count(f.sass, k) > 0 for k in SASS_TENSOR_KEYS)
    if f.roofline_regime == "memory":
        return _Absent.NOT_APPLICABLE
    if f.roofline_regime == "compute":
        return 1.0 if used else (0.0 if f.sass else _Absent.MISSING)  # SASS read, no tensor op
    return 1.0 if used else _Absent.MISSING  # regime unknown: credit visible use, assume nothing else


_COMPONENTS: dict[str, Callable[[KernelFeatures, StructuralWeights], _Value]] = {
    "coalescing": _coalescing,
    "occupancy": _occupancy,
    "bank_conflicts": _bank_conflicts,
    "synchronization": _synchronization,
    "spills": _spills,
    "vectorization": _vectorization,
    "intensity": _intensity,
    "tensor_cores": _tensor_cores,
}


def _count(counts: Mapping[str, object] | None, key: str) -> float:
    return _num((counts or {}).get(key))


def _num(x: object) -> float:
    """A finite number, or 0 for None / NaN / non-numbers (fields of records decoded from bad JSON)."""
    value = _finite(x)
    return value if value is not None else 0.0


def _launch_evidence(f: KernelFeatures, times: Mapping[str, float]) -> tuple[bool | None, float | None]:
    """(ran?, GPU time in ms) — None where unknown. A non-empty profiler table lists every kernel that ran."""
    if times:
        time_ms = times.get(kernel_identifier(str(f.kernel)), 0.0)
        return time_ms > 0, time_ms
    dynamic = f.dynamic or {}
    time_ms = _finite(dynamic.get(DYNAMIC_GPU_TIME_MS))
    if time_ms is not None:
        return time_ms > 0, time_ms
    launches = _finite(dynamic.get(DYNAMIC_LAUNCHES))
    if launches is not None:
        return launches > 0, None
    return None, None




# --------------------------------------------------------------------------------------------------
# Multi-turn returns


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


__all__ = [
    "BASELINES", "DYNAMIC_GPU_TIME_MS", "DYNAMIC_LAUNCHES", "DYNAMIC_ROOFLINE_FRACTION", "PRESETS",
    "SPEEDUP_TRANSFORMS", "RewardConfig", "StructuralWeights", "compute_reward", "cuda_agent", "cudaperf",
    "get_preset", "import_object", "is_applicable", "kernel_structural_score", "kevin", "resolve_config",
    "structural_score", "turn_returns",
]
