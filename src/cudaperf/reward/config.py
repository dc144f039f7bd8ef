"""The reward's configuration: `RewardConfig` (every weight, gate and transform) and `StructuralWeights`.

Not covered: the presets that fill these in (`presets.py`) and the computation (`unified.py`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Literal

SpeedupTransform = Literal["log", "clipped", "linear", "milestones"]
Baseline = Literal["eager", "compile", "both"]

SPEEDUP_TRANSFORMS: tuple[str, ...] = ("log", "clipped", "linear", "milestones")
BASELINES: tuple[str, ...] = ("eager", "compile", "both")


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
        negative = [n for n in COMPONENT_NAMES if getattr(self, n) < 0]
        if negative:
            raise ValueError(f"StructuralWeights: {', '.join(negative)} must be >= 0 "
                             "(set a weight to 0 to drop it)")
        if sum(getattr(self, n) for n in COMPONENT_NAMES) <= 0:
            raise ValueError("StructuralWeights: all component weights are 0; "
                             "set RewardConfig.structural_weight=0 to switch the structural term off instead")
        for name in ("divergent_barrier_factor", "local_memory_factor", "neutral"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"StructuralWeights.{name}={getattr(self, name)} must lie in [0, 1]")
        if not 0.0 < self.occupancy_saturation <= 1.0:
            raise ValueError(f"StructuralWeights.occupancy_saturation={self.occupancy_saturation} "
                             "must lie in (0, 1]")
        if self.spill_scale_bytes <= 0:
            raise ValueError(f"StructuralWeights.spill_scale_bytes={self.spill_scale_bytes} must be > 0")


COMPONENT_NAMES = ("coalescing", "occupancy", "bank_conflicts", "synchronization", "spills",
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
            raise ValueError(f"RewardConfig.speedup_transform={self.speedup_transform!r}: "
                             f"use one of {SPEEDUP_TRANSFORMS}")
        if self.baseline not in BASELINES:
            raise ValueError(f"RewardConfig.baseline={self.baseline!r}: use one of {BASELINES}")
        for name in ("speedup_weight", "structural_weight", "ranker_weight"):
            if getattr(self, name) < 0:
                raise ValueError(f"RewardConfig.{name}={getattr(self, name)} must be >= 0 "
                                 "(set it to 0 to drop the term)")
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
            raise ValueError("RewardConfig: speedup_transform='milestones' needs milestone_thresholds, "
                             "e.g. (1.05,)")
        if any(not (x > 0 and math.isfinite(x)) for x in t) or any(b <= a for a, b in itertools.pairwise(t)):
            raise ValueError(f"RewardConfig.milestone_thresholds={t} must be positive, finite and increasing")

    def _check_correct_above_wrong(self) -> None:
        # A correct kernel must never score below a wrong one, or the policy learns to be wrong when slow.
        lowest = self.min_correct_total
        if lowest < self.wrong_reward:
            raise ValueError(
                f"RewardConfig: a correct kernel could score {lowest:g}, "
                f"below wrong_reward={self.wrong_reward:g} "
                f"(speedup_transform={self.speedup_transform!r}, clip_min={self.clip_min}, "
                f"correct_bonus={self.correct_bonus:g}, speedup_weight={self.speedup_weight:g}); "
                "set or raise clip_min, raise correct_bonus, lower speedup_weight or lower wrong_reward")

    @property
    def min_correct_total(self) -> float:
        """The lowest reward a CORRECT, ungated result can get."""
        low = transform_speedup(self.clip_min if self.clip_min is not None else 0.0, self)
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
            high = transform_speedup(self.clip_max, self) if self.clip_max is not None else math.inf
        return self.correct_bonus + self.speedup_weight * high + self.structural_weight + self.ranker_weight


def transform_speedup(speedup: float, config: RewardConfig) -> float:
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
