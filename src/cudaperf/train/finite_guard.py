"""Training that survives a non-finite gradient, and checkpoints that are never resumed or promoted with
non-finite weights.

In bfloat16 mixed precision nothing skips an optimiser step whose gradient holds an infinity or a NaN
(float16's loss scaler does; bfloat16 runs without one). Gradient clipping then multiplies every gradient
by a NaN coefficient and the optimiser writes NaN into every trainable weight: the policy samples from NaN
probabilities at its next rollout and the run dies (a device-side assert), and its later checkpoints are
NaN too. Covers:
- `gradient_guard`: a `transformers.TrainerCallback` that, before each optimiser step (after clipping),
  drops the gradients when any trainable parameter's is not finite, so the optimiser leaves the weights
  as they were (its per-parameter step counters too); each skip is a metrics record `guard` and a line on
  stderr. The batch's data is still consumed: a skipped step is a lost step, not a retried one.
- `weights_finite`: whether every floating tensor of a checkpoint's safetensors files is finite.

Not covered: why a gradient was not finite, or which (the guard records that it happened and at which
step; it runs after clipping, which has already spread one NaN to every gradient); float16 runs
(their loss scaler already skips); weights stored other than as safetensors (checked as finite).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

GUARD_RECORD = "guard"


def gradients_finite(parameters: Any) -> bool:
    """Whether every gradient of `parameters` that exists is finite (one device sync)."""
    import torch

    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return True
    return bool(torch.stack([torch.isfinite(g).all() for g in grads]).all())


def gradient_guard(writer: Any) -> Any:
    """The callback of the module docstring; `writer`: the run's `MetricsWriter`."""
    from transformers import TrainerCallback

    class GradientGuard(TrainerCallback):
        def __init__(self) -> None:
            self.skipped = 0

        def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
            trainable = [p for p in model.parameters() if p.requires_grad]
            if gradients_finite(trainable):
                return
            for p in trainable:
                p.grad = None  # torch optimisers leave a parameter without a gradient untouched
            self.skipped += 1
            step = state.global_step + 1
            writer.write(GUARD_RECORD, step, {"nonfinite_gradient_skipped": 1,
                                              "nonfinite_gradient_skips": self.skipped})
            print(f"step {step}: a non-finite gradient; the optimiser step is skipped (weights kept), "
                  f"{self.skipped} so far", file=sys.stderr, flush=True)

    return GradientGuard()


def weights_finite(checkpoint: str | Path) -> bool:
    """Whether every floating tensor in the `*.safetensors` files of `checkpoint` is finite (a folder
    without any: True)."""
    import torch
    from safetensors import safe_open

    for path in sorted(Path(checkpoint).glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                tensor = f.get_tensor(name)
                if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                    return False
    return True


__all__ = ["GUARD_RECORD", "gradient_guard", "gradients_finite", "weights_finite"]
