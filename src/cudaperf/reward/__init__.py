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

Modules: `config.py` (RewardConfig, StructuralWeights), `presets.py` (named recipes), `unified.py`
(compute_reward), `structural.py` (structural_score), `turns.py` (turn_returns), `values.py` (numbers from
records).

Not covered: running the evaluator, the structural analysis or the ranker (this package only reads their
records); TRL and verl wiring (`cudaperf.train.reward_functions`); per-turn advantage estimation beyond
`turn_returns`. No I/O and no torch: it loads in trainer processes and Ray actors as they are.
"""

from cudaperf.reward.config import BASELINES, SPEEDUP_TRANSFORMS, RewardConfig, StructuralWeights
from cudaperf.reward.presets import (
    PRESETS,
    cuda_agent,
    cudaperf,
    get_preset,
    import_object,
    kevin,
    resolve_config,
)
from cudaperf.reward.structural import (
    DYNAMIC_GPU_TIME_MS,
    DYNAMIC_LAUNCHES,
    DYNAMIC_ROOFLINE_FRACTION,
    kernel_structural_score,
    structural_score,
)
from cudaperf.reward.turns import turn_returns
from cudaperf.reward.unified import NOT_APPLICABLE_OUTCOMES, SPEEDUP_BASELINES, compute_reward, is_applicable

__all__ = [
    "BASELINES", "DYNAMIC_GPU_TIME_MS", "DYNAMIC_LAUNCHES", "DYNAMIC_ROOFLINE_FRACTION",
    "NOT_APPLICABLE_OUTCOMES", "PRESETS", "SPEEDUP_BASELINES", "SPEEDUP_TRANSFORMS", "RewardConfig",
    "StructuralWeights",
    "compute_reward", "cuda_agent", "cudaperf", "get_preset", "import_object", "is_applicable",
    "kernel_structural_score", "kevin", "resolve_config", "structural_score", "turn_returns",
]
