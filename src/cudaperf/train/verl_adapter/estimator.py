"""The turn-level advantage estimator, registered in verl (imports verl: load it only inside a verl run).

`algorithm.adv_estimator: cudaperf_turn` selects Kevin's per-turn credit: G_t = sum_{k>=t} gamma^(k-t) s_k,
group-relative over every turn of every trajectory of a prompt (`cudaperf_turn_max`: the 'max' form,
max_{k>=t} gamma^(k-t) s_k). gamma is `algorithm.gamma` (Kevin: 0.4; verl's default 1.0 makes it the
plain sum of the remaining scores), the std division follows `algorithm.norm_adv_by_std_in_grpo`.
The arithmetic is `verl_adapter.credit.turn_level_advantages`; the turn scores arrive in
`token_level_rewards` as the refine agent loop placed them (`verl_adapter.agent_loop`).

Not covered: the KL term (keep `algorithm.use_kl_in_reward=False`: a per-token KL penalty would be
summed into the turn scores), critics (this is a critic-free, GRPO-style estimator).
"""

from __future__ import annotations

from typing import Any

from verl.trainer.ppo.core_algos import register_adv_est

from cudaperf.train.verl_adapter.credit import turn_level_advantages

ESTIMATOR = "cudaperf_turn"
ESTIMATOR_MAX = "cudaperf_turn_max"


def _setting(config: Any, name: str, default: Any) -> Any:
    if config is None:
        return default
    value = config.get(name, default) if hasattr(config, "get") else getattr(config, name, default)
    return default if value is None else value


def _estimate(mode: str, token_level_rewards: Any, response_mask: Any, index: Any, config: Any,
              epsilon: float) -> tuple[Any, Any]:
    if index is None:
        raise ValueError(f"{ESTIMATOR} needs the group index (verl's non_tensor_batch['uid'])")
    if _setting(config, "use_kl_in_reward", False):
        raise ValueError(f"{ESTIMATOR}: set algorithm.use_kl_in_reward=False (a per-token KL penalty "
                         "would be read as turn scores); use the actor's KL loss instead")
    advantages, returns = turn_level_advantages(
        token_level_rewards, response_mask, list(index), gamma=float(_setting(config, "gamma", 1.0)),
        mode=mode, norm_by_std=bool(_setting(config, "norm_adv_by_std_in_grpo", True)), epsilon=epsilon)
    device = token_level_rewards.device
    return advantages.to(device), returns.to(device)


@register_adv_est(ESTIMATOR)
def compute_turn_advantage(token_level_rewards: Any, response_mask: Any, index: Any = None,
                           config: Any = None, epsilon: float = 1e-6, **kwargs: Any) -> tuple[Any, Any]:
    """verl's estimator signature: (advantages, returns), both (batch, response_length)."""
    return _estimate("sum", token_level_rewards, response_mask, index, config, epsilon)


@register_adv_est(ESTIMATOR_MAX)
def compute_turn_advantage_max(token_level_rewards: Any, response_mask: Any, index: Any = None,
                               config: Any = None, epsilon: float = 1e-6, **kwargs: Any) -> tuple[Any, Any]:
    """As `compute_turn_advantage` with the 'max' return."""
    return _estimate("max", token_level_rewards, response_mask, index, config, epsilon)


__all__ = ["ESTIMATOR", "ESTIMATOR_MAX", "compute_turn_advantage", "compute_turn_advantage_max"]
