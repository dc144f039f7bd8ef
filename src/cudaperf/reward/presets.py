"""Named reward presets: published recipes (`kevin`, `cuda-agent`) and ours (`cudaperf`), plus a dotted-path
escape hatch ("package.module:function") for new recipes.

Not covered: what each field means (`config.py`), the computation (`unified.py`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from cudaperf.reward.config import RewardConfig


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
    return RewardConfig(correct_bonus=1.0, wrong_reward=-1.0, speedup_transform="milestones",
                        speedup_weight=1.0, clip_min=None, clip_max=None, baseline="both",
                        milestone_thresholds=(1.05,),
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


PRESETS: dict[str, Callable[[], RewardConfig]] = {"kevin": kevin, "cuda-agent": cuda_agent,
                                                  "cudaperf": cudaperf}


def get_preset(name: str) -> RewardConfig:
    """The `RewardConfig` of a preset name, or of a dotted path "package.module:attribute" naming a
    `RewardConfig` or a function of no arguments returning one (the escape hatch for new recipes)."""
    key = name.strip().lower().replace("_", "-")
    if key in PRESETS:
        return PRESETS[key]()
    if ":" not in name:
        raise ValueError(f"unknown reward preset {name!r}: use one of {sorted(PRESETS)} "
                         "or 'package.module:function'")
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
